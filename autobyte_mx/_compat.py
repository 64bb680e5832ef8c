"""Import MXNet 1.9.1 once, with the one fix it needs on numpy >= 1.24.

MXNet 1.9.1 still uses ``numpy.bool``, which numpy 1.24 removed; the alias is restored here so
users never have to patch numpy themselves. A missing MXNet is reported with the fix.
"""

from __future__ import annotations

from types import ModuleType

from common.errors import FrameworkMissingError

__all__ = ["INSTALL_HINT", "import_mxnet"]

INSTALL_HINT = "autobyte_mx needs mxnet==1.9.1: pip install 'autobyte[mx]'"


def import_mxnet() -> ModuleType:
    import numpy

    if "bool" not in numpy.__dict__:
        numpy.bool = numpy.bool_  # type: ignore[attr-defined]
    try:
        import mxnet
    except ImportError as exc:
        raise FrameworkMissingError(f"{INSTALL_HINT} ({exc})") from exc
    module: ModuleType = mxnet
    version = getattr(module, "__version__", "?")
    if not str(version).startswith("1.9"):
        raise FrameworkMissingError(f"{INSTALL_HINT}; found mxnet {version}")
    return module

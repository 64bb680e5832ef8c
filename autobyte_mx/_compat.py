"""Import MXNet 1.9.1 once, with the one fix it needs on numpy >= 1.24.

MXNet 1.9.1 still uses ``numpy.bool``, which numpy 1.24 removed; the alias is restored here so
users never have to patch numpy themselves. A missing MXNet is reported with the fix. On the
scheduler and server roles ``import mxnet`` runs the node until the job ends, so their
liveness watch starts here, first.
"""

from __future__ import annotations

import os
import socket
import sys
from types import ModuleType

from common.errors import FrameworkMissingError

__all__ = ["INSTALL_HINT", "import_mxnet"]

INSTALL_HINT = "autobyte_mx needs mxnet==1.9.1: pip install 'autobyte[mx]'"


def import_mxnet() -> ModuleType:
    import numpy

    if "bool" not in numpy.__dict__:
        numpy.bool = numpy.bool_  # type: ignore[attr-defined]
    role = os.environ.get("DMLC_ROLE", "worker")
    if role in ("server", "scheduler") and "mxnet" not in sys.modules:
        _watch_peers(role)
    try:
        import mxnet
    except ImportError as exc:
        raise FrameworkMissingError(f"{INSTALL_HINT} ({exc})") from exc
    module: ModuleType = mxnet
    version = getattr(module, "__version__", None)
    if version is None and role == "server":
        return module  # called inside the server's ``import mxnet`` (its optimizer unpickled)
    if version is None or not str(version).startswith("1.9"):
        raise FrameworkMissingError(f"{INSTALL_HINT}; found mxnet {version}")
    return module


def _watch_peers(role: str) -> None:
    from autobyte_mx._watchdog import watch_peers
    from common.config import Config

    root = os.environ.get("DMLC_PS_ROOT_URI", "")
    try:
        scheduler = (socket.gethostbyname(root), int(os.environ.get("DMLC_PS_ROOT_PORT", "")))
    except (OSError, ValueError):
        scheduler = None
    watch_peers(role, Config.from_env().grace_s, scheduler)

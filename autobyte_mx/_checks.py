"""Run-time checks for the MXNet settings that overlapping communication needs.

Per-layer overlap needs each gradient to become ready on its own: bulk execution must be off
(MXNET_EXEC_BULK_EXEC_TRAIN=0) and a hybridized block needs static_alloc and static_shape;
otherwise every gradient lands at the end of backward and nothing can overlap it.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any

from common.errors import ConfigError

__all__ = ["OverlapWarning", "big_array_bound", "check_environment", "install_hybridize_check"]

_PS_VARS = ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER",
            "DMLC_NUM_WORKER")


def big_array_bound() -> int:
    """Elements from which the native store spreads a key over all servers (MXNet's own
    MXNET_KVSTORE_BIGARRAY_BOUND, read as the native store reads it)."""
    raw = os.environ.get("MXNET_KVSTORE_BIGARRAY_BOUND", "1000000")
    try:
        bound = int(raw)
    except ValueError:
        bound = 0
    if bound < 2:
        raise ConfigError(f"MXNET_KVSTORE_BIGARRAY_BOUND must be an integer of at least 2, "
                          f"got {raw!r}")
    return bound


class OverlapWarning(RuntimeWarning):
    """A setting keeps communication from overlapping computation (training stays correct)."""


def check_environment() -> None:
    missing = [name for name in _PS_VARS if not os.environ.get(name)]
    if missing:
        raise ConfigError(
            f"kvstore 'autobyte' runs on a parameter server but {', '.join(missing)} "
            "is not set: start the job with `autobyte launch` (common.launch) or set the "
            "DMLC_* variables as for kvstore='dist_sync'")
    if os.environ.get("MXNET_ENGINE_TYPE", "") == "NaiveEngine":
        raise ConfigError("MXNET_ENGINE_TYPE=NaiveEngine runs every operation inline, so "
                          "AutoByte's gates cannot wait; unset it (the default engine is needed)")
    bulk = os.environ.get("MXNET_EXEC_BULK_EXEC_TRAIN")
    if bulk != "0":
        warnings.warn(
            f"MXNET_EXEC_BULK_EXEC_TRAIN={bulk or '<unset, default 1>'}: MXNet bulks backward "
            "operators, so all gradients become ready together and AutoByte cannot overlap "
            "communication with backward; set MXNET_EXEC_BULK_EXEC_TRAIN=0 before importing "
            "mxnet", OverlapWarning, stacklevel=3)


def install_hybridize_check(hybrid_block: Any) -> None:
    """Warn when a block is hybridized without static_alloc=True and static_shape=True."""
    original = hybrid_block.hybridize
    if getattr(original, "_autobyte", False):
        return

    @functools.wraps(original)
    def hybridize(self: Any, *args: Any, **kwargs: Any) -> Any:
        active = args[0] if args else kwargs.get("active", True)
        if active and not (kwargs.get("static_alloc") and kwargs.get("static_shape")):
            warnings.warn(
                f"{type(self).__name__}.hybridize() without static_alloc=True and "
                "static_shape=True: the cached graph hands out all gradients at the end of "
                "backward, so AutoByte cannot overlap communication; call "
                "hybridize(static_alloc=True, static_shape=True)", OverlapWarning, stacklevel=2)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", OverlapWarning)
                return original(self, *args, **kwargs)
        return original(self, *args, **kwargs)

    hybridize._autobyte = True  # type: ignore[attr-defined]
    hybrid_block.hybridize = hybridize

"""AutoByte for TensorFlow/Keras: ``AutoByteStrategy``, an all-reduce strategy on MWMS.

    import autobyte_tf
    strategy = autobyte_tf.AutoByteStrategy()

TensorFlow is imported on first use of a name that needs it, so ``import autobyte_tf`` works
(and says how to fix it) without TensorFlow installed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from common.errors import FrameworkMissingError
from common.stats import TrainingStats

if TYPE_CHECKING:
    from autobyte_tf._checks import file_barrier
    from autobyte_tf.strategy import AutoByteStrategy

__all__ = ["REQUIRED_TENSORFLOW", "AutoByteStrategy", "TrainingStats", "file_barrier",
           "require_tensorflow"]

REQUIRED_TENSORFLOW = "2.21"
_MISSING = "autobyte_tf needs tensorflow==2.21: pip install 'autobyte[tf]'"
_LAZY = {"AutoByteStrategy": "autobyte_tf.strategy", "file_barrier": "autobyte_tf._checks"}


def require_tensorflow() -> Any:
    """Import TensorFlow or raise ``FrameworkMissingError`` saying how to install it."""
    try:
        tf = importlib.import_module("tensorflow")
    except ImportError as exc:
        raise FrameworkMissingError(f"{_MISSING} ({exc})") from exc
    version = str(getattr(tf, "__version__", "?"))
    if not version.startswith(REQUIRED_TENSORFLOW + "."):
        raise FrameworkMissingError(f"{_MISSING} (found tensorflow {version})")
    return tf


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'autobyte_tf' has no attribute {name!r}")
    if name == "AutoByteStrategy":
        require_tensorflow()
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value

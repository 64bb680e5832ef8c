"""``import autobyte_tf`` without TensorFlow: a clear message, not a stack of ImportErrors."""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest

import autobyte_tf
from common.errors import FrameworkMissingError


def test_missing_tensorflow_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def no_tf(name: str, *args: Any) -> Any:
        if name == "tensorflow":
            raise ImportError("No module named 'tensorflow'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_tf)
    monkeypatch.delitem(autobyte_tf.__dict__, "AutoByteStrategy", raising=False)
    monkeypatch.delitem(sys.modules, "autobyte_tf.strategy", raising=False)
    with pytest.raises(FrameworkMissingError,
                       match=r"autobyte_tf needs tensorflow==2\.21: pip install 'autobyte\[tf\]'"):
        autobyte_tf.AutoByteStrategy  # noqa: B018


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        autobyte_tf.Nope  # noqa: B018

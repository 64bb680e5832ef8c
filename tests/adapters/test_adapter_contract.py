"""Both adapters keep one public shape: the same names for the same roles, the same signatures.

Each adapter is imported only if its framework is installed; a missing one skips with the
reason. What runs is in each adapter's own tests; this holds the surfaces together.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from common.errors import FrameworkMissingError

pytestmark = pytest.mark.framework

SHARED = ("config", "reconfigure", "expect_steps", "tuning", "close", "step")


def _adapters() -> dict[str, Any]:
    found: dict[str, Any] = {}
    try:
        import autobyte_tf

        autobyte_tf.require_tensorflow()
        found["tensorflow"] = autobyte_tf.AutoByteStrategy
    except FrameworkMissingError as exc:
        pytest.skip(f"tensorflow==2.21 is not importable: {exc}")
    try:
        import autobyte_mx

        found["mxnet"] = autobyte_mx.AutoByte
    except FrameworkMissingError as exc:
        pytest.skip(f"MXNet 1.9.1 is not importable: {exc}")
    return found


def test_both_adapters_offer_the_same_surface_with_the_same_signatures() -> None:
    tf_cls, mx_cls = _adapters().values()
    for name in SHARED:
        tf_attr, mx_attr = inspect.getattr_static(tf_cls, name), inspect.getattr_static(mx_cls,
                                                                                        name)
        assert type(tf_attr) is type(mx_attr), name  # a property on both, or a method on both
        if callable(tf_attr):
            assert inspect.signature(tf_attr) == inspect.signature(mx_attr), name


def test_both_adapters_have_the_same_module_for_each_shared_role() -> None:
    import importlib.util

    for role in ("_control", "_transport", "_stats", "_checks", "_patches", "_sequencer",
                 "demo"):
        for package in ("autobyte_tf", "autobyte_mx"):
            assert importlib.util.find_spec(f"{package}.{role}") is not None, (package, role)

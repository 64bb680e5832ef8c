"""Both adapters keep one public shape: the same names for the same roles, the same signatures.

Each adapter is imported only if its framework is installed; a missing one skips with the
reason. The surfaces are compared here, and one script (``contract_worker.py``) runs the same
checks on both in a real two-worker job; the rest of what runs is in each adapter's own tests.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
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


WORKER = Path(__file__).with_name("contract_worker.py")
ENV = {"OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1",
       "MXNET_EXEC_BULK_EXEC_TRAIN": "0"}


def _switches(configs: list[list[Any]]) -> list[tuple[int, str]]:
    """(step, configuration) where each configuration came into force."""
    seen: list[tuple[int, str]] = []
    for step, config in configs:
        if not seen or seen[-1][1] != config:
            seen.append((step, config))
    return seen


@pytest.mark.distributed
@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_both_adapters_keep_the_same_contract_in_a_real_job(framework: str) -> None:
    """The same script on either adapter, two workers on real collectives or ps-lite:
    the knobs from keywords, errors that name the value, rank 0's switches (fused, native,
    back) taken by every worker at one step, the windows' statistics, equal weights."""
    _adapters()
    from common.launch import launch

    result = launch(framework=framework, command=[sys.executable, str(WORKER), framework],
                    workers=2, env=ENV, stream=None, timeout=180)
    outputs = {n: p.output for n, p in result.processes.items()}
    assert result.returncode == 0, {n: o[-3000:] for n, o in outputs.items()}
    results = sorted((json.loads(line[len("RESULT "):]) for o in outputs.values()
                      for line in o.splitlines() if line.startswith("RESULT ")),
                     key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1], outputs
    start = "partition=4KiB credit=8KiB (2x)"
    for r in results:
        assert r["start"] == start
        assert "partition_bytes=-1" in r["errors"]["partition"]
        assert "partiton_bytes" in r["errors"]["unknown"]
        assert "steps=-3" in r["errors"]["steps"]
        assert r["stats"]["type"] == "TrainingStats" and r["stats"]["steps"] >= 12
        assert r["stats"]["config"] == start
    assert results[0]["configs"] == results[1]["configs"]  # every step, on both workers
    switches = _switches(results[0]["configs"])
    assert [c for _, c in switches] == [start, "partition=16KiB credit=32KiB (2x)",
                                        "native (the framework's own path)", start]
    for (step, _), asked in zip(switches[1:], (2, 6, 10), strict=True):
        assert asked < step <= asked + 2 * 2 + 1, switches  # within two windows of asking
    assert results[0]["weights"] == pytest.approx(results[1]["weights"], rel=1e-6)

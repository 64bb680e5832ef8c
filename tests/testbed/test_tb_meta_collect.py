"""``autobyte meta collect --run`` end to end: one short sweep job of the TensorFlow demo
worker on the shaped testbed (root), its decision log turned into testbed samples."""

from __future__ import annotations

import collections
import importlib.util
from pathlib import Path

import pytest
from tb_helpers import root_only

from common.bench._collect import sweep_plan
from common.cli import main
from common.meta import Dataset
from common.progress import NATIVE
from common.tuners import NATIVE_BYTES

pytestmark = [*root_only, pytest.mark.distributed, pytest.mark.framework, pytest.mark.slow,
              pytest.mark.usefixtures("no_leaks"),
              pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                 reason="needs tensorflow (pip install 'autobyte[tf]')")]


def test_collect_runs_a_sweep_and_keeps_two_samples_per_configuration(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two passes of 10 steps a visit: each configuration's two samples come from two
    segments of the job, the second (back to a traced plan) kept like the first."""
    args = ["--frameworks", "tensorflow", "--models", "cnn", "--rates", "1gbit",
            "--max-configs", "4", "--budget", "1", "--passes", "2", "--sweep-steps", "10"]
    plan = sweep_plan(frameworks=["tensorflow"], models=["cnn"], rates=["1gbit"],
                      max_configs=4, budget_s=1, sweep_steps=10, passes=2)
    assert len(plan) == 1 and plan[0].drawn == 5 and NATIVE in plan[0].configs
    assert len(plan[0].configs) == 10
    out = tmp_path / "tb.npz"
    code = main(["meta", "collect", "--run", *args, "--quiet", "--timeout", "120",
                 "--logs", str(tmp_path / "logs"), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    # 20 windows of 5 steps, 10 steps a visit: the log's first and the first after each of 9
    # switches are left out (one the coordinator did not log is not counted)
    assert "1 first window of the log" in err, err
    data = Dataset.load(out)
    assert data.runs() and all(r.startswith("tensorflow-cnn-1gbit/decisions-")
                               for r in data.runs())
    assert set(data["job_source"].tolist()) == {"testbed"}
    swept = sorted(zip(data["partition_bytes"].tolist(), data["credit_bytes"].tolist(),
                       strict=True))
    counts = collections.Counter(swept)
    assert len(counts) >= 3 and max(counts.values()) <= 2  # at most two a configuration
    assert sum(n == 2 for n in counts.values()) >= 3  # the 10-step mean of most
    planned = {(NATIVE_BYTES, NATIVE_BYTES) if c == NATIVE else c for c in plan[0].configs}
    assert set(swept) <= planned
    assert (NATIVE_BYTES, NATIVE_BYTES) in counts  # native measured like any configuration
    assert (data["speed"] > 0).all()
    job = data.job(0)
    assert job.workers == 2 and job.arch == "allreduce" and job.model == "demo_cnn"
    assert sum(job.layer_bytes) > 100_000 and sum(job.layer_backward_s) > 0
    assert 1e7 < job.bandwidth_up_bps < 2e9  # a measured rate on a 1 Gbit/s link

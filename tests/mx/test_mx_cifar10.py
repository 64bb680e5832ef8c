"""MXNet's distributed CIFAR-10 example (tests/mx/cifar10_worker.py follows it) with the kvstore
name changed to 'autobyte': 2 workers x 2 CPU contexts, ResNet-18, Adam on the one server.
The loss falls, every device and worker holds the same weights, and they equal those of the
same job with 'dist' bitwise (2 workers: the server's sum is order-free)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import JOB_ENV, skip_without_mxnet

from common.launch import launch

skip_without_mxnet()

pytestmark = [pytest.mark.framework, pytest.mark.distributed, pytest.mark.slow]

WORKER = Path(__file__).with_name("cifar10_worker.py")


def run(out: Path, kvstore: str, env: dict[str, str]) -> list[dict[str, object]]:
    result = launch(framework="mxnet", command=[sys.executable, str(WORKER), kvstore, str(out),
                                                "2"],
                    workers=2, env={**JOB_ENV, **env}, timeout=300, stream=None, cwd=os.getcwd())
    assert result.ok, {n: p.output[-2000:] for n, p in result.processes.items()}
    return [json.loads((out / f"summary_rank{r}.json").read_text()) for r in range(2)]


def params(out: Path, rank: int) -> dict[str, np.ndarray]:
    with np.load(out / f"params_rank{rank}.npz") as f:
        return {k: f[k] for k in f.files}


def test_the_cifar10_example_with_two_devices_per_worker_equals_dist(tmp_path: Path) -> None:
    native = run(tmp_path / "dist", "dist", {})
    # 1 MiB blocks: ResNet-18's small tensors fused, its large ones split
    ours = run(tmp_path / "autobyte", "autobyte", {
        "AUTOBYTE_SCHEDULING": "1", "AUTOBYTE_PARTITION_BYTES": "1MiB",
        "AUTOBYTE_CREDIT_BYTES": "4MiB"})
    for rank in range(2):
        assert ours[rank]["kvstore"] == "dist_sync_autobyte"
        assert ours[rank]["update_on_kvstore"] is True and ours[rank]["devices_equal"] is True
        loss = ours[rank]["epoch_loss"]
        assert isinstance(loss, list) and loss[1] < 0.8 * loss[0], loss
        assert loss == native[rank]["epoch_loss"]
        want, got = params(tmp_path / "dist", rank), params(tmp_path / "autobyte", rank)
        assert len(got) == 62 and got.keys() == want.keys()  # ResNet-18 v1's trainable tensors
        for name in want:
            assert np.array_equal(got[name], want[name]), name
        assert all(np.array_equal(got[n], params(tmp_path / "autobyte", 0)[n]) for n in got)

"""Shared helpers for the MXNet adapter tests: run tests/mx/mx_worker.py under common.launch.

Every test module calls ``skip_without_mxnet()`` first: without MXNet 1.9.1 its tests are
skipped with a reason that says so.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from common.errors import FrameworkMissingError
from common.launch import LaunchResult, launch
from common.testbed import Testbed


def skip_without_mxnet() -> None:
    """Skip the calling test module when MXNet 1.9.1 cannot be imported (says why)."""
    try:
        import autobyte_mx  # noqa: F401
    except FrameworkMissingError as exc:  # pragma: no cover - depends on the environment
        pytest.skip(f"MXNet 1.9.1 is not importable: {exc}", allow_module_level=True)

WORKER = Path(__file__).with_name("mx_worker.py")
# Fixed-configuration jobs: no live tuning (tests of tuning set AUTOBYTE_TUNER themselves),
# and a one-step window, so a switch asked for after a step lands at the step after the next.
JOB_ENV = {"OMP_NUM_THREADS": "1", "MXNET_EXEC_BULK_EXEC_TRAIN": "0", "PYTHONUNBUFFERED": "1",
           "AUTOBYTE_TUNER": "none", "AUTOBYTE_WINDOW_STEPS": "1"}


@dataclass
class Job:
    result: LaunchResult
    out: Path
    workers: int

    def params(self, rank: int = 0) -> dict[str, np.ndarray]:
        with np.load(self.out / f"params_rank{rank}.npz") as f:
            return {k: f[k] for k in f.files}

    def summary(self, rank: int = 0) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.out / f"summary_rank{rank}.json").read_text())
        return data

    def output(self, name: str) -> str:
        return self.result.processes[name].output


def job_dir(tmp: Path) -> Path:
    """A fresh output folder for the next job under ``tmp`` (workers write into it)."""
    return tmp / ("job" + str(len(list(tmp.glob("job*")))))


def run_job(tmp: Path, *args: str, workers: int = 2, servers: int = 1,
            env: dict[str, str] | None = None, timeout: float = 120,
            testbed: Testbed | None = None, out: Path | None = None) -> Job:
    """Run mx_worker.py as a whole job on loopback, or on ``testbed``'s hosts."""
    out = out or job_dir(tmp)
    result = launch(framework="mxnet", command=[sys.executable, str(WORKER), "--out", str(out),
                                                *args],
                    workers=workers, servers=servers, env={**JOB_ENV, **(env or {})},
                    timeout=timeout, stream=None, cwd=os.getcwd(), testbed=testbed)
    return Job(result, out, workers)


def assert_ok(job: Job) -> None:
    if not job.result.ok:
        tails = {n: p.output[-3000:] for n, p in job.result.processes.items()}
        pytest.fail(f"job failed ({job.result.failed}, rc={job.result.returncode}): {tails}")


class NativeRefs:
    """Reference runs of native dist_sync, computed once per session per setting."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self._factory = factory
        self._cache: dict[tuple[str, ...], Job] = {}

    def get(self, *args: str, workers: int, servers: int,
            env: dict[str, str] | None = None) -> Job:
        key = (*args, str(workers), str(servers),
               *(f"{k}={v}" for k, v in sorted((env or {}).items())))
        if key not in self._cache:
            job = run_job(self._factory.mktemp("native"), "--kv", "dist_sync", *args,
                          workers=workers, servers=servers, env=env)
            assert_ok(job)
            self._cache[key] = job
        return self._cache[key]


@pytest.fixture(scope="session")
def native_refs(tmp_path_factory: pytest.TempPathFactory) -> NativeRefs:
    return NativeRefs(tmp_path_factory)

"""Helpers for control-plane tests (a uniquely named module: tests have no __init__.py)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from common.config import Config
from common.stats import Observation

WORKER_SCRIPT = Path(__file__).with_name("worker_script.py")
PYTHON = sys.executable


def observation(config: Config, speed: float, first_step: int, *, steps: int = 10,
                workers: int = 1, warmup_steps: int = 0, warmup_s: float = 0.0,
                end_step: int = 0) -> Observation:
    return Observation(warmup_steps=warmup_steps, warmup_s=warmup_s, end_step=end_step,
        window=first_step, first_step=first_step, last_step=first_step + steps - 1,
        steps=steps, config=config, model="m", arch="ps", num_workers=workers, num_layers=2,
        ranks=tuple(range(workers)), speed_per_worker=(speed / workers,) * workers,
        bandwidth_up=(1e9,) * workers, bandwidth_down=(1e9,) * workers,
        layer_backward_s=((0.01, 0.02),) * workers, layer_bytes=(100, 200), step_time_s=0.1)


@contextlib.contextmanager
def standalone_coordinator(out: Path, secret: str, *, start: str, window_steps: int,
                           tuner: str = "bayesian") -> Iterator[tuple[subprocess.Popen[bytes],
                                                                      str]]:
    """``autobyte coordinator`` for 2 workers on 127.0.0.1 in its own session, logging to
    ``out/coordinator.jsonl``; yields (process, endpoint) once it listens; killed at exit."""
    partition, _, credit = start.partition(":")
    output = out / "coordinator.out"
    with output.open("w") as sink:
        process = subprocess.Popen(
            [PYTHON, "-m", "common.cli", "coordinator", "--bind", "tcp://127.0.0.1:*",
             "--workers", "2", "--tuner", tuner, "--window-steps", str(window_steps),
             "--lead-seconds", "1.0", "--partition", partition, "--credit", credit,
             "--log", str(out / "coordinator.jsonl")],
            env={**os.environ, "AUTOBYTE_SECRET": secret}, stdout=sink,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not (line := next((x for x in output.read_text().splitlines()
                                 if x.startswith("coordinator on ")), "")):
            assert process.poll() is None and time.monotonic() < deadline, output.read_text()
            time.sleep(0.05)
        yield process, line.split()[2]
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)

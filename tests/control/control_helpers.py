"""Helpers for control-plane tests (a uniquely named module: tests have no __init__.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from common.config import Config
from common.stats import Observation

WORKER_SCRIPT = Path(__file__).with_name("worker_script.py")
PYTHON = sys.executable


def observation(config: Config, speed: float, first_step: int, *, steps: int = 10,
                workers: int = 1) -> Observation:
    return Observation(
        window=first_step, first_step=first_step, last_step=first_step + steps - 1,
        steps=steps, config=config, model="m", arch="ps", num_workers=workers, num_layers=2,
        ranks=tuple(range(workers)), speed_per_worker=(speed / workers,) * workers,
        bandwidth_up=(1e9,) * workers, bandwidth_down=(1e9,) * workers,
        layer_backward_s=((0.01, 0.02),) * workers, layer_bytes=(100, 200), step_time_s=0.1)

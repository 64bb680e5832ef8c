"""What one worker measured, as a user reads it: the same type from both adapters.

Built from the statistics the tuner gets (``StatsCollector``), so what a user reads and what
the tuner decides on never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.config import Config

__all__ = ["TrainingStats"]


@dataclass(frozen=True, slots=True)
class TrainingStats:
    """One worker's totals so far and its rates over its latest window.

    ``window``: the measured steps the rates are over (the open window once it has one, else
    the last closed one). ``bytes_per_s``: the gradient bytes this worker's busiest link
    carries (``common.stats.comm_factor``) per second of step. ``layer_backward_s``: backward
    time per layer in forward order from the latest steps timed layer by layer (None before
    one was). ``warmup_steps``/``warmup_s``: steps left out of the rates (a TensorFlow trace,
    new MXNet buffers, the first step after a switch) and the time they took.
    """

    steps: int
    window: int
    config: Config
    step_time_s: float
    samples_per_s: float
    bytes_per_s: float
    layer_bytes: tuple[int, ...]
    layer_backward_s: tuple[float, ...] | None
    sampled_steps: int
    warmup_steps: int
    warmup_s: float

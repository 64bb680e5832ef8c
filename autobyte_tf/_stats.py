"""Per-worker statistics for the tuner: step time, samples/s, bytes/s, layer readiness.

``StepRecorder`` is fed by the strategy at step boundaries (cheap: a deque append) and by the
gradient-ready stamps of sampled steps; ``snapshot()`` returns an immutable ``TrainingStats``.
Layer times are in forward order (0 = nearest the input), one entry per gradient tensor.

This module does not import TensorFlow.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass

from common.config import Config
from common.stats import backward_times, ring_bytes

__all__ = ["StepRecorder", "TrainingStats"]


@dataclass(frozen=True, slots=True)
class TrainingStats:
    """What one worker measured over its last ``window`` steps.

    ``bytes_per_s`` counts the bytes this worker sends for its all-reduces (a ring sends
    2(n-1)/n of the gradient bytes per worker). ``layer_ready_s``: seconds from the start of the
    last sampled step until each gradient was ready; ``layer_backward_s``: the backward time
    attributed to each tensor (``common.stats.backward_times``).
    """

    steps: int
    window: int
    config: Config
    step_time_s: float
    samples_per_s: float
    bytes_per_s: float
    layer_names: tuple[str, ...]
    layer_bytes: tuple[int, ...]
    layer_ready_s: tuple[float, ...] | None
    layer_backward_s: tuple[float, ...] | None
    sampled_steps: int
    retraces: int
    retrace_s: float


class StepRecorder:
    """Collects step times, samples and sampled layer readiness for one worker."""

    def __init__(self, *, window: int, workers: int) -> None:
        self._times: collections.deque[float] = collections.deque(maxlen=window)
        self._samples: collections.deque[int] = collections.deque(maxlen=window)
        self._workers = workers
        self._steps = 0
        self._sampled = 0
        self._retraces = 0
        self._retrace_s = 0.0
        self._names: tuple[str, ...] = ()
        self._bytes: tuple[int, ...] = ()
        self._ready: tuple[float, ...] | None = None

    @property
    def steps(self) -> int:
        return self._steps

    def set_layers(self, names: Sequence[str], nbytes: Sequence[int]) -> None:
        self._names, self._bytes = tuple(names), tuple(nbytes)

    def record_step(self, seconds: float, samples: int, *, traced: bool = False) -> None:
        """One step (or one call of ``steps_per_execution`` steps) finished."""
        self._steps += 1
        if traced:  # a step that (re)traced is not steady state: count it apart
            self._retraces += 1
            self._retrace_s += seconds
            return
        self._times.append(seconds)
        self._samples.append(samples)

    def record_ready(self, ready_s: Sequence[float]) -> None:
        """Ready times (s since the step began) of one sampled step, in forward order."""
        self._sampled += 1
        self._ready = tuple(float(x) for x in ready_s)

    def snapshot(self, config: Config) -> TrainingStats:
        total = math.fsum(self._times)
        count = len(self._times)
        samples = sum(self._samples)
        wire = ring_bytes(sum(self._bytes), self._workers) * count
        ready = self._ready if self._ready and len(self._ready) == len(self._names) else None
        return TrainingStats(
            steps=self._steps,
            window=count,
            config=config,
            step_time_s=total / count if count else math.nan,
            samples_per_s=samples / total if total > 0 else math.nan,
            bytes_per_s=wire / total if total > 0 else math.nan,
            layer_names=self._names,
            layer_bytes=self._bytes,
            layer_ready_s=ready,
            layer_backward_s=tuple(backward_times(ready, from_start=True)) if ready else None,
            sampled_steps=self._sampled,
            retraces=self._retraces,
            retrace_s=self._retrace_s,
        )

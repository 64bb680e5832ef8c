"""When a step is timed per tensor (gradient-ready stamps, each transfer): sampled steps.

A sampled step costs milliseconds whatever the step's length: its stamps run Python on the
frameworks' threads, which take the interpreter lock from the training thread (MXNet's engine
callbacks), or a trace of its own with a stamp per gradient (TensorFlow). One a window cost the
demo cnn's 13 ms MXNet steps at 3 Gbit/s 5% (0.947x native; at most one a second, 0.995x), so
a step is sampled when the configuration is new since the last sampled step, or
``SAMPLE_INTERVAL_S`` has passed. MobileNetV2's 300 ms steps still get one every window.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from common.config import Config

__all__ = ["SAMPLE_INTERVAL_S", "SampleBudget"]

SAMPLE_INTERVAL_S = 1.0  # at most one sampled step a second under one configuration


class SampleBudget:
    """Says whether a step may be sampled now, and notes it when it may."""

    __slots__ = ("_clock", "_last")

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._last: tuple[Config, float] | None = None  # the last sampled step's

    def due(self, config: Config) -> bool:
        """A step under ``config`` may be sampled now: the first, the first under a new
        configuration, or the first ``SAMPLE_INTERVAL_S`` after the last; noted if so."""
        now, last = self._clock(), self._last
        if last is None or last[0] != config or now - last[1] >= SAMPLE_INTERVAL_S:
            self._last = (config, now)
            return True
        return False

    def note(self, config: Config) -> None:
        """A step under ``config`` is sampled now, whatever ``due`` would say."""
        self._last = (config, self._clock())

"""When a step is timed per tensor (gradient-ready stamps, each transfer): sampled steps.

A sampled step costs milliseconds whatever the step's length: its stamps run Python on the
frameworks' threads, which take the interpreter lock from the training thread (MXNet's engine
callbacks), or a trace of its own with a stamp per gradient (TensorFlow). One a window cost the
demo cnn's 13 ms MXNet steps at 3 Gbit/s 5% (0.947x native; at most one a second, 0.995x).
But a window's link rate comes from its sampled steps, and the tuner sees a link change by its
rate. So a window samples when its configuration is new or its step time moved
``STEP_SHIFT``-fold, else at most once ``SAMPLE_INTERVAL_S``. An adapter that decides half a
window ahead (TensorFlow's rank 0, in the step agreement) sees a change a window late: with
the link alternating every 20 steps, sampled as above, such a job saw no rate in the window
after each drop and stayed on native (0.94x native), so it samples every window for
``settle_s`` after a change. MXNet decides at the window's own last step and needs none
(settling, its demo cnn's 20-s jobs sampled 54 windows a worker instead of about 20).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from common.config import Config

__all__ = ["AHEAD_SETTLE_S", "SAMPLE_INTERVAL_S", "STEP_SHIFT", "SampleBudget"]

SAMPLE_INTERVAL_S = 1.0  # a settled job: at most one sampled step a second
AHEAD_SETTLE_S = 3.0  # deciding a window ahead: every window samples this long after a change
STEP_SHIFT = 1.5  # a step time this many times off the last check's is a change


class SampleBudget:
    """Says, once a window, whether the window samples a step (and notes it if so)."""

    __slots__ = ("_changed", "_clock", "_config", "_count", "_sampled", "_seconds", "_step_s",
                 "settle_s")

    def __init__(self, *, settle_s: float = 0.0,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.settle_s = settle_s
        self._clock = clock
        self._config: Config | None = None
        self._seconds, self._count = 0.0, 0  # of the steps since the last check
        self._step_s = 0.0  # the mean step time the last check saw
        self._changed = self._sampled = float("-inf")  # when

    def stepped(self, seconds: float) -> None:
        """A step took ``seconds`` (steady state: not a trace)."""
        self._seconds += seconds
        self._count += 1

    def due(self, config: Config) -> bool:
        """The window about to run under ``config`` samples a step: at a change (the
        configuration, or the mean step time since the last check ``STEP_SHIFT``-fold off the
        one before) and ``settle_s`` after it, else ``SAMPLE_INTERVAL_S`` after the last
        sampled one."""
        now = self._clock()
        step_s = self._seconds / self._count if self._count else 0.0
        self._seconds, self._count = 0.0, 0
        moved = step_s > 0 and self._step_s > 0 and \
            not 1 / STEP_SHIFT <= step_s / self._step_s <= STEP_SHIFT
        if step_s > 0:
            self._step_s = step_s
        if config != self._config or moved:
            self._config, self._changed = config, now
        if now - self._changed <= self.settle_s or now - self._sampled >= SAMPLE_INTERVAL_S:
            self._sampled = now
            return True
        return False

    def note(self, config: Config) -> None:
        """A window under ``config`` samples now, whatever ``due`` would say: a change."""
        self._config, self._changed = config, self._clock()
        self._sampled = self._changed

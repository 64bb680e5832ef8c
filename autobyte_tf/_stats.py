"""Gradient-ready stamps of sampled steps: when each gradient was ready, when the link was busy.

The stamps in every trace (``_transport``) fire on sampled steps only and land here, from
TensorFlow's threads; the step protocol (``_control``) reads them once the step ended: each
gradient's ready time since the step began (its layers' backward times for the tuner and the
plan) and the link's busy time (the window's link rate). What a user reads of a worker's
statistics is ``common.stats.TrainingStats``, which both adapters return.

This module does not import TensorFlow.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

from common.stats import busy_time

__all__ = ["ReadyTimes"]

Call = tuple[object, ...]  # the tensors of one all-reduce call, as traced


class ReadyTimes:
    """One step's stamps, per all-reduce call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[Call, list[float]] = {}
        self._done: dict[Call, list[tuple[tuple[int, ...], float]]] = {}
        self._start = math.nan

    def clear(self) -> None:
        """A step begins: forget the last one's stamps."""
        with self._lock:
            self._ready.clear()
            self._done.clear()
        self._start = math.nan

    def stamp_start(self, when: float) -> None:
        """The step's data is there: its clock starts."""
        self._start = when

    def stamp(self, call: Call, index: int, when: float) -> None:
        """Gradient ``index`` of ``call`` was ready at ``when``."""
        with self._lock:
            self._ready.setdefault(call, [math.nan] * len(call))[index] = when

    def done(self, call: Call, tensors: tuple[int, ...], when: float) -> None:
        """The collectives carrying ``tensors`` of ``call`` returned at ``when``."""
        with self._lock:
            self._done.setdefault(call, []).append((tensors, when))

    def measured(self, call: Call) -> tuple[list[float], float] | None:
        """``call``'s ready times since the step began and the link's busy time in it, if
        every gradient of it was stamped."""
        ready = self._ready.get(call)
        if ready is None or math.isnan(self._start) or any(math.isnan(x) for x in ready):
            return None
        return [x - self._start for x in ready], _busy_s(ready, self._done.get(call, ()))


def _busy_s(ready: list[float], done: Sequence[tuple[tuple[int, ...], float]]) -> float:
    """The time a step's link was busy: the union of the intervals of its stamped runs of
    collectives, from the last gradient of a run's first collective ready to the run's result
    there (0 when none was stamped)."""
    starts = ((max(ready[i] for i in tensors), when) for tensors, when in done if tensors)
    return busy_time((start, max(start, when)) for start, when in starts)

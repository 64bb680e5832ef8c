"""How many bytes the network can carry while backward still runs: the plan's head size.

The shared issue order (``common.plan.issue_order``) sends a head of blocks in backward order
and the rest in forward order. The head should hold what the links can carry before the last
gradient is ready; more and the front layers wait behind it, less and the network idles until
backward ends. Rank 0 measures link throughput while blocks are in flight (busy time, so idle
gaps do not lower the estimate) and the gradient-ready spread, and sends the product to every
worker on the control key, so all plan with the same number.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["Pace"]


class Pace:
    """Busy-time throughput of this worker's blocks (thread-safe, called per block)."""

    def __init__(self, *, clock: Callable[[], float] = time.perf_counter,
                 smoothing: float = 0.5) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._inflight = 0
        self._busy_since = 0.0
        self._busy = 0.0
        self._bytes = 0
        self._smoothing = smoothing
        self.throughput: float | None = None  # bytes/s, smoothed

    def started(self) -> None:
        with self._lock:
            if self._inflight == 0:
                self._busy_since = self._clock()
            self._inflight += 1

    def finished(self, nbytes: int) -> None:
        with self._lock:
            self._inflight -= 1
            self._bytes += nbytes
            if self._inflight == 0:
                self._busy += self._clock() - self._busy_since

    def head_bytes(self, backward_s: float | None) -> int | None:
        """Bytes the links carry in ``backward_s``; folds in the throughput measured so far."""
        with self._lock:
            if self._busy > 0 and self._bytes:
                sample = self._bytes / self._busy
                a = self._smoothing
                self.throughput = sample if self.throughput is None else (
                    a * sample + (1 - a) * self.throughput)
                self._busy, self._bytes = 0.0, 0
        if self.throughput is None or backward_s is None:
            return None
        return int(self.throughput * backward_s)

"""A one-link transport on a virtual clock, driving a real Scheduler.

``start(send)`` queues the block on the link; transfers are serialised (one link, FIFO) and
finish after ``nbytes / bytes_per_s + latency_s``. ``run()`` advances the clock event by event
and calls ``scheduler.done``. The transport checks the credit bound itself, independently of
the scheduler's own bookkeeping.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from common.config import Config
from common.plan import Scheduler, Send

__all__ = ["FakeTransport"]


class FakeTransport:
    def __init__(self, config: Config, *, bytes_per_s: float = 1e9, latency_s: float = 0.0,
                 on_start: Callable[[Send], None] | None = None) -> None:
        self.now = 0.0
        self.bytes_per_s = bytes_per_s
        self.latency_s = latency_s
        self.started: list[Send] = []
        self.inflight_bytes = 0
        self.violations: list[str] = []
        self._on_start = on_start
        self._link_free = 0.0
        self._events: list[tuple[float, int, Send]] = []
        self._seq = itertools.count()
        self.scheduler = Scheduler(config, start=self._start, clock=lambda: self.now)

    def _start(self, send: Send) -> None:
        credit = self.scheduler.config.credit_bytes
        over = self.inflight_bytes and self.inflight_bytes + send.nbytes > credit
        if self.scheduler.config.scheduling and over:
            self.violations.append(
                f"t={self.now}: {send!r} started with {self.inflight_bytes} bytes in flight, "
                f"credit {credit}")
        self.inflight_bytes += send.nbytes
        self.started.append(send)
        begin = max(self.now, self._link_free)
        self._link_free = begin + send.nbytes / self.bytes_per_s
        heapq.heappush(self._events, (self._link_free + self.latency_s, next(self._seq), send))
        if self._on_start is not None:
            self._on_start(send)

    def run(self, until: float | None = None) -> float:
        """Deliver completions in time order (up to ``until``); returns the clock."""
        while self._events and (until is None or self._events[0][0] <= until):
            self.now, _, send = heapq.heappop(self._events)
            self.inflight_bytes -= send.nbytes
            self.scheduler.done(send)
        if until is not None:
            self.now = max(self.now, until)
        return self.now

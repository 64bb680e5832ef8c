"""Per-step statistics for the tuner: gradient-ready times, block timings, bytes, busy time.

Timestamps come almost for free: each block's Send carries its start and done times, its gate
when its data was in place, and one engine callback per tensor stamps when its gradient was
ready. Collecting costs only the bookkeeping done here, which is timed and reported with every
step as ``stats_s``. ``finished`` hands the live-tuning feed each complete step once, as the
raw record (no per-block objects); ``drain`` builds the full ``StepStats`` of the steps
finished since its last call (the last ``_KEEP_STEPS``) on demand.

A step's ``comm_s`` is the time its link was busy: the union of its blocks' [start, done]
intervals, so bandwidth is bytes over busy time rather than over step time (a slow
configuration must not read as a slow link).
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from common.config import Config
from common.stats import busy_time

__all__ = ["ChunkTiming", "StepRecorder", "StepStats"]

_KEEP_STEPS = 1000
_STALL_STEPS = 16


@dataclass(frozen=True, slots=True)
class ChunkTiming:
    """One block of one step; times in seconds since the step's first gradient was ready.

    ``tensor`` names the block: its first member, ``+N`` when N more tensors are fused in.
    """

    tensor: str
    index: int  # the block's forward position in its layout
    position: int  # its place in the step's shared issue order (issue order when off)
    nbytes: int
    ready: float
    start: float
    done: float


@dataclass(frozen=True)
class StepStats:
    """One finished step on this worker (``samples_per_s`` needs the batch size from Trainer)."""

    step: int
    config: Config
    duration_s: float
    samples: int | None
    samples_per_s: float | None
    grad_ready_s: dict[str, float]
    chunks: tuple[ChunkTiming, ...]
    bytes_up: int
    bytes_down: int
    stats_s: float
    comm_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "config": self.config.to_dict(),
                "duration_s": self.duration_s, "samples": self.samples,
                "samples_per_s": self.samples_per_s, "grad_ready_s": dict(self.grad_ready_s),
                "chunks": [_chunk_dict(c) for c in self.chunks],
                "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
                "stats_s": self.stats_s, "comm_s": self.comm_s}


def _chunk_dict(c: ChunkTiming) -> dict[str, Any]:
    return {"tensor": c.tensor, "index": c.index, "position": c.position, "nbytes": c.nbytes,
            "ready": c.ready, "start": c.start, "done": c.done}


@dataclass(slots=True)
class _Open:
    step: int
    start: float
    config: Config
    samples: int | None = None
    end: float | None = None
    issued: int = 0
    raw: list[tuple[str, int, int, int, float, float, float]] = field(default_factory=list)
    ready: dict[str, float] = field(default_factory=dict)
    cost: float = 0.0
    nbytes: int = 0
    done: float = 0.0  # when the step's last block finished (0.0: no block)
    settled: int = 0  # blocks finished: one per raw row, or many at once (``closed``)

    @property
    def complete(self) -> bool:
        return self.end is not None and self.settled >= self.issued

    @property
    def duration_s(self) -> float:
        assert self.end is not None
        return self.end - self.start

    @property
    def comm_s(self) -> float:
        return busy_time((r[5], r[6]) for r in self.raw)


class StepRecorder:
    """Collects raw timings per step; ``drain`` returns the steps that are complete."""

    def __init__(self, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[int, _Open] = {}
        self._done: collections.deque[_Open] = collections.deque(maxlen=_KEEP_STEPS)
        self._last: _Open | None = None
        self._handed = -1  # newest step returned by ``finished``
        self.total_cost_s = 0.0

    def begin_step(self, step: int, config: Config, samples: int | None, *,
                   at: float | None = None) -> None:
        """Step ``step`` begins (and the previous one ends) now, or at ``at`` (clock time)."""
        t0 = self._clock()
        with self._lock:
            if self._last is not None:
                self._last.end = t0 if at is None else at
            rec = self._last = self._open[step] = _Open(step, t0, config, samples)
            if len(self._open) > _KEEP_STEPS:
                self._open.pop(min(self._open))
            rec.cost += self._clock() - t0

    def issued(self, step: int, blocks: int) -> None:
        with self._lock:
            rec = self._open.get(step)
            if rec is not None:
                rec.issued += blocks

    def chunk(self, step: int, tensor: str, index: int, position: int, nbytes: int, ready: float,
              start: float, done: float) -> None:
        self.chunks([(step, tensor, index, position, nbytes, ready, start, done)])

    def chunks(self, rows: Iterable[tuple[int, str, int, int, int, float, float, float]]
               ) -> None:
        """Many ``chunk`` calls under one lock: (step, tensor, index, position, nbytes, ready,
        start, done) each."""
        t0 = self._clock()
        with self._lock:
            rec: _Open | None = None
            for step, tensor, index, position, nbytes, ready, start, done in rows:
                if rec is None or rec.step != step:
                    rec = self._open.get(step)
                    if rec is None:
                        continue
                rec.raw.append((tensor, index, position, nbytes, ready, start, done))
                rec.settled += 1
                rec.nbytes += nbytes
                if done > rec.done:
                    rec.done = done
            spent = self._clock() - t0
            if rec is not None:
                rec.cost += spent
            else:
                self.total_cost_s += spent

    def closed(self, step: int, blocks: int, done: float) -> None:
        """``blocks`` of step ``step`` finished by ``done`` (clock time), timed as a whole: an
        unsampled step, which adds no rows, bytes or busy time (its window's link rate comes
        from the steps that were timed)."""
        with self._lock:
            rec = self._open.get(step)
            if rec is not None:
                rec.settled += blocks
                rec.done = max(rec.done, done)

    def ready(self, step: int, tensor: str, at: float) -> None:
        """Tensor ``tensor``'s gradient of step ``step`` was ready at ``at`` (clock time)."""
        with self._lock:
            rec = self._open.get(step)
            if rec is not None and at < rec.ready.get(tensor, float("inf")):
                rec.ready[tensor] = at

    def finished(self) -> list[_Open]:
        """Steps that became complete since the last call, oldest first, each once (they stay
        available to ``drain``). Steps come in order: the oldest incomplete step holds the
        later ones back, unless it is ``_STALL_STEPS`` behind (a block record was lost); it is
        then passed over for good."""
        out: list[_Open] = []
        with self._lock:
            newest = self._last.step if self._last is not None else 0
            for step in sorted(self._open):
                rec = self._open[step]
                if not rec.complete:
                    if newest - step > _STALL_STEPS:
                        continue
                    break
                del self._open[step]
                self._done.append(rec)
                self.total_cost_s += rec.cost
                if step > self._handed:
                    self._handed = step
                    out.append(rec)
        return out

    def add_cost(self, seconds: float) -> None:
        """Time spent elsewhere on statistics (the tuning feed), for ``total_cost_s``."""
        self.total_cost_s += seconds

    def drain(self) -> list[StepStats]:
        t0 = self._clock()
        out: list[StepStats] = []
        with self._lock:
            records = list(self._done)
            self._done.clear()
            for step in sorted(self._open):
                rec = self._open[step]
                if rec.complete:
                    del self._open[step]
                    records.append(rec)
                    self.total_cost_s += rec.cost
            records = sorted(records, key=lambda r: r.step)[-_KEEP_STEPS:]
            out = [self._build(rec) for rec in records]
            self.total_cost_s += self._clock() - t0
        return out

    @staticmethod
    def _build(rec: _Open) -> StepStats:
        t0 = min(rec.ready.values()) if rec.ready else min((r[4] for r in rec.raw),
                                                            default=rec.start)
        raw = sorted(rec.raw, key=lambda x: (x[5], x[2], x[1]))  # start order, ties by plan
        chunks = tuple(ChunkTiming(n, i, p, b, r - t0, s - t0, d - t0)
                       for n, i, p, b, r, s, d in raw)
        duration = rec.duration_s
        speed = rec.samples / duration if rec.samples and duration > 0 else None
        return StepStats(rec.step, rec.config, duration, rec.samples, speed,
                         {n: r - t0 for n, r in sorted(rec.ready.items(), key=lambda x: x[1])},
                         chunks, rec.nbytes, rec.nbytes, rec.cost, rec.comm_s)

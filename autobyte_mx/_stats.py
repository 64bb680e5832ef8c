"""Per-step statistics for the tuner: gradient-ready times, chunk timings, bytes, samples/s.

Timestamps come for free from the scheduler (each Chunk carries t_ready/t_start/t_done) and
from the gates (Entry.t_ready), so collecting costs only the bookkeeping done here, which is
timed and reported with every step as ``stats_s``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from common.config import Config

__all__ = ["ChunkTiming", "StepRecorder", "StepStats"]

_KEEP_STEPS = 1000


@dataclass(frozen=True, slots=True)
class ChunkTiming:
    """One chunk of one step; times in seconds since the step's first gradient was ready."""

    tensor: str
    index: int
    position: int  # the tensor's place in the step's shared plan (issue order when off)
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

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "config": self.config.to_dict(),
                "duration_s": self.duration_s, "samples": self.samples,
                "samples_per_s": self.samples_per_s, "grad_ready_s": dict(self.grad_ready_s),
                "chunks": [_chunk_dict(c) for c in self.chunks],
                "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
                "stats_s": self.stats_s}


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


class StepRecorder:
    """Collects raw timings per step; ``drain`` returns the steps that are complete."""

    def __init__(self, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._open: dict[int, _Open] = {}
        self._last: _Open | None = None
        self.total_cost_s = 0.0

    def begin_step(self, step: int, config: Config, samples: int | None) -> None:
        t0 = self._clock()
        with self._lock:
            if self._last is not None:
                self._last.end = t0
            rec = self._last = self._open[step] = _Open(step, t0, config, samples)
            if len(self._open) > _KEEP_STEPS:
                self._open.pop(min(self._open))
            rec.cost += self._clock() - t0

    def issued(self, step: int, pieces: int) -> None:
        with self._lock:
            rec = self._open.get(step)
            if rec is not None:
                rec.issued += pieces

    def chunk(self, step: int, tensor: str, index: int, position: int, nbytes: int, ready: float,
              start: float, done: float) -> None:
        t0 = self._clock()
        with self._lock:
            rec = self._open.get(step)
            if rec is None:
                return
            rec.raw.append((tensor, index, position, nbytes, ready, start, done))
            if tensor not in rec.ready or ready < rec.ready[tensor]:
                rec.ready[tensor] = ready
            rec.cost += self._clock() - t0

    def drain(self) -> list[StepStats]:
        t0 = self._clock()
        out: list[StepStats] = []
        with self._lock:
            for step in sorted(self._open):
                rec = self._open[step]
                if rec.end is None or len(rec.raw) < rec.issued:
                    continue
                del self._open[step]
                out.append(self._build(rec))
            spent = self._clock() - t0
            self.total_cost_s += spent + sum(s.stats_s for s in out)
        return out

    @staticmethod
    def _build(rec: _Open) -> StepStats:
        t0 = min(rec.ready.values()) if rec.ready else rec.start
        raw = sorted(rec.raw, key=lambda x: (x[5], x[2], x[1]))  # start order, ties by plan
        chunks = tuple(ChunkTiming(n, i, p, b, r - t0, s - t0, d - t0)
                       for n, i, p, b, r, s, d in raw)
        moved = sum(c.nbytes for c in chunks)
        assert rec.end is not None
        duration = rec.end - rec.start
        speed = rec.samples / duration if rec.samples and duration > 0 else None
        return StepStats(rec.step, rec.config, duration, rec.samples, speed,
                         {n: r - t0 for n, r in sorted(rec.ready.items(), key=lambda x: x[1])},
                         chunks, moved, moved, rec.cost)

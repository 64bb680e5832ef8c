"""ByteScheduler's policy, transport-free: partition, priority, credit.

The adapters feed it real events (a gradient became ready, a chunk finished on the network);
the simulator feeds it modelled ones. The scheduler never blocks and never touches a transport:
it calls ``start(chunk)`` when a chunk is admitted and expects ``done(chunk)`` later.

Order: ready chunks wait in a heap keyed by (step, layer in forward order, chunk index,
arrival), so front layers jump ahead and ties keep the order in which chunks became ready.
Credit: a chunk starts only while bytes in flight plus its size stay within ``credit_bytes``;
when nothing is in flight one chunk starts even if it is larger than the credit.
Reconfiguration: ``reconfigure`` stores the new Config; ``begin_step`` applies it, so chunks
already split keep their layout and none is lost, duplicated or reordered.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from common.config import Config
from common.errors import ConfigError, SchedulerError

__all__ = ["Chunk", "Scheduler", "Task", "split_sizes"]


@dataclass(frozen=True, slots=True)
class Task:
    """One communication of one tensor: push, pull, pushpull or allreduce.

    ``layer`` is the tensor's position in forward order (0 = nearest the input); ``itemsize``
    keeps chunk boundaries on element boundaries; ``payload`` is the adapter's own handle.
    """

    name: str
    layer: int
    nbytes: int
    kind: str = "allreduce"
    itemsize: int = 4
    payload: Any = None

    def __post_init__(self) -> None:
        if self.nbytes <= 0 or self.itemsize <= 0 or self.nbytes % self.itemsize:
            raise SchedulerError(
                f"task {self.name!r}: nbytes must be a positive multiple of itemsize, got "
                f"nbytes={self.nbytes}, itemsize={self.itemsize}"
            )
        if self.layer < 0:
            raise SchedulerError(f"task {self.name!r}: layer must be >= 0, got layer={self.layer}")


@dataclass(slots=True, eq=False)
class Chunk:
    """A contiguous byte range ``[offset, offset + nbytes)`` of a task's tensor."""

    task: Task
    step: int
    index: int
    count: int
    offset: int
    nbytes: int
    key: tuple[int, int, int, int] = (0, 0, 0, 0)
    t_ready: float | None = None
    t_start: float | None = None
    t_done: float | None = None
    state: str = "planned"
    tag: Any = field(default=None)

    def __repr__(self) -> str:
        return (f"Chunk({self.task.name!r} step={self.step} {self.index + 1}/{self.count} "
                f"+{self.offset} {self.nbytes}B {self.state})")


def split_sizes(nbytes: int, partition_bytes: int, itemsize: int = 1) -> list[int]:
    """Byte sizes of the chunks of an ``nbytes`` tensor: equal chunks of at most
    ``partition_bytes`` (rounded down to whole items, at least one item), the last one smaller."""
    per = max(itemsize, partition_bytes - partition_bytes % itemsize)
    full, rest = divmod(nbytes, per)
    return [per] * full + ([rest] if rest else [])


class Scheduler:
    """Thread-safe credit scheduler; see the module docstring for the policy.

    ``start`` is called outside the lock, one chunk at a time and in admission order, also when
    ``done`` is called from inside ``start`` (a synchronous transport) or from several threads.
    """

    def __init__(self, config: Config, *, start: Callable[[Chunk], None],
                 clock: Callable[[], float] = time.perf_counter, keep_trace: bool = True) -> None:
        self._config = config
        self._pending: Config | None = None
        self._start = start
        self._clock = clock
        self._keep_trace = keep_trace
        self._lock = threading.Lock()
        self._heap: list[tuple[tuple[int, int, int, int], Chunk]] = []
        self._to_start: collections.deque[Chunk] = collections.deque()
        self._dispatching = False
        self._seq = itertools.count()
        self._step = 0
        self._inflight = 0
        self._inflight_count = 0
        self._queued_count = 0
        self.max_inflight_bytes = 0
        self._trace: list[Chunk] = []

    # -- configuration ---------------------------------------------------------------------
    @property
    def config(self) -> Config:
        return self._config

    @property
    def step(self) -> int:
        return self._step

    def reconfigure(self, config: Config) -> None:
        """Use ``config`` from the next ``begin_step`` on (the same step on every worker)."""
        if not isinstance(config, Config):
            raise ConfigError(f"reconfigure needs a Config, got {config!r}")
        with self._lock:
            self._pending = config

    def begin_step(self, step: int | None = None) -> Config:
        """Mark a step boundary; apply a pending configuration. Returns the config in force."""
        with self._lock:
            self._step = self._step + 1 if step is None else step
            if self._pending is not None:
                self._config, self._pending = self._pending, None
                self._admit_locked(self._clock())
            config = self._config
        self._dispatch()  # a larger credit may admit queued chunks at once
        return config

    # -- the event interface ---------------------------------------------------------------
    def split(self, task: Task) -> list[Chunk]:
        """Plan ``task``'s chunks under the configuration in force (none started yet)."""
        config = self._config
        if config.scheduling:
            sizes = split_sizes(task.nbytes, config.partition_bytes, task.itemsize)
        else:
            sizes = [task.nbytes]
        chunks, offset, step = [], 0, self._step
        for index, size in enumerate(sizes):
            chunks.append(Chunk(task, step, index, len(sizes), offset, size))
            offset += size
        return chunks

    def ready(self, *chunks: Chunk) -> None:
        """The chunks' data is ready to send: queue them and start what the credit admits."""
        now = self._clock()
        with self._lock:
            for chunk in chunks:
                if chunk.state != "planned":
                    raise SchedulerError(f"ready() on {chunk!r}: it is already {chunk.state}")
                chunk.state, chunk.t_ready = "queued", now
                seq = next(self._seq)  # ties (a layer's weight and bias) go in arrival order
                if self._config.scheduling:
                    chunk.key = (chunk.step, chunk.task.layer, chunk.index, seq)
                else:  # FIFO, in the order the framework gave
                    chunk.key = (chunk.step, 0, 0, seq)
                heapq.heappush(self._heap, (chunk.key, chunk))
                self._queued_count += 1
            self._admit_locked(now)
        self._dispatch()

    def submit(self, task: Task) -> list[Chunk]:
        """``split`` and ``ready`` in one call, for a tensor whose data is ready now."""
        chunks = self.split(task)
        self.ready(*chunks)
        return chunks

    def done(self, chunk: Chunk) -> None:
        """The chunk's transfer finished: return its credit and start what now fits."""
        now = self._clock()
        with self._lock:
            if chunk.state != "started":
                raise SchedulerError(f"done() on {chunk!r}: only a started chunk can finish")
            chunk.state, chunk.t_done = "done", now
            self._inflight -= chunk.nbytes
            self._inflight_count -= 1
            if self._keep_trace:
                self._trace.append(chunk)
            self._admit_locked(now)
        self._dispatch()

    # -- introspection ---------------------------------------------------------------------
    @property
    def inflight_bytes(self) -> int:
        return self._inflight

    @property
    def idle(self) -> bool:
        """Nothing queued, nothing in flight, nothing waiting to be started."""
        with self._lock:
            return not (self._queued_count or self._inflight_count or self._to_start)

    def drain_trace(self) -> list[Chunk]:
        """Finished chunks since the last call (with their ready/start/done times)."""
        with self._lock:
            trace, self._trace = self._trace, []
        return trace

    def reset_max_inflight(self) -> int:
        with self._lock:
            peak, self.max_inflight_bytes = self.max_inflight_bytes, self._inflight
        return peak

    # -- internals -------------------------------------------------------------------------
    def _admit_locked(self, now: float) -> None:
        heap, config = self._heap, self._config
        credit = config.credit_bytes if config.scheduling else None
        while heap:
            chunk = heap[0][1]
            if credit is not None and self._inflight and self._inflight + chunk.nbytes > credit:
                break
            heapq.heappop(heap)
            self._queued_count -= 1
            chunk.state, chunk.t_start = "started", now
            self._inflight += chunk.nbytes
            self._inflight_count += 1
            if self._inflight > self.max_inflight_bytes:
                self.max_inflight_bytes = self._inflight
            self._to_start.append(chunk)

    def _dispatch(self) -> None:
        """Call ``start`` for admitted chunks, in order, from one thread at a time."""
        with self._lock:
            if self._dispatching or not self._to_start:
                return
            self._dispatching = True
        try:
            while True:
                with self._lock:
                    if not self._to_start:
                        return
                    chunk = self._to_start.popleft()
                self._start(chunk)
        finally:
            with self._lock:
                self._dispatching = False
            if self._to_start:  # another thread queued work while we were finishing
                self._dispatch()

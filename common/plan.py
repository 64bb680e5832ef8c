"""The plan: which bytes travel together (blocks), in which order, and how many at once (credit).

This is the only module that decides it; the TensorFlow adapter, the MXNet adapter and the
simulator all execute what it says.

Blocks: a step's gradients are laid out as one stream in forward order (tensor 0 nearest the
input) and cut into blocks of ``partition_bytes`` (the last one smaller): small tensors are
fused into one block, a large one is split across several, and a block may end inside a
tensor, so a step has the fewest blocks its partition allows. A small partition is
ByteScheduler's partitioning; a partition as large as the model is one packed all-reduce. Cuts
fall on element boundaries (a block holds at least one element) and where the dtype changes.

Native (``Config.scheduling`` False) is the framework's own path, described in the same terms
so the simulator can model it: all-reduce packs every gradient into one block, sent once the
whole backward pass is done (MultiWorkerMirroredStrategy); a parameter server sends each tensor
whole, in the order the framework gives, with no credit (``dist_sync``).

Pinned elements (``pins``): where several parameter servers run the optimizer, each element's
optimizer state lives on the server that updates it, so an element must stay on one server
whatever the layout. Each tensor's elements are then pinned to servers in ranges, every block
is cut from one server's own stream (its ranges in forward order), at most ``max_items``
elements (a larger key the native store would spread over all servers), and blocks take their
forward position from their first element. Native then sends one block per range.

Order and credit (``Scheduler``): a block is ready when the last of its gradients is (backward
produces the front-most tensor last). Ready blocks wait in a heap keyed by (step, priority,
arrival); the priority is the block's forward position unless the adapter fixes an order, so
front blocks jump ahead. A block starts only while the bytes in flight plus its own stay within
``credit_bytes``; when nothing is in flight one block starts whatever its size. A new Config
takes effect at ``begin_step``, so no block in flight changes.
"""

from __future__ import annotations

import collections
import heapq
import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.config import Config
from common.errors import ConfigError, SchedulerError

__all__ = ["MAX_LANES", "START", "Block", "Layout", "Pin", "Scheduler", "Segment", "Send",
           "TensorSpec", "issue_order", "lanes_for", "make_layout"]

ARCHS = ("allreduce", "ps")
MAX_LANES = 32  # more concurrent collectives than this only adds executor overhead
_UNBOUNDED = 1 << 62  # a partition or element count no block reaches
# Where a job starts: native, since before compute and communication are measured no plan
# can know that scheduling pays (a fast model on few blocks loses up to a quarter with it);
# the loop's guard measures the meta-network's pick once its gain pays for the switch. The
# knobs are where scheduling starts when switched on by hand: a ring all-reduce pays 2(n-1)
# message latencies and one framework collective per block, a parameter server two messages
# per key, so all-reduce on fewer, larger blocks.
START: dict[str, dict[str, int | bool]] = {
    "allreduce": {"partition_bytes": 4 << 20, "credit_bytes": 16 << 20, "scheduling": False},
    "ps": {"partition_bytes": 1 << 20, "credit_bytes": 4 << 20, "scheduling": False},
}


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One gradient tensor, in forward order. ``itemsize`` keeps cuts on element boundaries;
    a block holds one ``dtype`` (it travels as one fused buffer)."""

    name: str
    nbytes: int
    itemsize: int = 4
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.nbytes <= 0 or self.itemsize <= 0 or self.nbytes % self.itemsize:
            raise ConfigError(f"tensor {self.name!r}: nbytes must be a positive multiple of "
                              f"itemsize, got nbytes={self.nbytes}, itemsize={self.itemsize}")

    @property
    def size(self) -> int:
        return self.nbytes // self.itemsize


@dataclass(frozen=True, slots=True)
class Segment:
    """Elements ``[start, stop)`` of tensor ``tensor``'s flattened view."""

    tensor: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


Pin = tuple[int, int, int]  # (start, stop, server): a tensor's elements held by one server
Run = tuple[int, int, int]  # (tensor, start, stop): a stretch of one server's stream


@dataclass(frozen=True, slots=True)
class Block:
    """One unit of communication: segments in forward order, ``index`` its forward position,
    ``server`` the server its elements are pinned to (0 without pins)."""

    index: int
    segments: tuple[Segment, ...]
    nbytes: int
    server: int = 0

    @property
    def ready_tensor(self) -> int:
        """The tensor whose gradient completes the block (the front-most one)."""
        return self.segments[0].tensor

    @property
    def tensors(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(s.tensor for s in self.segments))


@dataclass(frozen=True, slots=True)
class Layout:
    """The blocks of one step's gradients under one configuration."""

    tensors: tuple[TensorSpec, ...]
    blocks: tuple[Block, ...]
    native: bool

    @property
    def max_block_bytes(self) -> int:
        return max(b.nbytes for b in self.blocks)


def make_layout(tensors: Sequence[TensorSpec], config: Config, *, arch: str = "allreduce",
                pins: Sequence[Sequence[Pin]] | None = None,
                max_items: int | None = None) -> Layout:
    """Cut ``tensors`` (forward order) into blocks under ``config``; see the module docstring.
    ``pins`` (one sequence of ranges per tensor) and ``max_items`` apply to ``arch='ps'``."""
    if arch not in ARCHS:
        raise ConfigError(f"arch must be one of {list(ARCHS)}, but got arch={arch!r}")
    specs = tuple(tensors)
    if not specs:
        raise ConfigError("a layout needs at least one tensor, got none")
    if (pins is not None or max_items is not None) and arch != "ps":
        raise ConfigError(f"pins and max_items place elements on parameter servers; "
                          f"arch={arch!r} has none")
    if max_items is not None and max_items < 1:
        raise ConfigError(f"max_items must be at least 1, got max_items={max_items}")
    if not config.scheduling and arch == "allreduce":
        return Layout(specs, (Block(0, tuple(Segment(i, 0, t.size) for i, t in enumerate(specs)),
                                    sum(t.nbytes for t in specs)),), native=True)
    streams: dict[int, list[Run]] = {}
    for i, ranges in enumerate(_check_pins(specs, pins)):
        for start, stop, server in ranges:
            streams.setdefault(server, []).append((i, start, stop))
    cuts = []
    for server, runs in sorted(streams.items()):
        if config.scheduling:
            cuts += [(server, c) for c in _cut(specs, runs, config.partition_bytes, max_items)]
        else:  # each range whole, as the framework sends each tensor
            for run in runs:
                cuts += [(server, c) for c in _cut(specs, [run], _UNBOUNDED, max_items)]
    cuts.sort(key=lambda sc: (sc[1][0].tensor, sc[1][0].start))
    blocks = tuple(Block(j, segs, sum(s.size * specs[s.tensor].itemsize for s in segs), server)
                   for j, (server, segs) in enumerate(cuts))
    return Layout(specs, blocks, native=not config.scheduling)


def _check_pins(specs: tuple[TensorSpec, ...],
                pins: Sequence[Sequence[Pin]] | None) -> list[list[Pin]]:
    """Each tensor's ranges, in element order: all on server 0 without ``pins``; else they
    must cover the tensor's elements once."""
    if pins is None:
        return [[(0, t.size, 0)] for t in specs]
    if len(pins) != len(specs):
        raise ConfigError(f"pins must give ranges for each of the {len(specs)} tensors, got "
                          f"{len(pins)}")
    checked = []
    for spec, ranges in zip(specs, pins, strict=True):
        ordered = sorted((int(a), int(b), int(s)) for a, b, s in ranges)
        at = 0
        for start, stop, server in ordered:
            if start != at or stop <= start or server < 0:
                raise ConfigError(f"tensor {spec.name!r}: pins must cover its {spec.size} "
                                  f"elements once, in ranges on servers >= 0, got {ordered}")
            at = stop
        if at != spec.size:
            raise ConfigError(f"tensor {spec.name!r}: pins must cover its {spec.size} "
                              f"elements once, got {ordered}")
        checked.append(ordered)
    return checked


def _cut(tensors: Sequence[TensorSpec], runs: Sequence[Run], partition: int,
         max_items: int | None) -> list[tuple[Segment, ...]]:
    """Cut one stream of ``runs`` into blocks' segments: about ``partition`` bytes each, at
    most ``max_items`` elements, one dtype."""
    blocks: list[tuple[Segment, ...]] = []
    segments: list[Segment] = []
    used = items = 0
    limit = max_items or _UNBOUNDED
    for index, start, stop in runs:
        item = tensors[index].itemsize
        if segments and tensors[segments[0].tensor].dtype != tensors[index].dtype:
            blocks.append(tuple(segments))
            segments, used, items = [], 0, 0
        while start < stop:
            take = min(stop - start, max(1, (partition - used) // item), limit - items)
            segments.append(Segment(index, start, start + take))
            used += take * item
            items += take
            start += take
            if used + item > partition or items >= limit:
                blocks.append(tuple(segments))
                segments, used, items = [], 0, 0
    if segments:
        blocks.append(tuple(segments))
    return blocks


def issue_order(layout: Layout, *, head_bytes: int | None = None) -> list[int]:
    """Block indices in one fixed sequence every worker can share.

    Where the workers' admission must agree ahead of time (a parameter server's push completes
    only once every worker pushed that key, so two workers holding credit for different blocks
    deadlock) or the order is fixed when the step is traced (TensorFlow), blocks cannot simply
    go as they become ready. This is ByteScheduler's policy as it plays out when communication
    is the bottleneck: while backward runs, the blocks that become ready first (the output side)
    fill the first ``head_bytes`` (whole blocks, at least one); everything after goes in forward
    order, so the next forward pass gets its first layers' parameters first. ``None`` puts every
    block in readiness order.
    """
    backward = sorted(layout.blocks, key=lambda b: -b.index)
    if head_bytes is None:
        return [b.index for b in backward]
    head: list[int] = []
    taken = 0
    for block in backward:
        if head and taken >= head_bytes:
            break
        head.append(block.index)
        taken += block.nbytes
    chosen = set(head)
    return head + [b.index for b in layout.blocks if b.index not in chosen]


def lanes_for(layout: Layout, config: Config) -> int:
    """Blocks allowed in flight at once where the order is fixed ahead (TensorFlow's ordering
    tokens): as many of the largest block as the credit holds, at least 1."""
    return max(1, min(MAX_LANES, config.credit_bytes // layout.max_block_bytes))


@dataclass(slots=True, eq=False)
class Send:
    """One block's communication in one step. ``priority`` defaults to the block's forward
    position; ``tag`` is the adapter's own handle."""

    block: Block
    step: int
    priority: int = -1
    key: tuple[int, int, int] = (0, 0, 0)
    t_ready: float | None = None
    t_start: float | None = None
    t_done: float | None = None
    state: str = "planned"
    tag: Any = field(default=None)

    @property
    def nbytes(self) -> int:
        return self.block.nbytes

    def __repr__(self) -> str:
        return (f"Send(block {self.block.index} step={self.step} {self.block.nbytes}B "
                f"{self.state})")


class Scheduler:
    """Thread-safe credit admission; see the module docstring for the policy.

    ``start`` is called outside the lock, one block at a time and in admission order, also when
    ``done`` is called from inside ``start`` (a synchronous transport) or from several threads.
    """

    def __init__(self, config: Config, *, start: Callable[[Send], None],
                 clock: Callable[[], float] = time.perf_counter, keep_trace: bool = True) -> None:
        self._config = config
        self._pending: Config | None = None
        self._start = start
        self._clock = clock
        self._keep_trace = keep_trace
        self._lock = threading.Lock()
        self._heap: list[tuple[tuple[int, int, int], Send]] = []
        self._to_start: collections.deque[Send] = collections.deque()
        self._dispatching = False
        self._seq = itertools.count()
        self._step = 0
        self._inflight = 0
        self._inflight_count = 0
        self.max_inflight_bytes = 0
        self._trace: list[Send] = []

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
        self._dispatch()  # a larger credit may admit queued blocks at once
        return config

    def ready(self, *sends: Send) -> None:
        """The sends' data is in place: queue them and start what the credit admits."""
        now = self._clock()
        with self._lock:
            for send in sends:
                if send.state != "planned":
                    raise SchedulerError(f"ready() on {send!r}: it is already {send.state}")
                send.state, send.t_ready = "queued", now
                seq = next(self._seq)
                if self._config.scheduling:
                    priority = send.block.index if send.priority < 0 else send.priority
                    send.key = (send.step, priority, seq)
                else:  # the framework's own order: first come, first sent
                    send.key = (send.step, 0, seq)
                heapq.heappush(self._heap, (send.key, send))
            self._admit_locked(now)
        self._dispatch()

    def done(self, send: Send) -> None:
        """The block's transfer finished: return its credit and start what now fits."""
        now = self._clock()
        with self._lock:
            if send.state != "started":
                raise SchedulerError(f"done() on {send!r}: only a started block can finish")
            send.state, send.t_done = "done", now
            self._inflight -= send.nbytes
            self._inflight_count -= 1
            if self._keep_trace:
                self._trace.append(send)
            self._admit_locked(now)
        self._dispatch()

    @property
    def inflight_bytes(self) -> int:
        return self._inflight

    @property
    def idle(self) -> bool:
        """Nothing queued, nothing in flight, nothing waiting to be started."""
        with self._lock:
            return not (self._heap or self._inflight_count or self._to_start)

    def drain_trace(self) -> list[Send]:
        """Finished sends since the last call (with their ready/start/done times)."""
        with self._lock:
            trace, self._trace = self._trace, []
        return trace

    def reset_max_inflight(self) -> int:
        with self._lock:
            peak, self.max_inflight_bytes = self.max_inflight_bytes, self._inflight
        return peak

    def _admit_locked(self, now: float) -> None:
        heap, config = self._heap, self._config
        credit = config.credit_bytes if config.scheduling else None
        while heap:
            send = heap[0][1]
            if credit is not None and self._inflight and self._inflight + send.nbytes > credit:
                break
            heapq.heappop(heap)
            send.state, send.t_start = "started", now
            self._inflight += send.nbytes
            self._inflight_count += 1
            if self._inflight > self.max_inflight_bytes:
                self.max_inflight_bytes = self._inflight
            self._to_start.append(send)

    def _dispatch(self) -> None:
        """Call ``start`` for admitted sends, in order, from one thread at a time."""
        with self._lock:
            if self._dispatching or not self._to_start:
                return
            self._dispatching = True
        try:
            while True:
                with self._lock:
                    if not self._to_start:
                        return
                    send = self._to_start.popleft()
                self._start(send)
        finally:
            with self._lock:
                self._dispatching = False
            if self._to_start:  # another thread queued work while we were finishing
                self._dispatch()

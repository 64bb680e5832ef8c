"""Hands a step's tensors to the shared Scheduler in the planned order, as they become ready.

A step's pushpull calls form a *group*. Groups close only at points of the program, which
every worker reaches in the same order: when every expected key (the Trainer's keys, else the
previous step's) has been issued, when a key is issued twice or a key outside the expected set
comes (it gets a group of its own), and at the next step. A timer (``idle_s`` without a call)
closes groups only while no expected set is known (the first step of plain kvstore use), since
a timer can cut two workers' groups at different keys. Once closed, its tensors get their
place in the plan (``_plan.plan_order``) and each is passed to ``Scheduler.ready`` only when
it is ready *and* every tensor before it has been passed. The scheduler's priority key then
equals the plan position, so every worker admits chunks in the same sequence (see ``_plan``).

Gates fire on MXNet engine threads; issue and close run on the training thread. The lock
keeps ``Scheduler.ready`` calls in plan order even when gates fire on several threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from common.errors import SchedulerError
from common.scheduler import Chunk, Scheduler, Task

__all__ = ["GROUP_STRIDE", "Entry", "Sequencer"]

GROUP_STRIDE = 1_000_000  # Task.layer = group index in the step * stride + plan position


@dataclass(slots=True, eq=False)
class Entry:
    """One tensor's communication in one step."""

    key: Hashable
    name: str
    layer: int
    nbytes: int
    itemsize: int
    pieces: int
    completions: list[Callable[[], None] | None] = field(default_factory=list)
    fired: int = 0
    t_ready: float | None = None
    chunks: list[Chunk] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        return self.fired == self.pieces


class _Group:
    __slots__ = ("closed", "entries", "index", "next", "order", "step")

    def __init__(self, step: int, index: int) -> None:
        self.step, self.index = step, index
        self.entries: dict[Hashable, Entry] = {}
        self.order: list[Entry] = []
        self.closed = False
        self.next = 0


class Sequencer:
    """See the module docstring. ``plan(entries) -> keys`` gives the issue order."""

    def __init__(self, scheduler: Scheduler, *,
                 plan: Callable[[Sequence[Entry]], list[Hashable]],
                 idle_s: float = 0.05, clock: Callable[[], float] = time.perf_counter) -> None:
        self._scheduler = scheduler
        self._plan = plan
        self._idle_s = idle_s
        self._clock = clock
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._open: _Group | None = None
        self._groups: list[_Group] = []
        self._expected: frozenset[Hashable] | None = None
        self._group_in_step = 0
        self._step = 0
        self._last_issue = 0.0
        self._closing = False
        self._thread: threading.Thread | None = None
        self._stop = False
        self.backward_s: float | None = None  # gradient-ready spread of the last full group

    # -- training thread -------------------------------------------------------------------
    def begin_step(self, step: int, expected: frozenset[Hashable] | None) -> None:
        with self._lock:
            self._close_locked()
            self._step, self._group_in_step = step, 0
            self._expected = expected

    def issue(self, entry: Entry) -> Entry:
        """Register ``entry`` (its gates are pushed right after); closes the group if complete."""
        with self._lock:
            expected = self._expected
            alone = expected is not None and entry.key not in expected
            group = self._open
            if group is None or entry.key in group.entries or alone:
                self._close_locked()
                group = self._open = _Group(self._step, self._group_in_step)
                self._group_in_step += 1
                self._groups.append(group)
            entry.completions = [None] * entry.pieces
            group.entries[entry.key] = entry
            self._last_issue = self._clock()
            if expected is None:
                self._ensure_closer()
                self._wake.notify()
            elif alone or expected <= group.entries.keys():
                self._close_locked()
        return entry

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def stop(self) -> None:
        with self._lock:
            self._stop = True
            self._wake.notify()

    # -- engine threads --------------------------------------------------------------------
    def gate_fired(self, entry: Entry, piece: int, complete: Callable[[], None]) -> None:
        """Piece ``piece`` of ``entry`` has its data in its send buffer."""
        with self._lock:
            entry.completions[piece] = complete
            entry.fired += 1
            if entry.t_ready is None:
                entry.t_ready = self._clock()
            self._release_locked()

    # -- internals -------------------------------------------------------------------------
    def _close_locked(self) -> None:
        group = self._open
        if group is None:
            return
        self._open = None
        keys = self._plan(list(group.entries.values()))
        group.order = [group.entries[k] for k in keys]
        if len(group.order) != len(group.entries):
            raise SchedulerError(f"plan returned {len(keys)} keys for {len(group.entries)}")
        for position, entry in enumerate(group.order):
            task = Task(entry.name, group.index * GROUP_STRIDE + position, entry.nbytes,
                        kind="pushpull", itemsize=entry.itemsize, payload=entry)
            entry.chunks = self._scheduler.split(task)
            if len(entry.chunks) != entry.pieces:
                raise SchedulerError(
                    f"tensor {entry.name!r}: the scheduler split it into {len(entry.chunks)} "
                    f"chunks but its layout has {entry.pieces} pieces")
        group.closed = True
        self._release_locked()

    def _release_locked(self) -> None:
        while self._groups:
            group = self._groups[0]
            if not group.closed:
                return
            while group.next < len(group.order):
                entry = group.order[group.next]
                if not entry.ready:
                    return
                for chunk, complete in zip(entry.chunks, entry.completions, strict=True):
                    chunk.tag = complete
                self._scheduler.ready(*entry.chunks)
                group.next += 1
            self._groups.pop(0)
            times = [e.t_ready for e in group.order if e.t_ready is not None]
            if len(times) > 1:
                self.backward_s = max(times) - min(times)

    def _ensure_closer(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._closer, name="autobyte-closer",
                                            daemon=True)
            self._thread.start()

    def _closer(self) -> None:
        """Close a group nobody completes (keys never pushed again) after ``idle_s``."""
        with self._lock:
            while not self._stop:
                if self._open is None or self._expected is not None:
                    self._wake.wait()
                    continue
                left = self._last_issue + self._idle_s - self._clock()
                if left > 0:
                    self._wake.wait(left)
                    continue
                self._close_locked()

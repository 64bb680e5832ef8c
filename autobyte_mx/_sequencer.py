"""Hands a step's blocks to ``common.plan.Scheduler`` in one order that every worker shares.

Why a shared order: under ``dist_sync`` a push completes only when *every* worker has pushed
that key, and a block holds credit until it completes. If two workers admitted different
blocks (their gradients became ready at slightly different moments), each would hold credit
for a block the other has not sent: a deadlock. Admitting in one shared sequence is
deadlock-free: the earliest unfinished block is either in flight everywhere or next in line on
a worker whose earlier blocks have all finished.

A ``Round`` is one group's blocks in one step. A block *closes* (the kvstore pushes its gate,
its native pushpull and its completion) once every member tensor has been issued, or when the
round is flushed (a pull of a member, the next step, close). Rounds are created and flushed at
program points every worker reaches in the same order. A block's gate fires on an engine
thread once its data is in its buffer; blocks are passed to ``Scheduler.ready`` in round order
and, within a round, in ``common.plan.issue_order``, each only when its gate has fired and
every block before it has been passed.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from common.plan import Scheduler, Send

__all__ = ["ROUND_STRIDE", "Round", "Sequencer"]

ROUND_STRIDE = 1_000_000  # Send.priority = round index in the step * stride + position


class Round:
    """One group's blocks in one step (see the module docstring). ``group`` is the adapter's
    (``_layout.Group``: ``layout``, ``members``, ``blocks_of``)."""

    __slots__ = ("closed", "gates", "group", "issued", "left", "order", "position", "sends",
                 "step", "t_gate", "targets")

    def __init__(self, group: Any, step: int, index: int, order: Sequence[int]) -> None:
        blocks = group.layout.blocks
        if sorted(order) != list(range(len(blocks))):
            raise ValueError(f"order must be a permutation of the {len(blocks)} blocks, "
                             f"got order={list(order)}")
        self.group = group
        self.step = step
        self.order = list(order)
        self.position = [0] * len(blocks)
        for position, block in enumerate(self.order):
            self.position[block] = position
        self.sends = [Send(b, step, priority=index * ROUND_STRIDE + self.position[b.index],
                           tag=self) for b in blocks]
        self.left = [len(m) for m in group.members]
        self.closed = [False] * len(blocks)
        self.issued: set[int] = set()
        self.targets: dict[int, list[Any]] = {}
        self.gates: list[Callable[[], None] | None] = [None] * len(blocks)
        self.t_gate: list[float | None] = [None] * len(blocks)

    @property
    def open(self) -> bool:
        return not all(self.closed)

    def issue(self, member: int, targets: list[Any]) -> list[int]:
        """Member ``member`` has been issued: the blocks that close now (forward order)."""
        if member in self.issued:
            raise ValueError(f"member {member} was already issued in this round")
        self.issued.add(member)
        self.targets[member] = targets
        closing = []
        for block in self.group.blocks_of[member]:
            self.left[block] -= 1
            if self.left[block] == 0:
                closing.append(block)
        return self._close(closing)

    def flush(self) -> list[int]:
        """Close every block still open (members not issued travel with what their slots
        hold; the kvstore keeps their values)."""
        return self._close([b for b, done in enumerate(self.closed) if not done])

    def missing(self, block: int) -> list[int]:
        return [m for m in self.group.members[block] if m not in self.issued]

    def finished_members(self, blocks: Sequence[int]) -> list[int]:
        """Issued members of ``blocks`` whose blocks are all closed (ready to copy out)."""
        out = []
        for member in dict.fromkeys(m for b in blocks for m in self.group.members[b]):
            if member in self.issued and all(self.closed[b] for b in
                                             self.group.blocks_of[member]):
                out.append(member)
        return out

    def open_gate(self, block: int) -> None:
        """The scheduler admitted the block: let its native pushpull run."""
        gate = self.gates[block]
        if gate is None:
            raise ValueError(f"block {block} was admitted before its gate fired")
        gate()

    def _close(self, blocks: list[int]) -> list[int]:
        for block in blocks:
            self.closed[block] = True
        return blocks


class Sequencer:
    """Releases blocks to ``scheduler`` in round order, then issue order (thread-safe)."""

    def __init__(self, scheduler: Scheduler, *,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self._scheduler = scheduler
        self._clock = clock
        self._lock = threading.Lock()
        self._rounds: collections.deque[tuple[Round, list[int]]] = collections.deque()
        self._released: collections.deque[Send] = collections.deque()
        self._handing = False
        self._step = 0
        self._in_step = 0

    def new_round(self, group: Any, step: int, order: Sequence[int]) -> Round:
        """A round of ``group``'s blocks for ``step`` (training thread, program order)."""
        with self._lock:
            if step != self._step:
                self._step, self._in_step = step, 0
            rnd = Round(group, step, self._in_step, order)
            self._in_step += 1
            self._rounds.append((rnd, [0]))
        return rnd

    def gate_fired(self, rnd: Round, block: int, complete: Callable[[], None]) -> None:
        """Block ``block`` of ``rnd`` has its data in its buffer (an engine thread)."""
        now = self._clock()
        with self._lock:
            rnd.gates[block] = complete
            rnd.t_gate[block] = now
            self._release_locked()
        self._hand_over()

    def _release_locked(self) -> None:
        while self._rounds:
            rnd, cursor = self._rounds[0]
            while cursor[0] < len(rnd.order):
                block = rnd.order[cursor[0]]
                if rnd.gates[block] is None:
                    return
                self._released.append(rnd.sends[block])
                cursor[0] += 1
            self._rounds.popleft()

    def _hand_over(self) -> None:
        """Pass released sends to the scheduler in release order, from one thread at a time
        (admitting one can complete engine ops that fire another gate on this thread)."""
        with self._lock:
            if self._handing:
                return
            self._handing = True
        try:
            while True:
                with self._lock:
                    if not self._released:
                        return
                    batch = list(self._released)
                    self._released.clear()
                self._scheduler.ready(*batch)
        finally:
            with self._lock:
                self._handing = False
            if self._released:
                self._hand_over()

"""One step's gradients, from ``pushpull`` to the native store.

With scheduling on, each tensor's gradient is copied into its slices of its group's block
buffers; once every member of a block has been issued, the block gets a gate, one native
pushpull and a completion callback (``_blocks``), and ``common.plan.Scheduler`` decides when
each gate opens (``_sequencer``). With scheduling off (the native candidate) a tensor goes
whole under its own native key (``whole`` says why). Sampled steps stamp when each gradient is
ready and time each block; the others are counted and timed as a whole.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Hashable, Sequence
from typing import Any

import mxnet as mx

from autobyte_mx import _engine
from autobyte_mx._blocks import block_rows, push_blocks
from autobyte_mx._compression import Compression
from autobyte_mx._devices import local_sum
from autobyte_mx._layout import Group, Groups, Tensor
from autobyte_mx._pace import Pace
from autobyte_mx._progress import Progress
from autobyte_mx._remote import RemoteOptimizer
from autobyte_mx._sequencer import Round, Sequencer
from autobyte_mx._stats import StepRecorder
from autobyte_mx._transport import Transport
from autobyte_mx._tuning import Tuning
from autobyte_mx._watchdog import Watchdog
from common.config import Config
from common.plan import Scheduler, Send, issue_order

__all__ = ["COMM_PRIORITY", "Issuer", "clock"]

# Engine priority of an admitted block's push/pull: the scheduler has already chosen the order,
# so once a gate opens the transfer should not wait behind queued compute on the CPU worker.
COMM_PRIORITY = 1 << 20


def clock() -> float:
    """The clock of every time the statistics hold."""
    return time.perf_counter()


class Issuer:
    """The step in progress: which keys it issued, its rounds, and the sends they make."""

    def __init__(self, config: Config, *, transport: Transport, groups: Groups,
                 remote: RemoteOptimizer, recorder: StepRecorder, tuning: Tuning,
                 watchdog: Watchdog, progress: Progress) -> None:
        self._transport = transport
        self._groups = groups
        self._remote = remote
        self._recorder = recorder
        self._tuning = tuning
        self._watchdog = watchdog
        self._progress = progress
        self._pace = Pace()
        self.scheduler = Scheduler(config, start=self._start_send)
        self._sequencer = Sequencer(self.scheduler)
        self.compression: Compression | None = None  # set_gradient_compression's
        self.step = 0
        self.issued: set[Hashable] = set()
        self.main: Group | None = None  # the group of the expected keys in this step
        self._config = config
        self._expected: frozenset[Hashable] | None = None
        self._missing = -1  # expected keys not issued yet in this step (-1: none expected)
        self._rounds: dict[int, Round] = {}  # group id -> its latest round in this step
        self._unsampled: list[Any] = []  # arrays of whole tensors' keys of this unsampled step
        self._head_bytes: int | None = None  # rank 0's plan head; None: the credit size

    def begins_step(self, key: Hashable) -> bool:
        """Issuing ``key`` starts a new step (the first, or ``key`` issued again)."""
        return self.step == 0 or key in self.issued

    def begin(self, config: Config, *, main: Group | None, expected: frozenset[Hashable] | None,
              head_bytes: int | None) -> None:
        """The next step, under ``config`` (a new one from this step on if it changed)."""
        if config != self._config:
            self._config = config
            self.scheduler.reconfigure(config)
        if head_bytes is not None:
            self._head_bytes = head_bytes
        self.step += 1
        self.issued = set()
        self._expected = expected
        self._missing = -1 if expected is None else len(expected)
        self._rounds = {}
        self.scheduler.begin_step(self.step)
        self.main = main

    def head_bytes(self, backward_s: float | None) -> int | None:
        """Rank 0's measured plan head for the next steps (``_pace``)."""
        return self._pace.head_bytes(backward_s)

    def collect(self) -> None:
        """Move finished blocks from the scheduler's trace to the step recorder."""
        trace = self.scheduler.drain_trace()
        if trace:
            self._recorder.chunks(block_rows(trace))

    def issue(self, tensor: Tensor, values: list[Any], targets: list[Any],
              priority: int) -> None:
        """Issue this worker's gradient of ``tensor`` (``values``: one per device)."""
        key = tensor.key
        self.issued.add(key)
        if self._expected is not None and key in self._expected:
            self._missing -= 1
        config = self._config
        if not config.scheduling:
            self._whole(tensor, values, targets, priority)
            return
        group = self._groups.of(tensor, self.main, config)
        if self._remote.active:
            self._remote.pushed(self.step, tensor, targets, group)
        member = group.index[key]
        rnd = self._rounds.get(group.gid)
        if rnd is None or not rnd.open or member in rnd.issued:
            order = issue_order(group.layout, head_bytes=config.credit_bytes
                                if self._head_bytes is None else self._head_bytes)
            rnd = self._rounds[group.gid] = self._sequencer.new_round(group, self.step, order)
        group.copy_in(member, local_sum(tensor, values, priority))
        if self._tuning.sampled(self.step, self._config):
            self._stamp(tensor, values, priority)
        self._close(rnd, rnd.issue(member, targets), priority)

    def flush(self, tensor: Tensor | None = None) -> None:
        """Close the open rounds of this step (only the one holding ``tensor``'s issued
        gradient, if given): at program points every worker reaches alike."""
        if self._unsampled:  # one callback times this step's whole tensors issued so far
            arrays, self._unsampled = self._unsampled, []
            self._count(self.step, len(arrays))
            self._watchdog.started()
            _engine.push_callback(functools.partial(self._unsampled_done, self.step,
                                                    len(arrays)), const=arrays)
        for rnd in list(self._rounds.values()):
            if not rnd.open:
                continue
            if tensor is not None and rnd.group.index.get(tensor.key, -1) not in rnd.issued:
                continue
            self._close(rnd, rnd.flush(), 0)

    def quiesce(self) -> None:
        """Send every open block and wait until all issued have finished."""
        self.flush()
        self._progress.wait(self.step)

    def pull(self, tensor: Tensor, targets: list[Any]) -> None:
        """Copy the sum ``tensor`` last received into ``targets`` (a block still open with it
        is sent first)."""
        self.flush(tensor)
        home = tensor.home
        if home is not None:
            home.copy_out(home.index[tensor.key], targets, mx.nd.concat)
            return
        for target in targets:
            if target is not tensor.weight:
                tensor.weight.copyto(target)

    def _close(self, rnd: Round, blocks: list[int], priority: int) -> None:
        if blocks:
            self._count(rnd.step, len(blocks))  # before the pushes: a block may finish at once
            push_blocks(rnd, blocks, pushpull=self._pushpull_blocks,
                        gate_fired=self._sequencer.gate_fired, done=self._send_done,
                        priority=priority, comm_priority=COMM_PRIORITY,
                        prepare=None if self.compression is None else self._quantize)

    def _quantize(self, rnd: Round, block: int) -> None:
        assert self.compression is not None
        self.compression.quantize(rnd.group, block, skip=rnd.missing(block))

    def _pushpull_blocks(self, keys: list[int], arrays: list[Any]) -> None:
        self._transport.exchange(keys, arrays, None, COMM_PRIORITY)

    def _whole(self, tensor: Tensor, values: list[Any], targets: list[Any],
               priority: int) -> None:
        """Scheduling off: one native pushpull of the whole tensor when its gradient is ready
        (no gate). With the optimizer on the server it goes as native sends it, from the
        caller's gradients into the caller's weights (``direct``; the native store sums the
        devices and copies the result to each). Otherwise it goes from the
        tensor's own buffer: in place on the caller's gradient, native ``dist_sync`` with
        ``update_on_kvstore=False`` lost sums under CPU contention (two MLP jobs at once),
        while pushpulls from AutoByte's buffers matched native bitwise; the copy back is the
        native store's own (``out``), which costs no Python op.
        Only sampled steps time each tensor; the others are counted and timed as a whole at
        ``flush``, once their last expected tensor is issued."""
        group = tensor.whole = tensor.whole or self._groups.whole(tensor)
        compression = self.compression
        direct = self._remote.active and bool(targets) and compression is None
        if self._remote.active:
            self._remote.pushed(self.step, tensor, targets, group)
        step = self.step
        sampled = self._tuning.sampled(step, self._config)
        if sampled:
            self._count(step, 1)
            self._watchdog.started()
            # the stamp goes before the copy into the buffer, so before the transfer's end
            ready = self._stamp(tensor, values, priority, before=[] if direct else group.arrays)
            t0 = clock()
        if direct:  # native's own path: pushed from the gradients, pulled into the weights
            done_on = group.views_out(0, targets)
            self._transport.exchange(group.keys, group.views_in(0, values), done_on, priority)
            tensor.home = None  # the result is in the weight (``RemoteOptimizer.pushed``)
        else:
            group.copy_in(0, local_sum(tensor, values, priority))
            done_on = group.arrays
            if compression is None:
                outs = group.views_out(0, targets[:1]) if targets else group.arrays
                self._transport.exchange(group.keys, group.arrays, outs, priority)
            else:  # a push, then a pull into the array pushed (below)
                compression.quantize(group, 0, priority=priority)
                self._transport.exchange(group.keys, group.arrays, None, priority)
                group.copy_out(0, targets[:1], mx.nd.concat)
            tensor.home = group
            for target in targets[1:]:  # the other devices, as the native store broadcasts
                targets[0].copyto(target)
        if sampled:
            _engine.push_callback(functools.partial(self._whole_done, step, tensor, t0,
                                                    len(self.issued), ready),
                                  const=done_on, priority=priority)
        else:
            self._unsampled.extend(done_on)
            if self._missing == 0:
                self.flush()  # the step's last tensor: time it now, not at the next step

    def _stamp(self, tensor: Tensor, values: list[Any], priority: int,
               before: Sequence[Any] = ()) -> list[float]:
        """Note when ``values`` (the devices' gradients) are ready, in an engine callback that
        runs before any later op writing ``before``; returns the list its time lands in."""
        at = [0.0]
        _engine.push_callback(functools.partial(self._ready, self.step, tensor.name, at),
                              const=values, mutable=before, priority=priority)
        return at

    def _count(self, step: int, blocks: int) -> None:
        self._recorder.issued(step, blocks)
        self._progress.issued(step, blocks)

    # -- engine callbacks ----------------------------------------------------------------------
    def _ready(self, step: int, name: str, at: list[float]) -> None:
        at[0] = now = clock()
        self._recorder.ready(step, name, now)

    def _start_send(self, send: Send) -> None:
        self._watchdog.started()
        self._pace.started()
        send.tag.open_gate(send.block.index)

    def _send_done(self, send: Send) -> None:
        self._watchdog.finished()
        self._pace.finished(send.nbytes)
        self.scheduler.done(send)
        self._progress.done(send.step)

    def _whole_done(self, step: int, tensor: Tensor, t0: float, position: int,
                    ready: list[float]) -> None:
        self._watchdog.finished()
        now = clock()
        start = ready[0] or t0  # the transfer starts once the gradient is ready
        self._recorder.chunk(step, tensor.name, 0, position, tensor.nbytes, start, start, now)
        self._progress.done(step)

    def _unsampled_done(self, step: int, blocks: int) -> None:
        self._watchdog.finished()
        self._recorder.closed(step, blocks, clock())
        self._progress.done(step, blocks)

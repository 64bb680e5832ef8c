"""The step protocol: in the last step of every window each worker sends its agreement vector,
and at the window boundary every worker takes rank 0's decision and switches at once; every
step starts after the ones ``RUN_AHEAD_STEPS`` before it have communicated, and finished steps
go to the tuner.

A step boundary is where the store learns a step has begun: a key is pushed again. Python only
queues work for MXNet's engine, so a step's first push also waits until the communication of the
step ``RUN_AHEAD_STEPS`` before it has finished (which never stalls the engine: the step in
between is still queued).

``common.agreement`` makes and reads the vector; one ps-lite key every worker pushpulls once a
window carries it (``ControlKey``): a key every step costs a fast step several percent, and
decisions come due at window boundaries anyway. Rank 0's plan head (``_pace``) rides as its
payload. The vector is written around the engine (``_engine.host_view``): the last exchange was
waited for, and an engine write would wait for the step's queued backward pass, holding back
every gradient push of the step until then. Under 2-bit compression the values go as bits that
compression keeps exact (``_compression.wire``).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from typing import Any

import mxnet as mx
import numpy
import numpy.typing as npt

from autobyte_mx import _engine
from autobyte_mx._compression import Compression, unwire, wire
from autobyte_mx._devices import check_dense, check_values
from autobyte_mx._issue import COMM_PRIORITY, Issuer, clock
from autobyte_mx._layout import CONTROL_KEY, Group, Groups, Tensors
from autobyte_mx._progress import Progress
from autobyte_mx._remote import RemoteOptimizer
from autobyte_mx._stats import StepRecorder
from autobyte_mx._transport import Transport
from autobyte_mx._tuning import Tuning
from autobyte_mx._watchdog import Watchdog
from common.agreement import Agreed, Agreement

__all__ = ["DECISION_LEAD_STEPS", "ControlKey", "Controller"]

log = logging.getLogger(__name__)

RUN_AHEAD_STEPS = 2
# A step reaches the tuner once all its blocks are done, up to RUN_AHEAD_STEPS + 1 steps after
# Python ran it, and rank 0 proposes a boundary's configuration in the step before it: a
# decision leads by that much (besides the message's time).
DECISION_LEAD_STEPS = RUN_AHEAD_STEPS + 2


class Controller:
    """One worker's keys and step boundaries (see the module docstring)."""

    def __init__(self, agreement: Agreement, *, rank: int, transport: Transport,
                 issuer: Issuer, progress: Progress, watchdog: Watchdog, remote: RemoteOptimizer,
                 groups: Groups, tensors: Tensors, recorder: StepRecorder,
                 tuning: Tuning) -> None:
        self._agreement = agreement
        self._rank = rank
        self._transport = transport
        self._issuer = issuer
        self._progress = progress
        self._watchdog = watchdog
        self._remote = remote
        self._groups = groups
        self._tensors = tensors
        self._recorder = recorder
        self._tuning = tuning
        self._key: ControlKey | None = None
        self.expected: frozenset[Hashable] | None = None  # the Trainer's keys pushed each step
        self.batch: int | None = None
        self.layers_changed = True
        self._backward_s: float | None = None  # gradient-ready spread of the last fed step

    @property
    def started(self) -> bool:
        """The first exchange has been made (the workers agree)."""
        return self._key is not None

    def init(self, keys: Sequence[Hashable], values: Sequence[Any],
             compression: Compression | None) -> None:
        """Each key starts with a native key of its own (the native layout), holding its
        value; blocks of fused layouts are made at the step boundary that needs them. The
        first call first agrees with the other workers (``ControlKey.handshake``)."""
        if self._key is None:
            self._key = ControlKey(self._agreement, transport=self._transport,
                                   threshold=None if compression is None
                                   else compression.threshold)
            with self._watchdog.blocking("the first control exchange"):
                self._key.handshake(self._transport.kv)
        groups: list[Group] = []
        for k, v in zip(keys, values, strict=True):
            check_dense(k, v)
            if compression is not None:
                compression.check(k, v.dtype)
            tensor = self._tensors.add(k, v)
            group = self._groups.whole(tensor, init=False)
            group.copy_in(0, v)
            tensor.home = tensor.whole = group
            groups.append(group)
        self.order_changed()
        self.native_init(groups)
        for k, v in zip(keys, values, strict=True):
            self._tensors[k].weight = v

    def native_init(self, groups: list[Group]) -> None:
        """Create the native keys of ``groups`` (every worker alike)."""
        keys = [k for g in groups for k in g.keys]
        if not keys:
            return
        if self._remote.active:
            self._remote.initialised(groups)
        with self._watchdog.blocking("key initialisation"):
            self._transport.kv.init(keys, [a for g in groups for a in g.arrays])

    def order_changed(self) -> None:
        self._tensors.order()
        self._groups.order_changed()
        self.layers_changed = True

    def issue(self, key: Hashable, values: list[Any], targets: list[Any],
              priority: int) -> None:
        """This worker's gradient of ``key`` (one array per device); pushed again, a key
        begins a step."""
        tensor = self._tensors.of(key)
        check_values(tensor, values)
        if self._issuer.begins_step(key):
            self.new_step()
        self._issuer.issue(tensor, values, targets, priority)

    def new_step(self) -> None:
        issuer = self._issuer
        issuer.flush()
        self._progress.wait(issuer.step + 1 - RUN_AHEAD_STEPS)
        old, agreed = self._agreement.config, None
        if self._key is not None:
            with self._watchdog.blocking("the control key"):
                agreed = self._key.take()
        new = None if agreed is None else agreed.config
        # The previous step ends here: a switch's set-up (new keys) counts in the new
        # configuration's first step, which the statistics collector treats as warm-up.
        boundary = clock()
        before = issuer.main
        if new is not None:
            log.info("AutoByte step %d: %s -> %s", issuer.step + 1, old.describe(),
                     new.describe())
            self._remote.switching()
        config = self._agreement.config
        expected = self.expected
        if expected is None and issuer.issued:
            expected = frozenset(issuer.issued)
        main = self._groups.main(config, expected, self._tensors)
        issuer.begin(config, main=main, expected=self.expected,
                     head_bytes=None if agreed is None or agreed.payload is None
                     else agreed.payload[0])
        if new is not None and self._remote.active:
            self._remote.switched(issuer.step, main, expected, same=main is before)
        self._recorder.begin_step(issuer.step, config, self.batch, at=boundary)
        if (issuer.step + 1) % config.window_steps == 0:  # a window's last step agrees
            head = issuer.head_bytes(self._backward_s) if self._rank == 0 else None
            assert self._key is not None
            self._key.send(issuer.step, head_bytes=head, priority=COMM_PRIORITY)
        self._feed()

    def _feed(self) -> None:
        """Hand the steps finished since the last call to the tuning agent, in step order."""
        t0 = clock()
        self._issuer.collect()
        if self.layers_changed:
            self.layers_changed = False
            self._tuning.set_layers(self._layer_tensors())
        for rec in self._recorder.finished():
            if len(rec.ready) > 1:
                self._backward_s = max(rec.ready.values()) - min(rec.ready.values())
            self._tuning.step(rec.step, rec.config, done=rec.done, issue_s=rec.duration_s,
                              samples=rec.samples, ready=rec.ready, nbytes=rec.nbytes,
                              comm_s=rec.comm_s)
        self._recorder.add_cost(clock() - t0)

    def _layer_tensors(self) -> list[tuple[str, int]]:
        """The gradients pushed every step (all keys without a Trainer), in forward order."""
        expected = self.expected
        tensors = sorted((t for t in self._tensors.values()
                          if expected is None or t.key in expected), key=lambda t: t.layer)
        return [(t.name, t.nbytes) for t in tensors]


class ControlKey:
    """Sends this worker's agreement vector and takes the sum at the next step."""

    def __init__(self, agreement: Agreement, *, transport: Transport,
                 threshold: float | None) -> None:
        self._agreement = agreement
        self._transport = transport
        self._threshold = threshold  # 2-bit compression's, or None
        self._array: Any = None
        self._view: Any = None
        self._sent = False

    def handshake(self, kv: Any) -> None:
        """Once, before any other key: create the key and check the workers agree."""
        first = self._wire(self._agreement.vector(0, due_at=None, payload_len=1))
        self._array = mx.nd.zeros(first.shape)
        kv.init(CONTROL_KEY, self._array)
        self._array[:] = mx.nd.array(first)
        self._transport.exchange([CONTROL_KEY], [self._array])
        self._agreement.take(self._unwire(self._array.asnumpy()))
        self._view = _engine.host_view(self._array)

    def send(self, step: int, *, head_bytes: int | None, priority: int) -> None:
        """Step ``step``'s vector, for the switch at the next step."""
        payload = None if head_bytes is None else [head_bytes]
        self._view[:] = self._wire(self._agreement.vector(step, due_at=step + 1,
                                                          payload=payload, payload_len=1))
        self._transport.exchange([CONTROL_KEY], [self._array], priority=priority)
        self._sent = True

    def take(self) -> Agreed | None:
        """The sum of the vector sent since the last take (waits for it); None if none was."""
        if not self._sent:
            return None
        self._sent = False
        return self._agreement.take(self._unwire(self._array.asnumpy()))

    def _wire(self, values: list[float]) -> npt.NDArray[numpy.float32]:
        if self._threshold is None:
            return numpy.asarray(values, dtype=numpy.float32)
        return wire(values, self._threshold)

    def _unwire(self, summed: npt.NDArray[numpy.float32]) -> list[float]:
        if self._threshold is None:
            return [float(x) for x in summed]
        return unwire(summed, self._threshold)


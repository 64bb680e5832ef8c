"""The 'autobyte' kvstore: ByteScheduler-style scheduling on top of native ``dist_sync``.

``common.plan`` decides the blocks, their order and the credit; this module executes it. The
tensors pushed every step are laid out as one stream in forward order and cut into blocks
(small tensors fused, large ones split); each block has one AutoByte-owned buffer and one
native key (``_layout``). Per step, each tensor's gradient is copied into its slices of those
buffers; once every member of a block has been issued, the block gets a gate, one native
pushpull and a completion callback, and each member whose blocks are all closed gets its copy
back (``_engine``). All of it is pushed to MXNet's engine at once; the scheduler decides only
when each gate opens (``_sequencer`` + ``common.plan.Scheduler``), so MXNet's own dependencies
stay intact and the next forward pass waits per layer, overlapping the rest of the
communication. With scheduling off (the native candidate) a tensor goes whole under one native
key, as native ``dist_sync`` sends it, through its own buffer (``_issue_whole`` says why).
With several devices per worker, each key's gradients are summed on the worker first
(``_devices``), as ``dist_sync`` does, and every device gets the result.
MXNet's 2-bit gradient compression quantizes each block before it is sent, with residuals
per tensor element that stay right across layouts (``_compression``).

A fused key's outputs are written once its block closes: when every member has been pushed
(the Trainer pushes every key before it reads any), at a ``pull`` of it, or at the next step.

The optimizer runs where the Trainer puts it. With ``update_on_kvstore`` (Gluon's default for
distributed stores) it runs on the servers as with native ``dist_sync``, applied to each block
tensor by tensor (``_server``), with each element pinned to one server whatever the layout
(``_layout``); with scheduling off each tensor then goes as native sends it, from the caller's
gradient into the caller's weight, with no copy.
Otherwise the servers only sum and the workers update.

Live tuning (on by default; ``tuner='none'`` or AUTOBYTE_TUNER=none turns it off): each step's
statistics go to a ``common.control.TuningAgent`` once the step has finished (``_tuning``), and
a decision of the tuner that has come due rides rank 0's control key like a ``reconfigure``
request, so every worker switches at the same step.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import os
import pickle
import threading
import time
import types
import uuid
import weakref
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import mxnet as mx
import numpy
from mxnet.kvstore import KVStoreBase
from mxnet.kvstore.kvstore import _get_kvstore_server_command_type

from autobyte_mx import _engine, _states
from autobyte_mx._blocks import block_rows, push_blocks
from autobyte_mx._checks import big_array_bound, check_environment
from autobyte_mx._compression import Compression, parse_compression
from autobyte_mx._control import ControlKey
from autobyte_mx._devices import DeviceSum
from autobyte_mx._layout import CONTROL_KEY, Group, Groups, Tensor
from autobyte_mx._pace import Pace
from autobyte_mx._sequencer import Round, Sequencer
from autobyte_mx._server import ServerOptimizer, check_element_wise
from autobyte_mx._stats import StepRecorder, StepStats
from autobyte_mx._transport import Transport
from autobyte_mx._tuning import Tuning
from autobyte_mx._watchdog import Watchdog
from common.agreement import Agreement
from common.config import Config
from common.control import TuningAgent, adapter_options
from common.errors import ConfigError, UnsupportedError
from common.plan import START, Scheduler, Send, issue_order
from common.stats import comm_factor

__all__ = ["AutoByte"]

log = logging.getLogger(__name__)

# Engine priority of an admitted block's push/pull: the scheduler has already chosen the order,
# so once a gate opens the transfer should not wait behind queued compute on the CPU worker.
COMM_PRIORITY = 1 << 20
# Python only queues work for MXNet's engine; a loop that never waits on a result would queue
# steps without bound (and hear every tuning decision tens of steps late). A step's first
# pushpull waits until the communication of the step this many before it has finished, which
# never stalls the engine: the step in between is still queued.
RUN_AHEAD_STEPS = 2
# A step reaches the tuner once all its blocks are done, up to RUN_AHEAD_STEPS + 1 steps after
# Python ran it, and rank 0 proposes each step's configuration a step ahead: a decision leads by
# that much (besides the message's time).
DECISION_LEAD_STEPS = RUN_AHEAD_STEPS + 2


@KVStoreBase.register
class AutoByte(KVStoreBase):  # type: ignore[misc]
    """``mx.kv.create('autobyte')`` or ``AutoByte(partition_bytes=..., credit_bytes=...)``.

    Options are ``common.config.Config`` fields (keyword > AUTOBYTE_* > default), or a whole
    ``config``. ``timeout`` (s, default the config's ``grace_s``, AUTOBYTE_GRACE_S) bounds a
    communication stall.
    ``model_name`` names the model for the tuner's features ("resnet50", ...; unknown models are
    judged by their layers). ``tuning`` takes ``common.control.TuningAgent`` keywords (e.g.
    ``endpoint``, ``decision_log``, ``lead_s``). Tuning is live by default (``tuner='meta'``);
    ``tuner='none'`` or AUTOBYTE_TUNER=none turns it off. ``sample_every``: steps between
    the steps timed tensor by tensor (default: one a window, as ``AutoByteStrategy``).
    """

    def __init__(self, *, config: Config | None = None, base: str = "dist_sync",
                 timeout: float | None = None, model_name: str = "unknown",
                 tuning: Mapping[str, Any] | None = None, sample_every: int | None = None,
                 **options: Any) -> None:
        if base != "dist_sync":
            raise UnsupportedError(f"AutoByte schedules synchronous training only: base must be "
                                   f"'dist_sync', got base={base!r} (async kvstores apply "
                                   "updates per worker, so there is no step to schedule)")
        if config is not None and options:
            raise ConfigError(f"give config or keyword options, not both; got {sorted(options)}")
        config = config if config is not None else Config.from_env(start=START["ps"], **options)
        agent_options = adapter_options(tuning)
        agent_options.setdefault("lead_steps", DECISION_LEAD_STEPS)
        check_environment()
        self._kv = mx.kv.create(base)
        self._transport = Transport(self._kv)
        self._rank: int = self._kv.rank
        self._num_workers: int = self._kv.num_workers
        # Before the first control exchange: rank 0 may host the coordinator (and load the
        # meta-network), which the other workers wait for in that exchange.
        self._agent = TuningAgent(rank=self._rank, num_workers=self._num_workers,
                                  config=config, model=model_name, arch="ps",
                                  **agent_options)
        self._agreement = Agreement(rank=self._rank, workers=self._num_workers, config=config,
                                    due=self._agent.due)
        self._servers = int(os.environ.get("DMLC_NUM_SERVER") or 1)
        self._tuning = Tuning(self._agent, self.config, sample_every=sample_every,
                              link_factor=comm_factor("ps", self._num_workers, self._servers))
        self._layers_changed = True
        self._scheduler = Scheduler(self.config, start=self._start_send)
        self._sequencer = Sequencer(self._scheduler)
        self._recorder = StepRecorder()
        self._watchdog = Watchdog(self.config.grace_s if timeout is None else _timeout(timeout),
                                  describe=self._describe)
        self._tensors: dict[Hashable, Tensor] = {}
        self._groups = Groups(zeros=lambda size, dtype: mx.nd.zeros((size,), dtype=dtype),
                              init=self._native_init)
        self._main: Group | None = None  # the group of the expected keys in this step
        self._rounds: dict[int, Round] = {}  # group id -> its latest round in this step
        self._unsampled: list[Any] = []  # arrays of whole tensors' keys of this unsampled step
        self._step = 0
        self._issued: set[Hashable] = set()
        self._expected: frozenset[Hashable] | None = None
        self._missing = -1  # expected keys not issued yet in this step (-1: none expected)
        self._forward: dict[str, int] = {}
        self._control: ControlKey | None = None
        self._batch: int | None = None
        self._pace = Pace()
        self._backward_s: float | None = None  # gradient-ready spread of the last fed step
        self._unfinished: dict[int, int] = {}  # step -> blocks issued and not yet finished
        self._progress = threading.Condition(threading.Lock())
        self._head_bytes: int | None = None  # rank 0's measurement; None: the credit size
        self._optimizer: Any = None  # the user's optimizer, when it runs on the server
        self._compression: Compression | None = None  # set_gradient_compression's
        self._token = ""  # names this job's optimizer in the server's messages
        self._epoch = 0  # rises with every switch of layout (the optimizer on the server)
        atexit.register(_close_at_exit, weakref.ref(self))
        log.info("AutoByte kvstore: rank %d of %d, %s", self._rank, self._num_workers,
                 self.config.describe())

    # -- what MXNet asks -------------------------------------------------------------------
    @property
    def type(self) -> str:
        return "dist_sync_autobyte"

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def num_workers(self) -> int:
        return self._num_workers

    def is_capable(self, capability: str) -> bool:
        return True

    def set_optimizer(self, optimizer: Any) -> None:
        """Run ``optimizer`` on the server for every later push (``update_on_kvstore``).

        Every worker calls it (the Trainer does); rank 0 sends it. With several servers it
        must come before the first ``init`` (the Trainer and Module call it so): tensors are
        pinned to servers as they are first laid out.
        """
        if self._compression is not None:
            raise UnsupportedError(
                "AutoByte runs 2-bit gradient compression with the optimizer on the workers "
                "only (a layout used before gets its server weights back through a push, which "
                "compression would quantize); create the Trainer with update_on_kvstore=False")
        if not isinstance(optimizer, mx.optimizer.Optimizer):
            raise ConfigError("set_optimizer needs an mxnet.optimizer.Optimizer, got "
                              f"optimizer={optimizer!r}")
        why = check_element_wise(optimizer)
        if why is not None:
            raise UnsupportedError(f"AutoByte cannot run this optimizer on the server: {why}; "
                                   "create the Trainer with update_on_kvstore=False (the "
                                   "optimizer then runs on the workers)")
        if self._servers > 1 and self._tensors:
            raise ConfigError(
                f"with {self._servers} servers set_optimizer must come before the first init "
                "(gluon.Trainer and Module call it so): each element's optimizer state stays "
                "on one server, chosen when its tensor is first laid out")
        self._optimizer = optimizer
        self._token = uuid.uuid4().hex
        if self._servers > 1:
            self._groups.pin(self._servers, big_array_bound() - 1)
        self._send(blocks={k: v for g in self._groups for k, v in g.pieces().items()})
        self._barrier()  # no worker pushes before the server has it

    def set_gradient_compression(self, compression_params: Any) -> None:
        """MXNet's 2-bit compression, per block with residuals per element
        (``_compression``); before the first ``init``, as with ``dist_sync``."""
        threshold = parse_compression(compression_params)
        if self._control is not None:
            raise ConfigError("set_gradient_compression must come before the first init "
                              "(gluon.Trainer(..., compression_params=...) does it so)")
        self._kv.set_gradient_compression(dict(compression_params))
        self._compression = Compression(threshold)
        self._transport.compressed = True

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        """Write the servers' optimizer state to ``fname`` as MXNet's Updater writes its own
        (``_states``); rank 0 only, as the servers hold one state for every worker."""
        self._check_states()
        if self._rank != 0:
            raise ConfigError("with the optimizer on the servers save_optimizer_states runs on "
                              f"rank 0 only (this is rank {self._rank}): the servers hold one "
                              "state for every worker; call trainer.save_states on rank 0")
        states = self._server_states()
        optimizer = _states.counted(self._optimizer, {t.key: t.updates for t in
                                                      self._tensors.values()})
        _states.write(fname, states, optimizer if dump_optimizer else None)

    def load_optimizer_states(self, fname: str) -> None:
        """Give the servers the state in ``fname`` (an Updater's file, from this kvstore or a
        Trainer with the optimizer on the workers); with its optimizer, that one runs on."""
        self._check_states()
        states, optimizer = _states.read(fname)
        if optimizer is not None:
            why = check_element_wise(optimizer)
            if why is not None:
                raise UnsupportedError(f"{fname}: AutoByte cannot run its optimizer on the "
                                       f"server: {why}")
        data = _states.wire(states, {k: t.size for k, t in self._tensors.items()})
        self._flush()
        self._wait_for_step(self._step)
        if optimizer is not None:
            old, self._optimizer = self._token, optimizer
            self._token = uuid.uuid4().hex  # the servers start a job with it, counts included
            self._send(blocks={k: v for g in self._groups for k, v in g.pieces().items()},
                       drop=old)
        self._send(load=data)

    @property
    def _updater(self) -> Any:
        """Gluon's Trainer reads the optimizer loaded from a file here."""
        return types.SimpleNamespace(optimizer=self._optimizer)

    def _check_states(self) -> None:
        if self._optimizer is None:
            raise UnsupportedError("the optimizer state lives in the Trainer on each worker "
                                   "(update_on_kvstore=False): use trainer.save_states and "
                                   "trainer.load_states")

    def _server_states(self) -> dict[Hashable, Any]:
        """Rank 0 reads the state of every tensor pushed so far, one component at a time,
        through the keys of its last push (``_server``: export, pull, restore)."""
        self._flush()
        self._wait_for_step(self._step)
        tensors = [t for t in self._tensors.values() if t.pushed is not None]
        templates = {t.key: self._optimizer.create_state(t.key, mx.nd.zeros(t.shape,
                                                                          dtype=t.dtype))
                     for t in tensors}
        flats = {t.key: [numpy.zeros(t.size, dtype=t.dtype) for _ in
                         _states.components(templates[t.key])] for t in tensors}
        groups = list({id(t.pushed): t.pushed for t in tensors if t.pushed}.values())
        keys = [k for g in groups for k in g.keys]
        for component in range(max((len(f) for f in flats.values()), default=0)):
            self._send(export=(component, keys))
            outs = [mx.nd.zeros(a.shape, dtype=a.dtype) for g in groups for a in g.arrays]
            with self._watchdog.blocking("the servers' optimizer state"):
                self._kv.pull(keys, out=outs)
                values = iter([o.asnumpy() for o in outs])
            for group in groups:
                for buffer in group.buffers:
                    _take(group, buffer.block.segments, next(values), flats, component)
            self._send(restore=keys)
        return {t.key: _states.shaped(templates[t.key], [mx.nd.array(f, dtype=t.dtype)
                                                          .reshape(t.shape)
                                                          for f in flats[t.key]])
                for t in tensors}

    def _barrier(self) -> None:
        with self._watchdog.blocking("a barrier"):
            self._kv._barrier()

    def barrier(self) -> None:
        """Block until every worker reaches this point."""
        self._barrier()

    # -- AutoByte's own API ----------------------------------------------------------------
    @property
    def config(self) -> Config:
        """The configuration in force (the same on every worker)."""
        return self._agreement.config

    @property
    def step(self) -> int:
        return self._step

    def reconfigure(self, config: Config) -> None:
        """Rank 0's request: every worker switches at the same later step (one step of lag).

        On other ranks the call is ignored, so every worker can run the same tuning code.
        """
        self._agreement.request(config)

    def set_layer_order(self, names: Sequence[str]) -> None:
        """Forward order hint: parameter names (or str(key)) from the input side on.

        Call it with the same list on every worker. Names not listed keep their place after
        the listed ones, in registration order.
        """
        self._forward = {str(n): i for i, n in enumerate(names)}
        self._assign_layers()
        self._layers_changed = True

    @property
    def tuning(self) -> TuningAgent:
        """The live-tuning agent (``enabled``, ``why_disabled``, ``coordinator``)."""
        return self._agent

    def step_stats(self) -> list[StepStats]:
        """Statistics of the steps finished since the last call (oldest first; at most the
        last 1000)."""
        self._collect()
        return self._recorder.drain()

    @property
    def stats_cost_s(self) -> float:
        """Total time spent collecting statistics so far (for the overhead budget)."""
        return self._recorder.total_cost_s

    def close(self) -> None:
        """Stop AutoByte's threads and release the native kvstore.

        Runs at interpreter exit too: the native store's destructor meets the other workers
        in a final barrier and must run before Python tears down, or ps-lite aborts the process.
        """
        if self._kv is None:
            return
        with self._watchdog.blocking("the last operations and the final barrier"):
            self._flush()
            mx.nd.waitall()
            self._transport.close()
            self._kv = None
        self._watchdog.close()
        self._agent.close()  # after the final barrier: no worker is still training

    # -- called by the Trainer hook ----------------------------------------------------------
    def attach_trainer(self, *, names: Sequence[str], forward: Sequence[str],
                       active: Iterable[int]) -> None:
        """Key i is the Trainer's i-th parameter; ``forward`` its creation order; ``active``
        the keys pushed every step (grad_req != 'null')."""
        self._names = list(names)
        self._expected = frozenset(active)
        self._layers_changed = True
        self.set_layer_order(forward)

    def note_batch(self, batch_size: int) -> None:
        self._batch = int(batch_size)

    # -- KVStore data API ------------------------------------------------------------------
    def init(self, key: Any, value: Any) -> None:
        """Each key starts with a native key of its own (the native layout), holding
        ``value``; blocks of fused layouts are made at the step boundary that needs them."""
        keys, arrays = _pairs(key, value)
        values = [a[0] for a in arrays]  # several devices start from the same value
        self._handshake()
        groups: list[Group] = []
        for k, v in zip(keys, values, strict=True):
            _check_dense(k, v)
            if k in self._tensors:
                raise ConfigError(f"key {k!r} is already initialised")
            tensor = self._tensors[k] = self._new_tensor(k, v)
            group = self._groups.whole(tensor, init=False)
            group.copy_in(0, v)
            tensor.home = tensor.whole = group
            groups.append(group)
        self._assign_layers()
        self._layers_changed = True
        self._native_init(groups)
        for k, v in zip(keys, values, strict=True):
            self._tensors[k].weight = v

    def broadcast(self, key: Any, value: Any, out: Any, priority: int = 0) -> None:
        keys, arrays = _pairs(key, value)
        outs = _outs(keys, out)
        self.init(keys, [a[0] for a in arrays])
        for k, targets in zip(keys, outs, strict=True):
            group = self._groups.whole(self._tensors[k])
            self._kv.pull(group.keys, out=group.arrays, priority=priority)
            group.copy_out(0, targets, mx.nd.concat)

    def pushpull(self, key: Any, value: Any, out: Any = None, priority: int = 0) -> None:
        """Send each key's gradient (a list: one array per device of this worker) and write
        the sum over workers and devices into ``out`` (every device's), else into ``value``."""
        keys, arrays = _pairs(key, value)
        outs = arrays if out is None else _outs(keys, out)
        for k, values, targets in zip(keys, arrays, outs, strict=True):
            self._issue(k, values, targets, priority)

    def push(self, key: Any, value: Any, priority: int = 0) -> None:
        """Send a gradient; a later ``pull`` returns the sum over workers."""
        keys, arrays = _pairs(key, value)
        for k, values in zip(keys, arrays, strict=True):
            self._issue(k, values, [], priority)

    def pull(self, key: Any, out: Any = None, priority: int = 0,
             ignore_sparse: bool = True) -> None:
        """The sum a key last received (a block still open with it is sent first). A whole
        tensor's buffer holds it also after a pushpull into another output: native
        ``dist_sync`` receives the sum into the array it pushed, then copies it to ``out``."""
        keys = list(key) if isinstance(key, (list, tuple)) else [key]
        for k, targets in zip(keys, _outs(keys, out), strict=True):
            tensor = self._tensor(k)
            self._flush(tensor)
            home = tensor.home
            if home is not None:
                home.copy_out(home.index[tensor.key], targets, mx.nd.concat)
                continue
            for target in targets:
                if target is not tensor.weight:
                    tensor.weight.copyto(target)

    def row_sparse_pull(self, key: Any, out: Any = None, priority: int = 0,
                        row_ids: Any = None) -> None:
        raise UnsupportedError("AutoByte supports dense gradients only (row_sparse_pull "
                               "called); use kvstore='dist_sync' for sparse models")

    # -- internals: issue ------------------------------------------------------------------
    def _issue(self, key: Hashable, values: list[Any], targets: list[Any],
               priority: int) -> None:
        tensor = self._tensor(key)
        value = self._local_sum(tensor, values, priority)
        if self._step == 0 or key in self._issued:
            self._new_step()
        self._issued.add(key)
        if self._expected is not None and key in self._expected:
            self._missing -= 1
        if not self.config.scheduling:
            self._issue_whole(tensor, value, targets, priority)
            return
        group = self._groups.of(tensor, self._main, self.config)
        if self._optimizer is not None:
            self._note_weight(tensor, targets, group)
        member = group.index[key]
        rnd = self._rounds.get(group.gid)
        if rnd is None or not rnd.open or member in rnd.issued:
            order = issue_order(group.layout, head_bytes=self.config.credit_bytes
                                if self._head_bytes is None else self._head_bytes)
            rnd = self._rounds[group.gid] = self._sequencer.new_round(group, self._step, order)
        group.copy_in(member, value)
        if self._tuning.sampled(self._step):
            self._stamp(tensor, value, priority)
        self._close(rnd, rnd.issue(member, targets), priority)

    def _local_sum(self, tensor: Tensor, values: list[Any], priority: int) -> Any:
        """This worker's gradient: with several devices, their sum (``_devices``)."""
        checked = tensor.checked  # the Trainer passes the same arrays every step
        if len(values) != len(checked) or \
                any(v is not c for v, c in zip(values, checked, strict=True)):
            for value in values:
                _check_dense(tensor.key, value)
                if tuple(value.shape) != tensor.shape:
                    raise ConfigError(f"key {tensor.key!r}: value shape {tuple(value.shape)} "
                                      f"differs from the initialised shape {tensor.shape}")
            tensor.checked = tuple(values)
            tensor.devices = DeviceSum(values, tensor.shape, tensor.dtype) \
                if len(values) > 1 else None
        return values[0] if tensor.devices is None else tensor.devices.push(priority)

    def _close(self, rnd: Round, blocks: list[int], priority: int) -> None:
        if blocks:
            self._count(rnd.step, len(blocks))  # before the pushes: a block may finish at once
            push_blocks(rnd, blocks, pushpull=self._pushpull_blocks,
                        gate_fired=self._sequencer.gate_fired, done=self._send_done,
                        priority=priority, comm_priority=COMM_PRIORITY,
                        prepare=None if self._compression is None else self._quantize)

    def _quantize(self, rnd: Round, block: int) -> None:
        assert self._compression is not None
        self._compression.quantize(rnd.group, block, skip=rnd.missing(block))

    def _pushpull_blocks(self, keys: list[int], arrays: list[Any]) -> None:
        self._transport.exchange(keys, arrays, None, COMM_PRIORITY)

    def _flush(self, tensor: Tensor | None = None) -> None:
        """Close the open rounds of this step (only the one holding ``tensor``'s issued
        gradient, if given): at program points every worker reaches alike."""
        if self._unsampled:  # one callback times this step's whole tensors issued so far
            arrays, self._unsampled = self._unsampled, []
            self._count(self._step, len(arrays))
            self._watchdog.started()
            _engine.push_callback(functools.partial(self._unsampled_done, self._step,
                                                    len(arrays)), const=arrays)
        for rnd in list(self._rounds.values()):
            if not rnd.open:
                continue
            if tensor is not None and rnd.group.index.get(tensor.key, -1) not in rnd.issued:
                continue
            self._close(rnd, rnd.flush(), 0)

    def _issue_whole(self, tensor: Tensor, value: Any, targets: list[Any],
                     priority: int) -> None:
        """Scheduling off: one native pushpull of the whole tensor when its gradient is ready
        (no gate). With the optimizer on the server it goes as native sends it, from the
        caller's gradient into the caller's weight (``direct``). Otherwise it goes from the
        tensor's own buffer: in place on the caller's gradient, native ``dist_sync`` with
        ``update_on_kvstore=False`` lost sums under CPU contention (two MLP jobs at once),
        while pushpulls from AutoByte's buffers matched native bitwise; the copy back is the
        native store's own (``out``), which costs no Python op.
        Only sampled steps time each tensor; the others are counted and timed as a whole at
        ``_flush``, once their last expected tensor is issued."""
        group = tensor.whole = tensor.whole or self._groups.whole(tensor)
        direct = self._optimizer is not None and bool(targets) and self._compression is None
        if self._optimizer is not None:
            self._note_weight(tensor, targets, group)
        step = self._step
        sampled = self._tuning.sampled(step)
        if sampled:
            self._count(step, 1)
            self._watchdog.started()
            # the stamp goes before the copy into the buffer, so before the transfer's end
            ready = self._stamp(tensor, value, priority, before=[] if direct else group.arrays)
            t0 = self._recorder_clock()
        if direct:  # native's own path: pushed from the gradient, pulled into the weight
            done_on = group.views_out(0, targets[0])
            self._transport.exchange(group.keys, group.views_in(0, value), done_on, priority)
            tensor.home = None  # the result is in the weight (_note_weight)
        else:
            group.copy_in(0, value)
            done_on = group.arrays
            if self._compression is None:
                outs = group.views_out(0, targets[0]) if targets else group.arrays
                self._transport.exchange(group.keys, group.arrays, outs, priority)
            else:  # a push, then a pull into the array pushed (below)
                self._compression.quantize(group, 0, priority=priority)
                self._transport.exchange(group.keys, group.arrays, None, priority)
                group.copy_out(0, targets[:1], mx.nd.concat)
            tensor.home = group
        for target in targets[1:]:  # the other devices, as the native store broadcasts
            targets[0].copyto(target)
        if sampled:
            _engine.push_callback(functools.partial(self._whole_done, step, tensor, t0,
                                                    len(self._issued), ready),
                                  const=done_on, priority=priority)
        else:
            self._unsampled.extend(done_on)
            if self._missing == 0:
                self._flush()  # the step's last tensor: time it now, not at the next step

    def _stamp(self, tensor: Tensor, value: Any, priority: int,
               before: Sequence[Any] = ()) -> list[float]:
        """Note when ``value`` (the gradient) is ready, in an engine callback that runs
        before any later op writing ``before``; returns the list its time lands in."""
        at = [0.0]
        _engine.push_callback(functools.partial(self._ready, self._step, tensor.name, at),
                              const=[value], mutable=before, priority=priority)
        return at

    def _ready(self, step: int, name: str, at: list[float]) -> None:
        at[0] = now = self._recorder_clock()
        self._recorder.ready(step, name, now)

    def _start_send(self, send: Send) -> None:
        self._watchdog.started()
        self._pace.started()
        send.tag.open_gate(send.block.index)

    def _send_done(self, send: Send) -> None:
        self._watchdog.finished()
        self._pace.finished(send.nbytes)
        self._scheduler.done(send)
        self._block_done(send.step)

    def _whole_done(self, step: int, tensor: Tensor, t0: float, position: int,
                    ready: list[float]) -> None:
        self._watchdog.finished()
        now = self._recorder_clock()
        start = ready[0] or t0  # the transfer starts once the gradient is ready
        self._recorder.chunk(step, tensor.name, 0, position, tensor.nbytes, start, start, now)
        self._block_done(step)

    def _unsampled_done(self, step: int, blocks: int) -> None:
        self._watchdog.finished()
        self._recorder.closed(step, blocks, self._recorder_clock())
        self._block_done(step, blocks)

    def _count(self, step: int, blocks: int) -> None:
        self._recorder.issued(step, blocks)
        with self._progress:
            self._unfinished[step] = self._unfinished.get(step, 0) + blocks

    def _block_done(self, step: int, blocks: int = 1) -> None:
        with self._progress:
            left = self._unfinished.get(step, 0) - blocks
            if left > 0:
                self._unfinished[step] = left
            else:
                self._unfinished.pop(step, None)
                self._progress.notify_all()

    def _wait_for_step(self, step: int) -> None:
        """Block until every block issued in ``step`` or before has finished."""
        with self._progress:
            if not any(s <= step for s in self._unfinished):
                return
        with self._watchdog.blocking(f"step {step}'s communication"), self._progress:
            self._progress.wait_for(lambda: not any(s <= step for s in self._unfinished))

    @staticmethod
    def _recorder_clock() -> float:
        return time.perf_counter()

    # -- internals: steps and reconfiguration ------------------------------------------------
    def _new_step(self) -> None:
        self._flush()
        self._wait_for_step(self._step + 1 - RUN_AHEAD_STEPS)
        old, agreed = self.config, None
        if self._control is not None:
            with self._watchdog.blocking("the control key"):
                agreed = self._control.take()
        if agreed is not None and agreed.payload is not None:
            self._head_bytes = agreed.payload[0]
        new = None if agreed is None else agreed.config
        # The previous step ends here: a switch's set-up (new keys) counts in the new
        # configuration's first step, which the statistics collector treats as warm-up.
        boundary = self._recorder_clock()
        before = self._main
        if new is not None:
            log.info("AutoByte step %d: %s -> %s", self._step + 1, old.describe(),
                     new.describe())
            self._scheduler.reconfigure(new)
            self._epoch += 1
        expected = self._expected
        if expected is None and self._issued:
            expected = frozenset(self._issued)
        self._step += 1
        self._issued = set()
        self._missing = -1 if self._expected is None else len(self._expected)
        self._rounds = {}
        self._scheduler.begin_step(self._step)
        self._main = self._groups.main(self.config, expected, self._tensors)
        if new is not None and self._optimizer is not None:
            self._refresh_layout(expected, same=self._main is before)
        self._recorder.begin_step(self._step, self.config, self._batch, at=boundary)
        head = self._pace.head_bytes(self._backward_s) if self._rank == 0 else None
        assert self._control is not None
        self._control.send(self._step, head_bytes=head, priority=COMM_PRIORITY)
        self._feed()

    def _collect(self) -> None:
        """Move finished blocks from the scheduler's trace to the step recorder."""
        trace = self._scheduler.drain_trace()
        if trace:
            self._recorder.chunks(block_rows(trace))

    def _feed(self) -> None:
        """Hand the steps finished since the last call to the tuning agent, in step order."""
        t0 = self._recorder_clock()
        self._collect()
        if self._layers_changed:
            self._layers_changed = False
            self._tuning.set_layers(self._layer_tensors())
        for rec in self._recorder.finished():
            if len(rec.ready) > 1:
                self._backward_s = max(rec.ready.values()) - min(rec.ready.values())
            self._tuning.step(rec.step, rec.config, done=rec.done, issue_s=rec.duration_s,
                              samples=rec.samples, ready=rec.ready, nbytes=rec.nbytes,
                              comm_s=rec.comm_s)
        self._recorder.add_cost(self._recorder_clock() - t0)

    def _layer_tensors(self) -> list[tuple[str, int]]:
        """The gradients pushed every step (all keys without a Trainer), in forward order."""
        expected = self._expected
        tensors = sorted((t for t in self._tensors.values()
                          if expected is None or t.key in expected), key=lambda t: t.layer)
        return [(t.name, t.nbytes) for t in tensors]

    def _handshake(self) -> None:
        """Once, before any key exists: create the control key and compare configurations."""
        if self._control is not None:
            return
        self._control = ControlKey(self._agreement, transport=self._transport,
                                   threshold=None if self._compression is None
                                   else self._compression.threshold)
        with self._watchdog.blocking("the first control exchange"):
            self._control.handshake(self._kv)

    # -- internals: tensors and layouts ------------------------------------------------------
    def _tensor(self, key: Hashable) -> Tensor:
        try:
            return self._tensors[key]
        except KeyError:
            raise ConfigError(f"key {key!r} was never initialised (init or broadcast it "
                              f"first); known keys: {sorted(map(str, self._tensors))}") from None

    def _new_tensor(self, key: Hashable, value: Any) -> Tensor:
        names = getattr(self, "_names", None)
        name = names[key] if names is not None and isinstance(key, int) else str(key)
        if self._compression is not None:
            self._compression.check(key, value.dtype)
        return Tensor(key, name, tuple(value.shape), value.dtype,
                      numpy.dtype(value.dtype).itemsize, layer=len(self._tensors))

    def _assign_layers(self) -> None:
        """Forward order: the hint's position, then registration order (same on all workers)."""
        hinted = len(self._forward)
        order = sorted(enumerate(self._tensors.values()),
                       key=lambda it: (self._forward.get(it[1].name, hinted), it[0]))
        for layer, (_, tensor) in enumerate(order):
            tensor.layer = layer
        self._groups.order_changed()

    def _native_init(self, groups: list[Group]) -> None:
        keys = [k for g in groups for k in g.keys]
        if not keys:
            return
        if self._optimizer is not None:  # the server's keys start from the current weights
            if self._rank == 0:
                for group in groups:
                    group.fill(lambda t: t.weight)
                self._send(blocks={k: v for g in groups for k, v in g.pieces().items()})
            for group in groups:
                group.epoch = self._epoch
        with self._watchdog.blocking("key initialisation"):
            self._kv.init(keys, [a for g in groups for a in g.arrays])

    # -- internals: the optimizer on the server ----------------------------------------------
    def _send(self, *, blocks: Mapping[int, Any] | None = None, refresh: Sequence[int] = (),
              **states: Any) -> None:
        """Rank 0 tells the servers about new blocks, keys to refresh, or the state to export,
        restore or load (``_server``)."""
        if self._rank != 0:
            return
        message = ServerOptimizer(self._optimizer, self._token, blocks=blocks, refresh=refresh,
                                  sums=[CONTROL_KEY], **states)
        with self._watchdog.blocking("a message to the server"):
            self._kv._send_command_to_servers(_get_kvstore_server_command_type("kController"),
                                              pickle.dumps(message, 0).decode("ascii"))

    def _note_weight(self, tensor: Tensor, targets: list[Any], group: Group) -> None:
        """The Trainer pulls into the weights: note them, and bring a stale group's server
        keys up to date first (a key made at the step boundary is fresh)."""
        if targets:
            tensor.weight = targets[0]
        tensor.pushed = group
        tensor.updates += 1
        if group.epoch != self._epoch:
            self._refresh([group])

    def _refresh_layout(self, expected: frozenset[Hashable] | None, *, same: bool) -> None:
        """At a switch, refresh at once every group the new layout will use. A switch that
        keeps the groups (``same``: a new credit, or native to native) refreshes nothing: their
        server keys took every update, and the last step's rounds may still be on their way."""
        wholes = {t.key: t.whole for t in self._tensors.values() if t.whole is not None}
        if same:
            for group in [*wholes.values(), *([] if self._main is None else [self._main])]:
                if group.epoch == self._epoch - 1:
                    group.epoch = self._epoch
            return
        if self._main is not None:
            groups = [self._main]
        else:
            groups = [g for k, g in wholes.items() if expected is None or k in expected]
        stale = [g for g in groups if g.epoch != self._epoch]
        if stale:
            self._refresh(stale)

    def _refresh(self, groups: list[Group]) -> None:
        """Give the server's keys of ``groups`` the current weights: rank 0 pushes them, the
        others zeros, and the server stores that round as it comes. The earlier steps'
        rounds finish first (the server would store one of them instead, and take the
        weights for a gradient); the refresh is waited for, so no later push of these keys
        (from another array) can overtake it."""
        self._wait_for_step(self._step - 1)
        keys = [k for g in groups for k in g.keys]
        arrays = [a for g in groups for a in g.arrays]
        self._send(refresh=keys)
        for group in groups:
            if self._rank == 0:
                group.fill(lambda t: t.weight)
            else:
                for array in group.arrays:
                    array[:] = 0
        self._kv.pushpull(keys, arrays, priority=COMM_PRIORITY)
        with self._watchdog.blocking("the server's weights of a layout used before"):
            for array in arrays:
                array.wait_to_read()
        for group in groups:
            group.epoch = self._epoch

    def _describe(self) -> str:
        peers = self._agent.peers()
        return (f"rank {self._rank}, step {self._step}, {self.config.describe()}, "
                f"{self._scheduler.inflight_bytes} bytes in flight"
                + (f"; {peers}" if peers else ""))


def _close_at_exit(ref: weakref.ref[AutoByte]) -> None:
    store = ref()
    if store is not None:
        store.close()


def _take(group: Group, segments: Sequence[Any], values: Any,
          flats: Mapping[Hashable, list[Any]], component: int) -> None:
    """Copy one exported key's ``values`` into the flat states of the tensors whose last push
    it carried (others' pieces may be of a key that never reached the server)."""
    at = 0
    for seg in segments:
        tensor = group.tensors[seg.tensor]
        parts = flats.get(tensor.key)
        if parts is not None and tensor.pushed is group and component < len(parts):
            parts[component][seg.start:seg.stop] = values[at:at + seg.size]
        at += seg.size


def _timeout(timeout: Any) -> float:
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        value = math.nan
    if not value > 0:
        raise ConfigError(f"timeout must be a number of seconds > 0, got timeout={timeout!r}")
    return value


def _devices(key: Hashable, value: Any) -> list[Any]:
    """One key's arrays, one per device of this worker (an array alone: one device)."""
    arrays = list(value) if isinstance(value, (list, tuple)) else [value]
    if not arrays:
        raise ConfigError(f"key {key!r}: no arrays given")
    return arrays


def _pairs(key: Any, value: Any) -> tuple[list[Hashable], list[list[Any]]]:
    """Keys and, per key, its arrays: ``(k, a)``, ``(k, [a0, a1])`` (devices) or
    ``([k1, k2], [a, [b0, b1]])``, as MXNet's kvstores take them."""
    if isinstance(key, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(key):
            raise ConfigError(f"{len(key)} keys need as many values, got {value!r}")
        return list(key), [_devices(k, v) for k, v in zip(key, value, strict=True)]
    return [key], [_devices(key, value)]


def _outs(keys: list[Hashable], out: Any) -> list[list[Any]]:
    if len(keys) == 1:
        return [_devices(keys[0], out)]
    if not isinstance(out, (list, tuple)) or len(out) != len(keys):
        raise ConfigError(f"{len(keys)} keys need as many outputs, got {out!r}")
    return [_devices(k, o) for k, o in zip(keys, out, strict=True)]


def _check_dense(key: Hashable, value: Any) -> None:
    stype = getattr(value, "stype", "default")
    if stype != "default":
        raise UnsupportedError(f"key {key!r} has a {stype} array: AutoByte supports dense "
                               "gradients only; use kvstore='dist_sync' for sparse models")

"""The 'autobyte' kvstore: ByteScheduler-style scheduling on top of native ``dist_sync``.

``common.plan`` decides the blocks, their order and the credit; this store executes it. The
tensors pushed every step are laid out as one stream in forward order and cut into blocks
(small tensors fused, large ones split), each with one AutoByte-owned buffer and one native key
(``_layout``). ``_issue`` copies each gradient into its blocks and sends each block once it is
whole, when the scheduler opens its gate, so MXNet's own dependencies stay intact and the next
forward pass waits per layer. With scheduling off (the native candidate) a tensor goes whole
under one native key, as native ``dist_sync`` sends it. Several devices per worker are summed
on the worker first (``_devices``); MXNet's 2-bit compression quantizes each block
(``_compression``); the optimizer runs on the servers (``_remote``, ``_server``) or on the
workers, where the Trainer puts it.

A step boundary is where the store learns a step has begun: a key is pushed again. There the
step agreement (``_control``, ``common.agreement``) applies rank 0's decision on every worker
at once, and the steps finished since the last boundary go to the tuner (``_tuning``).
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import types
import weakref
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import mxnet as mx
from mxnet.kvstore import KVStoreBase

from autobyte_mx._checks import check_environment
from autobyte_mx._compression import Compression, parse_compression
from autobyte_mx._control import DECISION_LEAD_STEPS, Controller
from autobyte_mx._devices import check_dense, check_values, outs, pairs
from autobyte_mx._issue import COMM_PRIORITY, Issuer
from autobyte_mx._layout import Group, Groups, Tensors
from autobyte_mx._progress import Progress
from autobyte_mx._remote import RemoteOptimizer
from autobyte_mx._stats import StepRecorder, StepStats
from autobyte_mx._transport import Transport
from autobyte_mx._tuning import Tuning
from autobyte_mx._watchdog import Watchdog
from common.agreement import Agreement
from common.config import Config
from common.control import TuningAgent, adapter_options
from common.errors import ConfigError, UnsupportedError
from common.plan import START
from common.stats import TrainingStats, comm_factor

__all__ = ["AutoByte"]

log = logging.getLogger(__name__)


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
        self._transport = Transport(mx.kv.create(base))
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
        self._tuning = Tuning(self._agent, config, sample_every=sample_every,
                              link_factor=comm_factor("ps", self._num_workers, self._servers))
        self._recorder = StepRecorder()
        self._watchdog = Watchdog(config.grace_s if timeout is None else _timeout(timeout),
                                  describe=self._describe)
        self._progress = Progress(self._watchdog)
        self._tensors = Tensors()
        self._groups = Groups(zeros=lambda size, dtype: mx.nd.zeros((size,), dtype=dtype),
                              init=self._native_init)
        self._remote = RemoteOptimizer(self._transport, rank=self._rank, servers=self._servers,
                                       groups=self._groups, tensors=self._tensors,
                                       watchdog=self._watchdog, settle=self._progress.wait,
                                       quiesce=self._quiesce, priority=COMM_PRIORITY)
        self._issuer = Issuer(config, transport=self._transport, groups=self._groups,
                              remote=self._remote, recorder=self._recorder,
                              tuning=self._tuning, watchdog=self._watchdog,
                              progress=self._progress)
        self._controller = Controller(self._agreement, rank=self._rank,
                                      transport=self._transport, issuer=self._issuer,
                                      progress=self._progress, watchdog=self._watchdog,
                                      remote=self._remote, groups=self._groups,
                                      tensors=self._tensors, recorder=self._recorder,
                                      tuning=self._tuning)
        self._compression: Compression | None = None  # set_gradient_compression's
        atexit.register(_close_at_exit, weakref.ref(self))
        log.info("AutoByte kvstore: rank %d of %d, %s", self._rank, self._num_workers,
                 config.describe())

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
        self._remote.set(optimizer)
        self._barrier()  # no worker pushes before the server has it

    def set_gradient_compression(self, compression_params: Any) -> None:
        """MXNet's 2-bit compression, per block with residuals per element
        (``_compression``); before the first ``init``, as with ``dist_sync``."""
        threshold = parse_compression(compression_params)
        if self._controller.started:
            raise ConfigError("set_gradient_compression must come before the first init "
                              "(gluon.Trainer(..., compression_params=...) does it so)")
        self._kv.set_gradient_compression(dict(compression_params))
        self._compression = self._issuer.compression = Compression(threshold)
        self._transport.compressed = True

    def save_optimizer_states(self, fname: str, dump_optimizer: bool = False) -> None:
        """Write the servers' optimizer state to ``fname`` as MXNet's Updater writes its own
        (``_states``); rank 0 only, as the servers hold one state for every worker."""
        self._remote.save(fname, dump_optimizer)

    def load_optimizer_states(self, fname: str) -> None:
        """Give the servers the state in ``fname`` (an Updater's file, from this kvstore or a
        Trainer with the optimizer on the workers); with its optimizer, that one runs on."""
        self._remote.load(fname)

    @property
    def _updater(self) -> Any:
        """Gluon's Trainer reads the optimizer loaded from a file here."""
        return types.SimpleNamespace(optimizer=self._remote.optimizer)

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
        return self._issuer.step

    def reconfigure(self, config: Config | None = None, **changes: Any) -> None:
        """Switch to ``config`` (or the current one with ``changes``) at the first window
        boundary whose agreement has not been sent (it goes out in the window's last step).

        Every worker switches at the same step; rank 0's request decides (calling it on every
        worker with the same value is fine).
        """
        self._agreement.request(config, **changes)

    def expect_steps(self, steps: int) -> None:
        """The job runs ``steps`` more steps (0: unknown); call it before a loop of known length.
        Live tuning then starts no try the job ends before it can pay back."""
        self._agent.expect_steps(steps, step=self.step)

    def set_layer_order(self, names: Sequence[str]) -> None:
        """Forward order hint: parameter names (or str(key)) from the input side on.

        Call it with the same list on every worker. Names not listed keep their place after
        the listed ones, in registration order.
        """
        self._tensors.forward = {str(n): i for i, n in enumerate(names)}
        self._order_changed()

    @property
    def tuning(self) -> TuningAgent:
        """The live-tuning agent (``enabled``, ``why_disabled``, ``coordinator``)."""
        return self._agent

    def statistics(self) -> TrainingStats:
        """What this worker measured: steps, the latest window's step time, samples/s and
        bytes/s, per-layer backward times (what the tuner sees; tuning on or off)."""
        return self._agent.statistics()

    def step_stats(self) -> list[StepStats]:
        """Statistics of the steps finished since the last call (oldest first; at most the
        last 1000)."""
        self._issuer.collect()
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
            self._issuer.flush()
            mx.nd.waitall()
            self._transport.close()
        self._watchdog.close()
        self._agent.close()  # after the final barrier: no worker is still training

    # -- called by the Trainer hook ----------------------------------------------------------
    def attach_trainer(self, *, names: Sequence[str], forward: Sequence[str],
                       active: Iterable[int]) -> None:
        """Key i is the Trainer's i-th parameter; ``forward`` its creation order; ``active``
        the keys pushed every step (grad_req != 'null')."""
        self._tensors.names = list(names)
        self._controller.expected = frozenset(active)
        self.set_layer_order(forward)

    def note_batch(self, batch_size: int) -> None:
        self._controller.batch = int(batch_size)

    # -- KVStore data API ------------------------------------------------------------------
    def init(self, key: Any, value: Any) -> None:
        """Each key starts with a native key of its own (the native layout), holding
        ``value``; blocks of fused layouts are made at the step boundary that needs them."""
        keys, arrays = pairs(key, value)
        values = [a[0] for a in arrays]  # several devices start from the same value
        self._controller.handshake(self._kv, None if self._compression is None
                                   else self._compression.threshold)
        groups: list[Group] = []
        for k, v in zip(keys, values, strict=True):
            check_dense(k, v)
            if self._compression is not None:
                self._compression.check(k, v.dtype)
            tensor = self._tensors.add(k, v)
            group = self._groups.whole(tensor, init=False)
            group.copy_in(0, v)
            tensor.home = tensor.whole = group
            groups.append(group)
        self._order_changed()
        self._native_init(groups)
        for k, v in zip(keys, values, strict=True):
            self._tensors[k].weight = v

    def broadcast(self, key: Any, value: Any, out: Any, priority: int = 0) -> None:
        keys, arrays = pairs(key, value)
        self.init(keys, [a[0] for a in arrays])
        for k, targets in zip(keys, outs(keys, out), strict=True):
            group = self._groups.whole(self._tensors[k])
            self._kv.pull(group.keys, out=group.arrays, priority=priority)
            group.copy_out(0, targets, mx.nd.concat)

    def pushpull(self, key: Any, value: Any, out: Any = None, priority: int = 0) -> None:
        """Send each key's gradient (a list: one array per device of this worker) and write
        the sum over workers and devices into ``out`` (every device's), else into ``value``."""
        keys, arrays = pairs(key, value)
        for k, values, targets in zip(keys, arrays, arrays if out is None else outs(keys, out),
                                      strict=True):
            self._issue(k, values, targets, priority)

    def push(self, key: Any, value: Any, priority: int = 0) -> None:
        """Send a gradient; a later ``pull`` returns the sum over workers."""
        keys, arrays = pairs(key, value)
        for k, values in zip(keys, arrays, strict=True):
            self._issue(k, values, [], priority)

    def pull(self, key: Any, out: Any = None, priority: int = 0,
             ignore_sparse: bool = True) -> None:
        """The sum a key last received (a block still open with it is sent first). A whole
        tensor's buffer holds it also after a pushpull into another output: native
        ``dist_sync`` receives the sum into the array it pushed, then copies it to ``out``."""
        keys = list(key) if isinstance(key, (list, tuple)) else [key]
        for k, targets in zip(keys, outs(keys, out), strict=True):
            tensor = self._tensors.of(k)
            self._issuer.flush(tensor)
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

    @property
    def _kv(self) -> Any:
        return self._transport.kv

    # -- internals: steps ------------------------------------------------------------------
    def _issue(self, key: Hashable, values: list[Any], targets: list[Any],
               priority: int) -> None:
        tensor = self._tensors.of(key)
        check_values(tensor, values)
        if self._issuer.begins_step(key):
            self._controller.new_step()
        self._issuer.issue(tensor, values, targets, priority)

    def _quiesce(self) -> None:
        """Send every open block and wait until all issued have finished."""
        self._issuer.flush()
        self._progress.wait(self._issuer.step)

    # -- internals: tensors and layouts ------------------------------------------------------
    def _order_changed(self) -> None:
        self._tensors.order()
        self._groups.order_changed()
        self._controller.layers_changed = True

    def _native_init(self, groups: list[Group]) -> None:
        keys = [k for g in groups for k in g.keys]
        if not keys:
            return
        if self._remote.active:
            self._remote.initialised(groups)
        with self._watchdog.blocking("key initialisation"):
            self._kv.init(keys, [a for g in groups for a in g.arrays])

    def _describe(self) -> str:
        peers = self._agent.peers()
        return (f"rank {self._rank}, step {self.step}, {self.config.describe()}, "
                f"{self._issuer.scheduler.inflight_bytes} bytes in flight"
                + (f"; {peers}" if peers else ""))


def _close_at_exit(ref: weakref.ref[AutoByte]) -> None:
    store = ref()
    if store is not None:
        store.close()


def _timeout(timeout: Any) -> float:
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        value = math.nan
    if not value > 0:
        raise ConfigError(f"timeout must be a number of seconds > 0, got timeout={timeout!r}")
    return value



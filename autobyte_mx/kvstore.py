"""The 'autobyte' kvstore: ByteScheduler-style scheduling on top of native ``dist_sync``.

``common.plan`` decides the blocks (small tensors fused, large ones split), their order and the
credit; this store executes it: ``_layout`` gives each block a buffer and a native key,
``_issue`` sends a block once it is whole and the scheduler opens its gate, inside MXNet's
engine, so the next forward pass waits per layer. With scheduling off (the native candidate) a
tensor goes whole under one native key, as ``dist_sync`` sends it. ``_control`` finds the step
boundaries (a key pushed again), where every worker applies rank 0's decision at once.
"""

from __future__ import annotations

import atexit
import logging
import os
import types
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import mxnet as mx
from mxnet.kvstore import KVStoreBase

from autobyte_mx._checks import check_environment
from autobyte_mx._compression import Compression, parse_compression
from autobyte_mx._control import DECISION_LEAD_STEPS, Controller
from autobyte_mx._devices import outs, pairs
from autobyte_mx._issue import COMM_PRIORITY, Issuer
from autobyte_mx._layout import Groups, Tensors
from autobyte_mx._progress import Progress
from autobyte_mx._remote import RemoteOptimizer
from autobyte_mx._stats import StepRecorder, StepStats
from autobyte_mx._transport import Transport
from autobyte_mx._tuning import Tuning
from autobyte_mx._watchdog import Watchdog
from common.agreement import Agreement
from common.config import Config
from common.control import Tuned, TuningAgent, adapter_options
from common.errors import ConfigError, UnsupportedError
from common.plan import START
from common.stats import comm_factor

__all__ = ["AutoByte"]

log = logging.getLogger(__name__)


@KVStoreBase.register
class AutoByte(KVStoreBase, Tuned):  # type: ignore[misc]
    """``mx.kv.create('autobyte')`` or ``AutoByte(partition_bytes=..., credit_bytes=...)``.

    Options are ``common.config.Config`` fields (keyword > AUTOBYTE_* > default), or a whole
    ``config``. ``timeout`` (s, default the config's ``grace_s``, AUTOBYTE_GRACE_S) bounds a
    communication stall.
    ``model_name`` names the model for the tuner's features ("resnet50", ...; unknown models are
    judged by their layers). ``tuning`` takes ``common.control.TuningAgent`` keywords (e.g.
    ``endpoint``, ``decision_log``, ``lead_s``). Tuning is live by default (``tuner='meta'``);
    ``tuner='none'`` or AUTOBYTE_TUNER=none turns it off. ``sample_every``: steps between
    the steps timed tensor by tensor (default: a window's last step, at most one a second;
    ``_tuning``).
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
        self._watchdog = Watchdog(config.grace_s if timeout is None else timeout,
                                  describe=self._describe)
        self._progress = Progress(self._watchdog)
        self._tensors = Tensors()
        self._groups = Groups(zeros=lambda size, dtype: mx.nd.zeros((size,), dtype=dtype),
                              init=lambda groups: self._controller.native_init(groups))
        self._remote = RemoteOptimizer(self._transport, rank=self._rank, servers=self._servers,
                                       groups=self._groups, tensors=self._tensors,
                                       watchdog=self._watchdog, settle=self._progress.wait,
                                       quiesce=lambda: self._issuer.quiesce(),
                                       priority=COMM_PRIORITY)
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
        self._remote.set(optimizer, compressed=self._compression is not None)
        self.barrier()  # no worker pushes before the server has it

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

    def barrier(self) -> None:
        """Block until every worker reaches this point."""
        with self._watchdog.blocking("a barrier"):
            self._kv._barrier()

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

    def set_layer_order(self, names: Sequence[str]) -> None:
        """Forward order hint: parameter names (or str(key)) from the input side on.

        Call it with the same list on every worker. Names not listed keep their place after
        the listed ones, in registration order.
        """
        self._tensors.forward = {str(n): i for i, n in enumerate(names)}
        self._controller.order_changed()

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
        keys, arrays = pairs(key, value)
        # several devices start from the same value
        self._controller.init(keys, [a[0] for a in arrays], self._compression)

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
            self._controller.issue(k, values, targets, priority)

    def push(self, key: Any, value: Any, priority: int = 0) -> None:
        """Send a gradient; a later ``pull`` returns the sum over workers."""
        keys, arrays = pairs(key, value)
        for k, values in zip(keys, arrays, strict=True):
            self._controller.issue(k, values, [], priority)

    def pull(self, key: Any, out: Any = None, priority: int = 0,
             ignore_sparse: bool = True) -> None:
        """The sum a key last received. A whole tensor's buffer holds it also after a
        pushpull into another output: native ``dist_sync`` receives the sum into the array it
        pushed, then copies it to ``out``."""
        keys = list(key) if isinstance(key, (list, tuple)) else [key]
        for k, targets in zip(keys, outs(keys, out), strict=True):
            self._issuer.pull(self._tensors.of(k), targets)

    def row_sparse_pull(self, key: Any, out: Any = None, priority: int = 0,
                        row_ids: Any = None) -> None:
        raise UnsupportedError("AutoByte supports dense gradients only (row_sparse_pull "
                               "called); use kvstore='dist_sync' for sparse models")

    @property
    def _kv(self) -> Any:
        return self._transport.kv

    def _describe(self) -> str:
        peers = self._agent.peers()
        return (f"rank {self._rank}, step {self.step}, {self.config.describe()}, "
                f"{self._issuer.scheduler.inflight_bytes} bytes in flight"
                + (f"; {peers}" if peers else ""))


def _close_at_exit(ref: weakref.ref[AutoByte]) -> None:
    store = ref()
    if store is not None:
        store.close()

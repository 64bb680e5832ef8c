"""AutoByteStrategy: MultiWorkerMirroredStrategy with AutoByte's all-reduce.

    strategy = autobyte_tf.AutoByteStrategy()      # TF_CONFIG as for MWMS; without it,
                                                   # one local worker, scheduling off
    with strategy.scope():
        model = build_model(); model.compile(...)
    model.fit(dataset, ...)
    strategy.reconfigure(partition_bytes="512KiB", credit_bytes="2MiB")   # live, all workers
    strategy.statistics()                                                 # what it measured

Live tuning is on by default (``tuner="meta"``; ``tuner="none"`` or AUTOBYTE_TUNER=none turns
it off): every worker reports its statistics windows to the coordinator (``common.control``;
rank 0 hosts it where ``autobyte launch`` set AUTOBYTE_CONTROL_ENDPOINT), and rank 0 puts the
coordinator's decisions into the step agreement, so every worker switches at the same step.

Everything else is MWMS's: variables, datasets, checkpoints, the collective runtime. Only the
cross-device op is replaced (``cross_device_ops``), Keras 3 is made to work under MWMS
(``_patches``), and step calls keep the agreement protocol (``_control``). Custom loops use
``strategy.run`` as with MWMS; wrap the step in ``strategy.function`` (instead of
``tf.function``) to get reconfiguration and statistics there too.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf
from numpy.typing import NDArray
from tensorflow.python.ops import resource_variable_ops

from autobyte_tf import _patches
from autobyte_tf._checks import check_no_auto_jit, parse_tf_config
from autobyte_tf._control import Controller, SteppedFunction, decision_lead
from autobyte_tf._stats import ReadyTimes
from autobyte_tf._transport import AutoByteAllReduce, after, stamp_op
from common.config import Config
from common.control import Tuned, TuningAgent, adapter_options
from common.errors import ConfigError
from common.plan import START
from common.units import parse_rate

__all__ = ["AutoByteStrategy"]

log = logging.getLogger(__name__)

_SYNC_GROUP_KEY = 0x41420001  # our own collective group for step agreement; MWMS counts from 1
_SYNC_KEYS = itertools.count(1)
_STRATEGY_COUNT = itertools.count(1)
_KEY_BASE_STRIDE = 10_000
DEFAULT_BANDWIDTH = "1gbit"


class AutoByteStrategy(tf.distribute.MultiWorkerMirroredStrategy, Tuned):  # type: ignore[misc]
    """MWMS whose gradients are all-reduced in chunks, planned, with a bounded window.

    Knobs: ``config`` (a ``common.config.Config``) and/or its fields as keywords
    (``partition_bytes``, ``credit_bytes``, ``scheduling``, ``window_steps``, ...); precedence is
    keywords > ``AUTOBYTE_*`` environment > defaults. ``bandwidth`` (bits/s per worker link,
    e.g. "10gbit") only shapes the simulated plan. ``sync_timeout`` (s, default the config's
    ``grace_s``) bounds the step agreement collective, so a lost worker is reported instead of
    hanging forever; TensorFlow's own heartbeat declares a worker dead after ``grace_s`` too.
    ``model_name`` names the model for the tuner's features ("resnet50", ...; unknown models
    are judged by their layers). ``tuning`` takes ``common.control.TuningAgent`` keywords
    (e.g. ``endpoint``, ``decision_log``, ``lead_s``). ``sample_every`` (steps between sampled
    steps; default: a window's second step when rank 0's ``common.stats.SampleBudget`` allows,
    agreed with the configuration) must be the same on every worker, like the configuration:
    a sampled step runs a trace of its own, and the workers' collectives match only when all
    run the same trace.
    """

    def __init__(self, *, config: Config | None = None, bandwidth: float | str = DEFAULT_BANDWIDTH,
                 sample_every: int | None = None, sync_timeout: float | None = None,
                 model_name: str = "unknown", tuning: Mapping[str, Any] | None = None,
                 cluster_resolver: Any = None, communication_options: Any = None,
                 **options: Any) -> None:
        resolved = _resolve_config(config, options)
        rate = parse_rate(bandwidth, "bandwidth")
        if sample_every is not None and (isinstance(sample_every, bool) or
                                         not isinstance(sample_every, int) or sample_every < 1):
            raise ConfigError(
                f"sample_every must be an int >= 1, got sample_every={sample_every!r}")
        if sync_timeout is None:
            sync_timeout = resolved.grace_s
        if not (isinstance(sync_timeout, int | float) and sync_timeout > 0):
            raise ConfigError(
                f"sync_timeout must be > 0 seconds, got sync_timeout={sync_timeout!r}")
        local = cluster_resolver is None and not os.environ.get("TF_CONFIG", "").strip()
        if local:  # one worker: nothing to communicate, so nothing to schedule or tune
            resolved = resolved.replace(scheduling=False, tuner="none")
        elif cluster_resolver is None:
            parse_tf_config()
        check_no_auto_jit()
        # MWMS instances in one process share collective keys unless their bases differ; each
        # AutoByteStrategy takes its own (workers create strategies in the same order).
        self._collective_key_base = _KEY_BASE_STRIDE * next(_STRATEGY_COUNT)
        _warn_if_collectives_enabled()
        if not local:
            _warn_if_one_inter_op_thread()
            _configure_heartbeat(resolved.grace_s, cluster_resolver)
        super().__init__(cluster_resolver=cluster_resolver,
                         communication_options=communication_options)
        _exit_on_sigterm()
        _patches.install()
        extended = self.extended
        self._worker_device = extended.worker_devices[0]
        workers = int(extended._num_workers)
        rank = int(getattr(extended, "_id_in_cluster", 0) or 0)
        with tf.init_scope(), tf.device(self._worker_device):
            self._samples = tf.Variable(0, dtype=tf.int64, trainable=False,
                                        name="autobyte_samples")
        agent_options = adapter_options(tuning)
        agent_options.setdefault("lead_steps", decision_lead(resolved.window_steps))
        self._agent = TuningAgent(rank=rank, num_workers=workers, config=resolved,
                                  model=model_name, arch="allreduce", **agent_options)
        self._agreement = _Agreement(self._worker_device, workers, fallback=_Broadcaster(
            self._worker_device, workers, float(sync_timeout)))
        self._controller = Controller(
            config=resolved, rank=rank, workers=workers, bandwidth=rate,
            broadcast=self._agreement, sample_every=sample_every, agent=self._agent,
            stamping=True)
        self._cross_ops = AutoByteAllReduce(extended._cross_device_ops, self._controller,
                                            self._agreement)
        extended._cross_device_ops = self._cross_ops
        self._autobyte_hooks = self
        if local:
            log.warning("AutoByteStrategy: TF_CONFIG is not set, so this is one local worker "
                        "(as MultiWorkerMirroredStrategy) with scheduling off; set TF_CONFIG "
                        "or start the script with `autobyte launch` to train on several")
        else:
            log.info("AutoByteStrategy: worker %d of %d, %s", rank, workers,
                     resolved.describe())

    # -- public API ------------------------------------------------------------------------------
    @property
    def config(self) -> Config:
        """The configuration in force (changes only at an agreement step)."""
        return self._controller.config

    @property
    def rank(self) -> int:
        return self._controller.rank

    @property
    def num_workers(self) -> int:
        return self._controller.workers

    @property
    def step(self) -> int:
        """Steps run through ``fit`` or ``strategy.function`` so far."""
        return self._controller.step

    @property
    def measured_plan(self) -> bool:
        """True once the gradients' plan comes from measured layer times (the simulator)."""
        return self._controller.measured_plan

    def reconfigure(self, config: Config | None = None, **changes: Any) -> None:
        """Switch to ``config`` (or the current one with ``changes``) at the first window
        boundary that is at least half a window away (the agreement runs while that half
        window trains).

        Every worker switches at the same step; rank 0's request decides (calling it on every
        worker with the same value is fine). The next step of each function retraces once,
        unless it ran this configuration before (its trace is kept).
        """
        self._controller.reconfigure(config, **changes)

    def close(self) -> None:
        """Stop live tuning (its threads are daemons and this also runs at exit)."""
        self._agent.close()

    def function(self, fn: Callable[..., Any], *, jit_compile: bool | None = None,
                 **tf_function_options: Any) -> Callable[..., Any]:
        """``tf.function(fn)`` for custom loops, keeping AutoByte's step protocol."""
        if jit_compile:
            raise ConfigError("AutoByteStrategy.function cannot use jit_compile=True: XLA "
                              "cannot compile AutoByte's per-chunk collectives and Python "
                              "stamps; leave jit_compile unset or False")
        return self.stepped(functools.partial(tf.function, fn, **tf_function_options),
                            can_sample=lambda: True)

    def run(self, fn: Callable[..., Any], args: Any = (), kwargs: Any = None,
            options: Any = None) -> Any:
        return super().run(self._counted(fn), args=args, kwargs=kwargs, options=options)

    # -- hooks for _patches ------------------------------------------------------------------
    def stepped(self, build: Callable[[], Callable[..., Any]], *,
                can_sample: Callable[[], bool]) -> SteppedFunction:
        return SteppedFunction(self._controller, build, lambda: int(self._samples.numpy()),
                               can_sample=can_sample)

    def _counted(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Count this worker's samples; on sampled steps, stamp when the step's data arrives."""
        controller = self._controller
        samples = self._samples

        @functools.wraps(fn)
        def replica_fn(*args: Any, **kwargs: Any) -> Any:
            leaves = tf.nest.flatten((args, kwargs))
            at = _batch_leaf(leaves)
            if at is None or tf.executing_eagerly():
                return fn(*args, **kwargs)
            samples.assign_add(tf.cast(tf.shape(leaves[at])[0], tf.int64))
            stamps = controller.stamps()
            if stamps is not None:  # the step starts when its data is there
                start = stamp_op(leaves[at], _start_stamper(stamps), "autobyte_step_start")
                leaves[at] = after(start, leaves[at])
                args, kwargs = tf.nest.pack_sequence_as((args, kwargs), leaves)
            return fn(*args, **kwargs)

        return replica_fn


def _resolve_config(config: Config | None, options: dict[str, Any]) -> Config:
    if config is None:
        return Config.from_env(start=START["allreduce"], **options)
    if not isinstance(config, Config):
        raise ConfigError(f"config must be a common.config.Config, got config={config!r}")
    return config.replace(**options) if options else config


def _batch_leaf(leaves: list[Any]) -> int | None:
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, tf.Tensor) and leaf.shape.rank:
            return i
    return None


def _start_stamper(stamps: ReadyTimes) -> Callable[[NDArray[Any]], np.int8]:
    def stamp(_: NDArray[Any]) -> np.int8:
        stamps.stamp_start(time.perf_counter())
        return np.int8(0)
    return stamp


def _configure_heartbeat(grace_s: float, cluster_resolver: Any) -> None:
    """TensorFlow's coordination service, configured as MultiWorkerMirroredStrategy would,
    with its heartbeat timeout at ``grace_s``: by default it declares a worker dead after 10 s
    and ends the job, so a 20 s network outage killed jobs MXNet survives. Kept when the
    script configured the service itself."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.distribute import multi_worker_util
    from tensorflow.python.distribute.cluster_resolver import TFConfigClusterResolver
    from tensorflow.python.eager import context

    if context.context().coordination_service is not None:
        return
    resolver = cluster_resolver or TFConfigClusterResolver()
    spec = resolver.cluster_spec()
    if resolver.task_type not in ("chief", "worker"):
        return
    jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
            for job in ("chief", "worker") if job in spec.jobs]
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=jobs, heartbeat_timeout_in_ms=int(grace_s * 1000))


def _exit_on_sigterm() -> None:
    """SIGTERM ends the process once the running step returns to Python, or after
    ``_STOP_WAIT_S`` if it does not.

    MultiWorkerMirroredStrategy's coordination service installs a C-level SIGTERM handler for
    its preemption notifier, so a worker told to stop (``autobyte launch`` on Ctrl-C, a
    cluster manager) kept training until SIGKILL. A handler the script installed is kept.
    A Python handler runs only between bytecodes of the main thread: a worker whose peer took
    the signal between steps waits in that step's collective for the dead peer, so a thread
    woken by the signal's wakeup fd ends the process if the main thread has not.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return

    def stop(signum: int, frame: object) -> None:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, stop)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs_before = signal.set_wakeup_fd(ours.fileno(), warn_on_full_buffer=False)
    if theirs_before != -1:  # an event loop's: leave signals to it
        signal.set_wakeup_fd(theirs_before)
        ours.close()
        theirs.close()
        return

    def watch() -> None:
        while theirs.recv(1) != bytes([signal.SIGTERM]):
            pass
        time.sleep(_STOP_WAIT_S)
        os._exit(128 + signal.SIGTERM)

    _keep_alive.append(ours)
    threading.Thread(target=watch, name="autobyte-sigterm", daemon=True).start()


_STOP_WAIT_S = 1.0  # for the running step to return; well inside a launcher's grace (5 s)
_keep_alive: list[socket.socket] = []


def _warn_if_one_inter_op_thread() -> None:
    """Say when TensorFlow has one inter-op thread: its executor then runs the gradient-ready
    stamps and the collectives only after the whole backward pass, so nothing overlaps and the
    tuner, seeing no layer times, keeps the native path."""
    if _inter_op_threads() == 1:
        log.warning("AutoByteStrategy: TensorFlow runs one inter-op thread, so gradients are "
                    "communicated only after the whole backward pass and scheduling cannot "
                    "overlap them; give it 2 or more (TF_NUM_INTEROP_THREADS or "
                    "tf.config.threading.set_inter_op_parallelism_threads)")


def _inter_op_threads() -> int:
    """TensorFlow's inter-op threads as it picks them: the configured count, else
    TF_NUM_INTEROP_THREADS, else one per core this process may run on."""
    configured = tf.config.threading.get_inter_op_parallelism_threads()
    if configured > 0:
        return int(configured)
    given = os.environ.get("TF_NUM_INTEROP_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    return len(os.sched_getaffinity(0))


def _warn_if_collectives_enabled() -> None:
    """Say when this process already made a MultiWorkerMirroredStrategy (of any kind).

    Making one (re)initialises TensorFlow's collective runtime in this process; a collective
    that another worker starts meanwhile is lost and the job hangs in it (seen with several
    strategies per process). One strategy per process is safe; with several, every worker must
    make all of them before any worker runs a collective, e.g. behind a barrier.
    """
    from tensorflow.python.eager import context

    if getattr(context.context(), "_collective_ops_server_def", None) is not None:
        log.warning("AutoByteStrategy: this process already made a MultiWorkerMirroredStrategy; "
                    "making another re-initialises TensorFlow's collective runtime, and a "
                    "collective another worker starts meanwhile is lost (the job hangs). "
                    "Make every strategy on every worker before the first collective runs "
                    "(e.g. behind a barrier), or use one strategy per process")


class _Agreement:
    """The workers' agreement vectors, summed in the gradients' all-reduce.

    Every trace of the main call adds a few elements to its all-reduce (``ride``): each worker
    writes its vector into a variable the step reads, and the step writes the sum into another
    variable, read at the boundary. Each value goes as two of the gradients' dtype, the value
    rounded and what rounding left, so the sum is exact whatever the dtype's precision. Until a
    traced step carries a vector of that length (the first half window), or where the
    gradients' dtype cannot (float16), the vector goes by a collective of its own
    (``fallback``).
    """

    def __init__(self, device: str, workers: int, *,
                 fallback: Callable[[NDArray[Any]], Callable[[], NDArray[Any]]]) -> None:
        self._device = device
        self._workers = workers
        self._fallback = fallback
        self._variables: dict[int, tuple[Any, Any]] = {}  # by length: (sent, summed)
        self._refused: set[int] = set()
        self._sent: dict[int, NDArray[Any]] = {}
        self.rode = self.went_alone = 0  # agreements of each kind, for tests and logs

    def ride(self, length: int, dtype: Any) -> tuple[Any, Callable[[Any], Any]] | None:
        if self._workers < 2 or length in self._refused:
            return None
        pair = self._variables.get(length)
        if dtype not in (tf.float32, tf.float64) or (pair and pair[0].dtype != dtype):
            self._refused.add(length)  # a trace in force may not carry it: never ride
            return None
        if pair is None:
            with tf.init_scope(), tf.device(self._device):  # plain variables, not mirrored
                pair = self._variables[length] = (self._variable(length, dtype, "sent"),
                                                  self._variable(length, dtype, "summed"))
        sent, summed = pair
        return sent.read_value(), summed.assign

    @staticmethod
    def _variable(length: int, dtype: Any, name: str) -> Any:
        return resource_variable_ops.ResourceVariable(
            tf.zeros([2 * length], dtype), trainable=False, name=f"autobyte_agreement_{name}")

    def __call__(self, vector: NDArray[Any]) -> Callable[[], NDArray[Any]]:
        length = len(vector)
        pair = self._variables.get(length)
        if pair is None or length in self._refused:
            self.went_alone += 1
            return self._fallback(vector)
        self.rode += 1
        sent, summed = pair
        last = self._sent.get(length)
        if last is None or not np.array_equal(last, vector):
            rounded = vector.astype(sent.dtype.as_numpy_dtype)
            rest = (vector - rounded).astype(rounded.dtype)
            sent.assign(np.concatenate([rounded, rest]))
            self._sent[length] = vector.copy()

        def wait() -> NDArray[Any]:
            total = summed.numpy().astype(np.float64)
            result: NDArray[Any] = total[:length] + total[length:]
            return result
        return wait


class _Broadcaster:
    """The workers' agreement vectors, summed by one eager collective of their own, run on a
    thread of its own while training goes on; the returned function waits for the sum."""

    def __init__(self, device: str, workers: int, timeout: float) -> None:
        self._device = device
        self._workers = workers
        self._timeout = timeout
        self._keys = _SYNC_KEYS  # shared: every worker makes its strategies in one order

    def __call__(self, vector: NDArray[Any]) -> Callable[[], NDArray[Any]]:
        key = next(self._keys)  # taken in call order, the same on every worker
        box: list[Any] = []

        def run() -> None:
            try:
                with tf.device(self._device):
                    out = tf.raw_ops.CollectiveReduceV2(
                        input=tf.constant(vector, dtype=tf.float64),
                        group_size=self._workers, group_key=_SYNC_GROUP_KEY, instance_key=key,
                        ordering_token=[], merge_op="Add", final_op="Id",
                        communication_hint="auto", timeout_seconds=self._timeout)
                box.append(out.numpy())
            except Exception as exc:  # raised where the result is waited for
                box.append(exc)

        thread = threading.Thread(target=run, name="autobyte-agreement", daemon=True)
        thread.start()

        def wait() -> NDArray[Any]:
            thread.join()
            if isinstance(box[0], Exception):
                raise box[0]
            result: NDArray[Any] = box[0]
            return result
        return wait

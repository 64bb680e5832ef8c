"""AutoByte's cross-device op: the shared plan's blocks as TF collectives, lane-bounded.

Everything MultiWorkerMirroredStrategy all-reduces (gradients through the optimizer's
replica-context all-reduce, metrics through ``strategy.reduce``) reaches
``CollectiveAllReduce._all_reduce``. This subclass replaces it while a step is traced: the
tensors are laid out in blocks (``common.plan``: small ones fused, large ones split), each
block's segments are packed into one buffer and reduced by one ``CollectiveReduceV2``, created in
the planned order, and the results are split back. Collectives that share an ordering token run
in creation order, so ``lanes`` tokens bound the blocks in flight. Instance keys come from
MWMS's own launcher (assigned at call time), so our collectives and MWMS's never collide.

On sampled steps (traces of their own: other steps run none of it) each gradient is stamped
when it is ready and the results of a few runs of collectives when they are there, so a
window's link rate is its bytes over the time the link was busy, not over the step. Native
(scheduling off) takes MWMS's own path, with the same stamps on its results, so native windows
carry the statistics the tuner needs to leave native; eager calls, sparse gradients and tensors
without a static shape take MWMS's own path unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import tensorflow as tf
from numpy.typing import NDArray
from tensorflow.python.distribute import cross_device_ops as tf_cdo
from tensorflow.python.distribute import reduce_util

from autobyte_tf._sequencer import Plan, TensorInfo
from common.plan import MAX_LANES

log = logging.getLogger(__name__)

__all__ = ["AutoByteAllReduce", "Planner", "ReadyStamps", "after", "stamp_op"]

DONE_STAMPS = 8  # collectives of a call whose result is stamped on sampled steps, at most


class ReadyStamps(Protocol):
    """Receives gradient-ready times, and when the results of runs of collectives are there,
    while a sampled step runs (called from TF threads)."""

    def stamp(self, call: tuple[TensorInfo, ...], index: int, when: float) -> None: ...

    def done(self, call: tuple[TensorInfo, ...], tensors: tuple[int, ...],
             when: float) -> None:
        """Collectives of ``call`` that could start once ``tensors`` were ready (the link
        busy from then) finished at ``when``."""
        ...


class Planner(Protocol):
    """What the cross-device op asks of the strategy while tracing."""

    @property
    def scheduling(self) -> bool: ...

    def note_call(self, tensors: tuple[TensorInfo, ...]) -> None:
        """An all-reduce of ``tensors`` is being traced (native or planned)."""
        ...

    def plan_for(self, tensors: tuple[TensorInfo, ...]) -> Plan: ...

    def stamps(self) -> ReadyStamps | None:
        """Where gradient-ready stamps go; None: trace no stamps (a step that does not
        sample)."""
        ...

    @property
    def main_call(self) -> tuple[TensorInfo, ...] | None:
        """The call that carries the step agreement (the gradients')."""
        ...

    @property
    def vector_length(self) -> int:
        """float64 values of the step agreement while ``main_call`` is in force."""
        ...


class Rider(Protocol):
    """What rides in the main call's all-reduce (the step agreement), set up while tracing."""

    def ride(self, length: int, dtype: Any) -> tuple[Any, Callable[[Any], Any]] | None:
        """A flat tensor of ``dtype`` carrying ``length`` float64 values, to add to the
        all-reduce, and a function that takes its sum; None if nothing rides (the agreement then
        goes its own way)."""
        ...


class AutoByteAllReduce(tf_cdo.CollectiveAllReduce):  # type: ignore[misc]
    """Drop-in for MWMS's ``CollectiveAllReduce`` with the same devices, group and keys."""

    def __init__(self, base: Any, planner: Planner, rider: Rider) -> None:
        super().__init__(devices=base._devices, group_size=base._group_size,
                         options=base._options, collective_keys=base._collective_keys,
                         canonicalize_devices=base._canonicalize_devices)
        self._planner = planner
        self._rider = rider
        self._lanes: list[list[Any]] = []
        with tf.init_scope():
            for device in self._devices:
                with tf.device(device):
                    self._lanes.append([tf.Variable(0.0, trainable=False,
                                                    name=f"autobyte_lane{i}")
                                        for i in range(MAX_LANES)])
        self.blocks_traced = 0
        self._warned = False

    def _warn_unscheduled(self, flat: Sequence[Any]) -> None:
        """Say once that gradients go unscheduled (a user would otherwise see no effect)."""
        if self._warned or tf.executing_eagerly():
            return
        count = sum(_unshaped(t) for t in flat)
        if count:
            self._warned = True
            log.warning("AutoByte: %d of the %d tensors of an all-reduce are sparse or have no "
                        "static shape, so the call takes MultiWorkerMirroredStrategy's own "
                        "path, unscheduled", count, len(flat))

    def _all_reduce(self, reduce_op: Any, value: Any, replica_id: int, options: Any) -> Any:
        flat = tf.nest.flatten(value)
        if tf.executing_eagerly() or not flat or not all(_schedulable(t) for t in flat):
            self._warn_unscheduled(flat)
            return super()._all_reduce(reduce_op, value, replica_id, options)
        infos = tuple(TensorInfo(name=f"tensor{i}", nbytes=_nbytes(t), itemsize=t.dtype.size,
                                 rank=t.shape.rank if t.shape.rank is not None else 2,
                                 dtype=t.dtype.name)
                      for i, t in enumerate(flat))
        stamps = self._planner.stamps()
        device = self._devices[replica_id]
        mean = reduce_op == reduce_util.ReduceOp.MEAN
        if not self._planner.scheduling:  # MWMS's own pack, with the same statistics
            self._planner.note_call(infos)
            riding = self._riding(infos, flat)
            if riding is None:
                native = tf.nest.flatten(
                    super()._all_reduce(reduce_op, value, replica_id, options))
            else:  # summed, so the rider's sum is exact; MEAN divides as MWMS does
                *native, total = super()._all_reduce(reduce_util.ReduceOp.SUM,
                                                     [*flat, riding[0]], replica_id, options)
                riding[1](total)
                if mean:
                    native = [r / self._group_size for r in native]
            if stamps is None:
                return tf.nest.pack_sequence_as(value, native)
            with tf.device(device), tf.name_scope("autobyte_native"):
                # MWMS's results come after every gradient is ready: one mark joins them all
                marks = _ready_marks(flat, infos, stamps)
                marks.append(self._done_mark(native[-1], stamps, infos,
                                             tuple(range(len(flat))), "autobyte_done"))
                native[-1] = after(tf.add_n(marks), native[-1])
                return tf.nest.pack_sequence_as(value, native)
        plan = self._planner.plan_for(infos)
        riding = self._riding(infos, flat)
        with tf.device(device), tf.name_scope("autobyte_allreduce"):
            done: list[list[Any]] = [[] for _ in flat]  # each tensor's blocks' done marks

            def stamp_done(out: Any, first: tuple[int, ...], carried: tuple[int, ...],
                           name: str) -> None:
                assert stamps is not None
                mark = self._done_mark(out, stamps, infos, first, name)
                for i in carried:
                    done[i].append(mark)

            reduced = self._issue(flat, plan, replica_id, options,
                                  rider=None if riding is None else riding[0],
                                  done=None if stamps is None else stamp_done)
            if riding is not None:
                riding[1](reduced.pop())
            marks = [] if stamps is None else \
                [sum(d, m) for m, d in zip(_ready_marks(flat, infos, stamps), done, strict=True)]
            out = []
            for i, (t, r) in enumerate(zip(flat, reduced, strict=True)):
                if mean:
                    r = r / tf.cast(self._group_size, r.dtype)
                r = tf.reshape(r, t.shape.as_list())
                out.append(after(marks[i], r) if marks else r)
        return tf.nest.pack_sequence_as(value, out)

    def _riding(self, infos: tuple[TensorInfo, ...],
                flat: Sequence[Any]) -> tuple[Any, Callable[[Any], Any]] | None:
        """The step agreement's tensor, if this call is the main one (its gradients share one
        dtype, as every block and MWMS's pack need)."""
        if infos != self._planner.main_call or len({t.dtype for t in flat}) != 1:
            return None
        return self._rider.ride(self._planner.vector_length, flat[0].dtype)

    def _done_mark(self, out: Any, stamps: ReadyStamps, infos: tuple[TensorInfo, ...],
                   tensors: tuple[int, ...], name: str) -> Any:
        """A stamp of when ``out`` (a collective's result) is there: with
        the ready stamps, the time the link was busy, which gives a window its link rate. It
        joins the ready mark of each tensor ``out`` carries (``after`` once per tensor:
        Grappler folds a reshape of a reshape, and a stamp feeding the inner one with it)."""
        return stamp_op(out, _done_stamper(stamps, infos, tensors), name)

    def _issue(self, flat: Sequence[Any], plan: Plan, replica_id: int,
               options: Any, *, rider: Any = None,
               done: Callable[[Any, tuple[int, ...], tuple[int, ...], str], None] | None = None
               ) -> list[Any]:
        """Pack each block, create its collective in plan order, return each tensor whole
        (and, after them, the sum of ``rider``, which goes with the last block issued).
        ``done`` is given the result of the last block of each of at most ``DONE_STAMPS`` runs
        of consecutive blocks in plan order, with the tensors of the run's first block (when
        the run could start) and of its last (what the result carries): a stamp is a branch
        to trace, and a plan of small blocks has hundreds of blocks."""
        launcher = self._launchers[replica_id]
        lanes = self._lanes[replica_id]
        hint = options.implementation.value
        timeout = float(options.timeout_seconds or 0.0)
        layout = plan.layout
        # each tensor's flat view cut at its segments; blocks hold them in element order
        sizes: list[list[int]] = [[] for _ in flat]
        for block in layout.blocks:
            for segment in block.segments:
                sizes[segment.tensor].append(segment.size)
        pieces = [iter(tf.split(tf.reshape(t, [-1]), s) if len(s) > 1 else [tf.reshape(t, [-1])])
                  for t, s in zip(flat, sizes, strict=True)]
        inputs = {block.index: [next(pieces[s.tensor]) for s in block.segments]
                  for block in layout.blocks}
        if rider is not None:
            inputs[plan.order[-1]] = [*inputs[plan.order[-1]], rider]
        reduced: dict[int, Any] = {}
        for j, index in enumerate(plan.order):
            parts = inputs[index]
            reduced[index] = tf.raw_ops.CollectiveReduceV2(
                input=parts[0] if len(parts) == 1 else tf.concat(parts, 0),
                group_size=self._group_size, group_key=launcher._group_key,
                instance_key=launcher._next_instance_key(),
                ordering_token=[lanes[j % plan.lanes].handle], merge_op="Add", final_op="Id",
                communication_hint=hint, timeout_seconds=timeout)
        if done is not None:
            tensors = {b.index: tuple(sorted({s.tensor for s in b.segments}))
                       for b in layout.blocks}
            size = -(-len(plan.order) // DONE_STAMPS)
            for start in range(0, len(plan.order), size):
                run = plan.order[start:start + size]
                done(reduced[run[-1]], tensors[run[0]], tensors[run[-1]],
                     f"autobyte_done{run[-1]}")
        results: list[list[Any]] = [[] for _ in flat]
        carried = []
        for block in layout.blocks:
            out = reduced[block.index]
            cut = [s.size for s in block.segments]
            if rider is not None and block.index == plan.order[-1]:
                out, total = tf.split(out, [sum(cut), int(rider.shape[0])])
                carried.append(total)
            parts = [out] if len(cut) == 1 else tf.split(out, cut)
            for segment, part in zip(block.segments, parts, strict=True):
                results[segment.tensor].append(part)
        self.blocks_traced += len(plan.order)
        return [r[0] if len(r) == 1 else tf.concat(r, 0) for r in results] + carried


def _unshaped(t: Any) -> bool:
    """A gradient the plan cannot lay out: sparse, or a float tensor without a static shape."""
    return isinstance(t, tf.IndexedSlices) or (
        isinstance(t, tf.Tensor) and t.dtype.is_floating and not t.shape.is_fully_defined())


def _schedulable(t: Any) -> bool:
    return isinstance(t, tf.Tensor) and t.shape.is_fully_defined() and \
        t.shape.num_elements() > 0 and t.dtype.is_floating


def _nbytes(t: Any) -> int:
    return int(t.shape.num_elements()) * int(t.dtype.size)


def after(mark: Any, t: Any) -> Any:
    """``t``, made to depend on ``mark`` (a 0-valued int8) through data, not control.

    Grappler turns stateless ops whose outputs only feed control edges into no-ops (and
    drops an EnsureShape together with what feeds it), so the stamp's output goes into ``t``'s
    shape (0 added) and the static shape is set as metadata: free, and the stamp stays.
    """
    out = tf.reshape(t, tf.shape(t) + tf.cast(mark, tf.int32))
    out.set_shape(t.shape)
    return out


def _ready_marks(flat: Sequence[Any], infos: tuple[TensorInfo, ...],
                 stamps: ReadyStamps) -> list[Any]:
    """One stateless Python op per gradient, run as soon as that gradient exists.

    stateful=False matters: stateful Python ops are chained in program order by automatic
    control dependencies, which would stamp every gradient at the time of the last one.
    """
    return [stamp_op(t, _stamper(stamps, infos, i), f"autobyte_ready{i}")
            for i, t in enumerate(flat)]


def stamp_op(tensor: Any, fn: Callable[[NDArray[Any]], np.int8], name: str) -> Any:
    """``fn`` of ``tensor``'s first element as a Python op, run once ``tensor`` exists: a
    0-valued int8 to join to a result with ``after``. It reads one element, so the stamp
    costs no copy of the tensor. The op's output is left as it comes (no reshape or shape
    check: Grappler drops such an op together with what feeds it, and the stamp with it)."""
    return tf.numpy_function(fn, [tf.reshape(tensor, [-1])[:1]], tf.int8, stateful=False,
                             name=name)


def _done_stamper(stamps: ReadyStamps, infos: tuple[TensorInfo, ...],
                  tensors: tuple[int, ...]) -> Callable[[NDArray[Any]], np.int8]:
    def stamp(_: NDArray[Any]) -> np.int8:
        stamps.done(infos, tensors, time.perf_counter())
        return np.int8(0)
    return stamp


def _stamper(stamps: ReadyStamps, infos: tuple[TensorInfo, ...],
             index: int) -> Callable[[NDArray[Any]], np.int8]:
    def stamp(_: NDArray[Any]) -> np.int8:
        stamps.stamp(infos, index, time.perf_counter())
        return np.int8(0)
    return stamp

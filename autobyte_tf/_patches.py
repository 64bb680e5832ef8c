"""Keras 3 under MultiWorkerMirroredStrategy: the #20585 fixes and AutoByte's step hooks.

keras-team/keras#20585: Keras 3's TensorFlow trainer calls ``strategy.reduce("MEAN", batch)``
on a whole data batch while building the model (all-reducing integer labels across workers),
and ``strategy.reduce("MEAN", scalar, axis=0)`` on every metric, which MWMS rejects. The fixes
apply to MWMS (plain or AutoByte); every other strategy keeps Keras's code unchanged.

A Dense layer over a sequence (the kernel's gradient is a tensordot over an unknown batch)
yields a gradient without a static shape; the optimizer's all-reduce then could not be laid
out in blocks, and took MWMS's own path unscheduled. Under an AutoByteStrategy each gradient
gets its variable's shape before the all-reduce.

For an AutoByteStrategy, ``make_train_function`` also wraps the train function so each call
keeps the step protocol (``control.SteppedFunction``), ``fit`` tells the strategy how many steps
it will run (``expect_steps``), and ``jit_compile=True`` is refused with a clear error, because
AutoByte's per-chunk collectives and Python stamps cannot be compiled.

``install()`` is idempotent; AutoByteStrategy calls it. Call it yourself to run plain MWMS
with Keras 3 (the benchmark's baseline does).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf
from keras.src import tree
from keras.src.backend.tensorflow import optimizer as tf_optimizer
from keras.src.backend.tensorflow import trainer as tf_trainer

from common.errors import ConfigError

__all__ = ["install", "installed"]

_ORIGINALS: dict[str, Any] = {}


def installed() -> bool:
    return bool(_ORIGINALS)


def install() -> None:
    """Patch Keras's TensorFlow trainer once (no-op when already done)."""
    if _ORIGINALS:
        return
    cls = tf_trainer.TensorFlowTrainer
    _ORIGINALS.update(
        reduce_per_replica=tf_trainer.reduce_per_replica,
        maybe_symbolic_build=cls._maybe_symbolic_build,
        make_train_function=cls.make_train_function,
        fit=cls.fit,
        make_test_function=cls.make_test_function,
        make_predict_function=cls.make_predict_function,
        all_reduce_sum_gradients=tf_optimizer.TFOptimizer._all_reduce_sum_gradients,
    )
    tf_trainer.reduce_per_replica = _reduce_per_replica
    cls._maybe_symbolic_build = _maybe_symbolic_build
    cls.make_train_function = _make_train_function
    cls.fit = functools.wraps(cls.fit)(_fit)
    cls.make_test_function = _refusing_jit("make_test_function")
    cls.make_predict_function = _refusing_jit("make_predict_function")
    tf_optimizer.TFOptimizer._all_reduce_sum_gradients = _all_reduce_sum_gradients


def _multi_worker(strategy: Any) -> bool:
    return bool(tf_trainer._collective_all_reduce_multi_worker(strategy))


def _autobyte(strategy: Any) -> Any | None:
    """The strategy's AutoByte controller hooks, or None for any other strategy."""
    return getattr(strategy, "_autobyte_hooks", None)


def _reduce_per_replica(values: Any, strategy: Any, reduction: str) -> Any:
    if reduction not in ("auto", "mean") or not _multi_worker(strategy):
        return _ORIGINALS["reduce_per_replica"](values, strategy, reduction)

    def mean(v: Any) -> Any:  # MWMS rejects axis=0 on scalars; average scalars as they are
        local = strategy.experimental_local_results(v)[0] \
            if isinstance(v, tf.distribute.DistributedValues) else v
        axis = 0 if (getattr(local, "shape", None) is not None and local.shape.rank) else None
        return strategy.reduce("MEAN", v, axis=axis)

    return tree.map_structure(mean, values)


def _all_reduce_sum_gradients(self: Any, grads_and_vars: Any) -> Any:
    pairs = list(grads_and_vars)
    if _autobyte(tf.distribute.get_strategy()) is not None:
        pairs = [(_shaped(g, v), v) for g, v in pairs]
    return _ORIGINALS["all_reduce_sum_gradients"](self, pairs)


def _shaped(grad: Any, var: Any) -> Any:
    """``grad`` with ``var``'s static shape where it lacks one (dense gradients only)."""
    if not isinstance(grad, tf.Tensor) or grad.shape.is_fully_defined():
        return grad
    shape = tf.TensorShape(var.shape)
    if not shape.is_fully_defined() or not grad.shape.is_compatible_with(shape):
        return grad
    return tf.ensure_shape(grad, shape)


def _maybe_symbolic_build(self: Any, iterator: Any = None, data_batch: Any = None) -> Any:
    strategy = self._distribute_strategy
    if _autobyte(strategy) is not None:
        _check_jit(self)  # before Keras builds anything: the clearest place to say it
    if strategy is None or iterator is None or not _multi_worker(strategy):
        return _ORIGINALS["maybe_symbolic_build"](self, iterator=iterator,
                                                  data_batch=data_batch)
    for _, _, it in iterator:  # build from this worker's own batch: no collective needed
        batch = next(it)
        data_batch = tree.map_structure(
            lambda v: strategy.experimental_local_results(v)[0]
            if isinstance(v, tf.distribute.DistributedValues) else v, batch)
        break
    with strategy.scope():
        self._symbolic_build(data_batch=data_batch)


def _check_jit(model: Any) -> None:
    if model.jit_compile is True and not model.run_eagerly:
        raise ConfigError(
            "AutoByteStrategy cannot run under jit_compile=True: XLA cannot compile its "
            "per-chunk collectives and gradient-ready stamps (Python ops); compile the model "
            "with jit_compile=False or 'auto' (which Keras turns off under tf.distribute)")


def _make_train_function(self: Any, force: bool = False) -> Any:
    hooks = _autobyte(self.distribute_strategy)
    if hooks is None:
        return _ORIGINALS["make_train_function"](self, force)
    if self.train_function is not None and not force:
        return self.train_function
    _check_jit(self)

    def build() -> Callable[..., Any]:
        _ORIGINALS["make_train_function"](self, True)
        fn: Callable[..., Any] = self.train_function
        self.train_function = stepped
        return fn

    stepped = hooks.stepped(build, can_sample=lambda: self.steps_per_execution == 1)
    self.train_function = stepped
    return stepped


def _fit(self: Any, *args: Any, **kwargs: Any) -> Any:
    hooks = _autobyte(self.distribute_strategy)
    callbacks = kwargs.get("callbacks")
    # callbacks is fit's sixth parameter: given by position, it is left as it is
    if hooks is not None and len(args) < 6 and isinstance(callbacks, list | tuple | None):
        kwargs["callbacks"] = [*(callbacks or ()),
                               _JobLength(hooks, kwargs.get("initial_epoch", 0))]
    return _ORIGINALS["fit"](self, *args, **kwargs)


class _JobLength(keras.callbacks.Callback):  # type: ignore[misc]
    """Tells the strategy the steps ``fit`` will run (its train-function calls), when known."""

    def __init__(self, strategy: Any, initial_epoch: int) -> None:
        super().__init__()
        self._strategy, self._initial_epoch = strategy, initial_epoch

    def on_train_begin(self, logs: Any = None) -> None:
        epochs, batches = self.params.get("epochs"), self.params.get("steps")
        if epochs and batches:
            per_call = max(1, int(getattr(self.model, "steps_per_execution", 1) or 1))
            self._strategy.expect_steps(
                max(0, epochs - self._initial_epoch) * math.ceil(batches / per_call))

    def on_train_end(self, logs: Any = None) -> None:
        self._strategy.expect_steps(0)  # what runs after fit is unknown


def _refusing_jit(name: str) -> Callable[..., Any]:
    original = _ORIGINALS[name]

    @functools.wraps(original)
    def make(self: Any, force: bool = False) -> Any:
        if _autobyte(self.distribute_strategy) is not None:
            _check_jit(self)
        return original(self, force)
    return make


"""One worker of the multi-process TF tests (run by common.launch with TF_CONFIG set).

Trains the same tiny model with plain MultiWorkerMirroredStrategy and with AutoByteStrategy
under several configurations (one changed mid-run), through Keras fit and a custom loop, and
prints one ``RESULT {json}`` line: the largest weight difference to plain MWMS per scenario,
evaluate/predict results, statistics and plan facts. The test decides what passes.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from numpy.typing import NDArray

import autobyte_tf
from autobyte_tf._checks import file_barrier

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)

STEPS = 12
BATCH = 8
WINDOW = 3  # agreement every 3 steps: sampled at 1 and 2; measured plan from step 6 on


def build(strategy: Any) -> Any:
    keras.utils.set_random_seed(7)
    with strategy.scope():
        # a Dense over a sequence first: its kernel's gradient has no static shape of its own
        model = keras.Sequential([keras.Input((16,)), keras.layers.Reshape((4, 4)),
                                  keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Flatten(),
                                  keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(4)])
        model.compile(optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"])
    return model


def dataset(rank: int) -> Any:
    rng = np.random.default_rng(100 + rank)
    x = rng.normal(size=(STEPS * BATCH, 16)).astype("float32")
    y = rng.integers(0, 4, STEPS * BATCH)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).with_options(options)


def weights(model: Any) -> list[NDArray[Any]]:
    return [v.numpy() for v in model.trainable_variables]


def max_diff(a: list[NDArray[Any]], b: list[NDArray[Any]]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def custom_loop(strategy: Any, wrap: Callable[[Any], Any], data: Any) -> list[NDArray[Any]]:
    model = build(strategy)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)

    def replica(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(loss_fn(y, model(x, training=True))) / (
                BATCH * strategy.num_replicas_in_sync)
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply(grads, model.trainable_variables)
        return loss

    step = wrap(lambda x, y: strategy.run(replica, args=(x, y)))
    for x, y in data:
        step(x, y)
    return weights(model)


def main() -> None:
    # Every strategy first, then a barrier outside TensorFlow, then any collective: making a
    # MultiWorkerMirroredStrategy re-initialises TF's collective runtime in this process, and a
    # collective another worker starts meanwhile is lost (the job hangs in it).
    plain = tf.distribute.MultiWorkerMirroredStrategy()
    first = autobyte_tf.AutoByteStrategy(partition_bytes="4KiB", credit_bytes="4KiB",
                                         window_steps=WINDOW)  # installs the Keras fixes
    scenarios: list[tuple[str, Any, dict[int, dict[str, Any]] | None]] = [
        ("4KiB x1", first, None),
        ("8KiB x8", autobyte_tf.AutoByteStrategy(partition_bytes="8KiB", credit_bytes="64KiB",
                                                 window_steps=WINDOW), None),
        ("change 4KiBx4 -> 16KiBx1", autobyte_tf.AutoByteStrategy(
            partition_bytes="4KiB", credit_bytes="16KiB", window_steps=WINDOW),
         {2: {"partition_bytes": "16KiB", "credit_bytes": "16KiB"}}),
        ("fused 16KiBx2 -> native -> back", autobyte_tf.AutoByteStrategy(
            partition_bytes="16KiB", credit_bytes="32KiB", window_steps=WINDOW),
         {2: {"scheduling": False}, 5: {"scheduling": True}}),
    ]
    rank = first.rank
    file_barrier(os.environ["TF_TEST_BARRIER"], rank, first.num_workers)
    data = dataset(rank)
    ref = build(plain)
    ref.fit(data, epochs=1, verbose=0)
    ref_w = weights(ref)
    ref_eval = ref.evaluate(data, verbose=0, return_dict=True)
    out: dict[str, Any] = {"rank": rank, "workers": first.num_workers, "diff": {}}

    for name, strategy, change in scenarios:
        model = build(strategy)
        callbacks = [Reconfigure(strategy, change)] if change else []
        model.fit(data, epochs=1, verbose=0, callbacks=callbacks)
        out["diff"][name] = max_diff(weights(model), ref_w)
        stats = strategy.statistics()
        out.setdefault("stats", {})[name] = {
            "config": strategy.config.describe(), "measured_plan": strategy.measured_plan,
            "steps": stats.steps, "warmup_steps": stats.warmup_steps,
            "samples_per_s": stats.samples_per_s, "bytes_per_s": stats.bytes_per_s,
            "step_time_s": stats.step_time_s, "layer_bytes": list(stats.layer_bytes),
            "layer_backward_s": list(stats.layer_backward_s or []),
            "sampled": stats.sampled_steps, "chunks": strategy._cross_ops.blocks_traced,
            "agreements": [strategy._agreement.rode, strategy._agreement.went_alone]}
        if name.startswith("change"):
            evaluated = model.evaluate(data, verbose=0, return_dict=True)
            out["eval"] = {k: [v, ref_eval[k]] for k, v in evaluated.items()}
            out["predict"] = list(model.predict(data.take(2), verbose=0).shape)
    custom = scenarios[1][1]
    out["diff"]["custom loop"] = max_diff(custom_loop(custom, custom.function, data),
                                          custom_loop(plain, tf.function, data))
    out["jit_error"] = jit_error(custom, data)
    print("RESULT " + json.dumps(out), flush=True)


def jit_error(strategy: Any, data: Any) -> str:
    model = build(strategy)
    model.compile(optimizer="sgd", jit_compile=True,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    try:
        model.fit(data, epochs=1, verbose=0)
    except Exception as exc:  # the test checks the type and message
        return f"{type(exc).__name__}: {exc}"
    return "no error"


class Reconfigure(keras.callbacks.Callback):  # type: ignore[misc]
    """Asks for new configurations after given steps (each takes effect at the next
    agreement)."""

    def __init__(self, strategy: Any, changes: dict[int, dict[str, Any]]) -> None:
        super().__init__()
        self._strategy, self._changes = strategy, changes

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if batch in self._changes:
            self._strategy.reconfigure(**self._changes[batch])


if __name__ == "__main__":
    main()
    sys.exit(0)

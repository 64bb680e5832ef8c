"""One worker of ``autobyte demo``: a small CNN trained with Keras ``fit`` on AutoByteStrategy.

Run by ``autobyte launch`` (TF_CONFIG and the control plane's variables set), the knobs from
AUTOBYTE_* variables. Rank 0 prints a progress record per window (``common.progress``); every
worker prints a ``done`` record with a checksum of its weights, which must agree.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from autobyte_tf import AutoByteStrategy
from common.progress import emit, worker_args

INPUT = (28, 28, 1)
CLASSES = 10


def build_model() -> Any:
    """About 0.33 M parameters (1.3 MB of gradients): communication-bound below ~1 Gbit/s."""
    return keras.Sequential([
        keras.Input(INPUT),
        keras.layers.Conv2D(16, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(CLASSES),
    ], name="demo_cnn")


def main(argv: list[str] | None = None) -> None:
    args = worker_args(argv, __doc__)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    strategy = AutoByteStrategy(model_name="demo_cnn")
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(strategy.rank)
    x = rng.normal(size=(8 * args.batch, *INPUT)).astype("float32")
    y = rng.integers(0, CLASSES, len(x))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    global_batch = args.batch * strategy.num_workers  # Keras splits it across the workers
    data = (tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch)
            .with_options(options))
    emit("start", framework="tensorflow", rank=strategy.rank, workers=strategy.num_workers,
         steps=args.steps, config=strategy.config.describe(),
         tuning=strategy.tuning.enabled or strategy.tuning.why_disabled)
    model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0,
              callbacks=[_Progress(strategy, global_batch)])
    checksum = float(sum(np.sum(v.numpy(), dtype=np.float64) for v in model.trainable_variables))
    emit("done", rank=strategy.rank, steps=strategy.step, config=strategy.config.describe(),
         checksum=checksum)
    strategy.close()


class _Progress(keras.callbacks.Callback):  # type: ignore[misc]
    """Rank 0: the median step of each window (a retrace does not count) and the configuration
    in force."""

    def __init__(self, strategy: Any, global_batch: int) -> None:
        super().__init__()
        self._strategy, self._batch = strategy, global_batch
        self._times: list[float] = []
        self._began = 0.0

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self._began = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        strategy, step = self._strategy, batch + 1
        if strategy.rank != 0:
            return
        self._times.append(time.perf_counter() - self._began)
        if step % strategy.config.window_steps == 0:
            emit("progress", step=step, samples_per_s=self._batch / statistics.median(self._times),
                 config=strategy.config.describe())
            self._times.clear()


if __name__ == "__main__":
    main()

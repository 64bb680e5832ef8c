"""A TF worker whose rank 1 stops itself (SIGSTOP) at a given step: rank 0 must fail with
TensorFlow's own error after about the grace period, not hang (tests/tf/test_tf_liveness.py)."""

from __future__ import annotations

import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

import autobyte_tf


class Freeze(keras.callbacks.Callback):
    def __init__(self, rank: int, at: int) -> None:
        super().__init__()
        self.rank, self.at = rank, at

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        if batch == self.at and self.rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        if batch == self.at and self.rank == 0:
            print(f"FROZEN_AT {batch}", flush=True)


def main() -> None:
    strategy = autobyte_tf.AutoByteStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                                  keras.layers.Dense(4)])
        model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True))
    rng = np.random.default_rng(strategy.rank)
    x = rng.normal(size=(64, 16)).astype("float32")
    y = rng.integers(0, 4, 64)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    model.fit(data.with_options(options), steps_per_epoch=100_000, epochs=1, verbose=0,
              callbacks=[Freeze(strategy.rank, int(sys.argv[1]))])


if __name__ == "__main__":
    main()

"""A TF worker for fault tests: ``AT`` [``STEPS`` | ``kill``]. Rank 0 prints ``AT_STEP`` after
step AT; with no STEPS, rank 1 stops itself (SIGSTOP) after step AT + 1 and rank 0 must fail
with TensorFlow's own error after about the grace period (tests/tf/test_tf_liveness.py); with
``kill``, rank 1 SIGKILLs itself then; with STEPS, both train STEPS steps and print a checksum
of their weights (the outage tests on the testbed).

Rank 1 stops a step later than rank 0 prints because a ring all-reduce that rank 1 has finished
may still be unfinished on rank 0, which fetches its last pieces from rank 1's server; rank 1
ends step AT + 1 only after rank 0 has sent its part of that step, so after rank 0 printed."""

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
    def __init__(self, rank: int, at: int, stop: signal.Signals | None) -> None:
        super().__init__()
        self.rank, self.at, self.stop = rank, at, stop

    def on_train_batch_end(self, batch: int, logs: object = None) -> None:
        if batch == self.at + 1 and self.rank == 1 and self.stop is not None:
            os.kill(os.getpid(), self.stop)
        if batch == self.at and self.rank == 0:
            print(f"AT_STEP {batch}", flush=True)


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
    mode = sys.argv[2] if len(sys.argv) > 2 else "freeze"
    steps = int(mode) if mode.isdigit() else None
    stop = None if steps else signal.SIGKILL if mode == "kill" else signal.SIGSTOP
    model.fit(data.with_options(options), steps_per_epoch=steps or 100_000, epochs=1,
              verbose=0, callbacks=[Freeze(strategy.rank, int(sys.argv[1]), stop)])
    checksum = sum(float(np.sum(v.numpy(), dtype=np.float64)) for v in model.trainable_variables)
    print(f"CHECKSUM {strategy.rank} {checksum!r}", flush=True)


if __name__ == "__main__":
    main()

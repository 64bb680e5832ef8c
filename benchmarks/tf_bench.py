"""Plain MultiWorkerMirroredStrategy vs AutoByteStrategy, in the same worker processes.

    sudo .venv/bin/python benchmarks/tf_bench.py                 # 2 workers, 100mbit and 1gbit
    .venv/bin/python benchmarks/tf_bench.py --rates 1gbit --models alexnet --steps 3
    sudo .venv/bin/python benchmarks/tf_bench.py --rates 3gbit --models cnn --variants \
        mwms,native --batch 64 --steps 100 --rounds 30     # what AutoByte's native path costs

For each link rate, one job of 2 workers on the testbed (shaped namespaces as root, loopback
otherwise) trains every model with every variant side by side in the same processes,
interleaved in rounds (in reverse order every other round) so machine noise hits all alike, and
prints mean step times (medians in its BENCH rows) and each variant's ratio to MWMS. Variants:
``mwms``, ``native`` (AutoByte's native path, its defaults: windows of 10 steps, a sampled
step at most once a second) and ``partition:credit`` (fixed, scheduled). Models:
keras.applications ResNet50 and VGG16 (32x32 input, weights=None), an AlexNet-like convnet,
and the demo's models (``cnn``, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

MODELS = ("resnet50", "vgg16", "alexnet")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="100mbit,1gbit", help="comma-separated link rates")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--batch", type=int, default=8,
                   help="samples a step over both workers (Keras splits each batch)")
    p.add_argument("--steps", type=int, default=1, help="timed steps per variant per round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup", type=int, default=5, help="untimed steps (traces, first plan)")
    p.add_argument("--variants", default="mwms,4MiB:16MiB,64KiB:64KiB",
                   help="comma-separated: mwms, native or partition:credit")
    p.add_argument("--timeout", type=float, default=2400.0, help="seconds per job")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rate", default="1gbit", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# -- worker side ------------------------------------------------------------------------------
def build(name: str, strategy: Any) -> Any:
    import keras

    from autobyte_tf.demo import build_model

    keras.utils.set_random_seed(3)
    with strategy.scope():
        if name == "resnet50":
            model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
        elif name == "vgg16":
            base = keras.applications.VGG16(weights=None, include_top=False,
                                            input_shape=(32, 32, 3), pooling="avg")
            model = keras.Sequential([base, keras.layers.Dense(10)])
        elif name == "alexnet":
            layers = keras.layers
            model = keras.Sequential([
                keras.Input((32, 32, 3)),
                layers.Conv2D(64, 5, activation="relu", padding="same"), layers.MaxPool2D(),
                layers.Conv2D(192, 5, activation="relu", padding="same"), layers.MaxPool2D(),
                layers.Conv2D(384, 3, activation="relu", padding="same"),
                layers.Conv2D(256, 3, activation="relu", padding="same"),
                layers.Conv2D(256, 3, activation="relu", padding="same"), layers.MaxPool2D(),
                layers.Flatten(), layers.Dense(2048, activation="relu"),
                layers.Dense(2048, activation="relu"), layers.Dense(10)])
        else:  # the demo's models
            model = build_model(name)
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _strategy(variant: str, rate: str) -> Any:
    import tensorflow as tf

    import autobyte_tf

    if variant == "mwms":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if variant == "native":  # as shipped, tuning off (the orchestrator's AUTOBYTE_TUNER)
        return autobyte_tf.AutoByteStrategy(scheduling=False, bandwidth=rate)
    partition, credit = variant.split(":")
    return autobyte_tf.AutoByteStrategy(partition_bytes=partition, credit_bytes=credit,
                                        window_steps=2, sample_every=50, bandwidth=rate)


def worker(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    from autobyte_tf import _patches
    from autobyte_tf._checks import file_barrier
    from autobyte_tf.demo import input_shape

    variants = args.variants.split(",")
    strategies = {v: _strategy(v, args.rate) for v in variants}
    _patches.install()  # Keras 3 fit under plain MWMS needs the #20585 fixes too
    # every worker makes all its strategies before any collective runs (each one
    # re-initialises TF's collective runtime)
    tf_config = json.loads(os.environ["TF_CONFIG"])
    file_barrier(os.environ["TF_BENCH_BARRIER"], int(tf_config["task"]["index"]),
                 len(tf_config["cluster"]["worker"]))
    ours = {v: s for v, s in strategies.items() if v != "mwms"}
    rng = np.random.default_rng(0)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF

    class Timer(keras.callbacks.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []
            self._t = 0.0

        def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
            self._t = time.perf_counter()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self.times.append(time.perf_counter() - self._t)

    for name in args.models.split(","):
        shape = (32, 32, 3) if name in MODELS else input_shape(name)
        x = rng.normal(size=(args.batch * 4, *shape)).astype("float32")
        y = rng.integers(0, 10, args.batch * 4)
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch).repeat() \
            .with_options(options)
        models = {v: build(name, s) for v, s in strategies.items()}
        for v, model in models.items():
            model.fit(data, steps_per_epoch=args.warmup if v != "mwms" else 2, verbose=0)
        times: dict[str, list[float]] = {v: [] for v in variants}
        warm = {v: s.statistics().warmup_steps for v, s in ours.items()}
        for r in range(args.rounds):
            for v in variants if r % 2 == 0 else variants[::-1]:
                timer = Timer()
                models[v].fit(data, steps_per_epoch=args.steps, verbose=0, callbacks=[timer])
                times[v].extend(timer.times)
        nbytes = sum(int(np.prod(w.shape)) * 4 for w in models[variants[0]].trainable_weights)
        row = {"model": name, "rate": args.rate, "bytes": nbytes,
               "mean_s": {v: statistics.fmean(t) for v, t in times.items()},
               "median_s": {v: statistics.median(t) for v, t in times.items()},
               "warmup_steps_while_timed": {v: s.statistics().warmup_steps - warm[v]
                                            for v, s in ours.items()},
               "trace_s": {v: (st := s.statistics()).warmup_s / max(1, st.warmup_steps)
                           for v, s in ours.items()}}
        print("BENCH " + json.dumps(row), flush=True)
        del models


# -- orchestrator -----------------------------------------------------------------------------
def orchestrate(args: argparse.Namespace) -> int:
    from common.launch import launch
    from common.testbed import Testbed

    rows = []
    for rate in args.rates.split(","):
        argv = [sys.executable, os.path.abspath(__file__), "--worker", "--rate", rate,
                "--models", args.models, "--batch", str(args.batch), "--steps", str(args.steps),
                "--rounds", str(args.rounds), "--warmup", str(args.warmup),
                "--variants", args.variants]
        started = time.perf_counter()
        with Testbed(hosts=2, rate=rate) as tb, tempfile.TemporaryDirectory() as barrier:
            result = launch(framework="tensorflow", command=argv, workers=2, testbed=tb,
                            timeout=args.timeout, stream=None,
                            env={"OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                                 "AUTOBYTE_TUNER": "none",  # fixed configurations
                                 "TF_BENCH_BARRIER": barrier})
            shaped = tb.shaped
        if result.returncode != 0:
            for name, proc in result.processes.items():
                print(f"--- {name} (exit {proc.returncode})\n{proc.output[-3000:]}")
            return result.returncode or 1
        for line in result.processes["worker0"].output.splitlines():
            if line.startswith("BENCH "):
                row = json.loads(line[6:])
                row["shaped"] = shaped
                rows.append(row)
        print(f"# {rate}: job took {time.perf_counter() - started:.0f} s", flush=True)
    print_table(rows, args)
    return 0


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    variants = args.variants.split(",")
    print(f"\n2 workers, batch {args.batch} over both, {args.rounds} rounds of {args.steps} steps; "
          "mean step time (ms: the throughput, sampled steps included), and each variant's "
          "speed over MWMS's")
    head = f"{'model':11} {'rate':8} {'MB':>5} " + " ".join(f"{v:>14}" for v in variants) + \
        " shaped"
    print(head)
    print("-" * len(head))
    for r in rows:
        m = r["mean_s"]
        cells = [f"{m[v] * 1e3:7.2f}" + (f" {m['mwms'] / m[v]:5.3f}x" if "mwms" in m else "")
                 for v in variants]
        print(f"{r['model']:11} {r['rate']:8} {r['bytes'] / 1e6:5.1f} " +
              " ".join(f"{c:>14}" for c in cells) + f" {r['shaped']}")
    print("(x > 1: faster than plain MWMS; a fixed configuration's first trace, and a sampled "
          "one's: 'trace_s' in each BENCH row)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())

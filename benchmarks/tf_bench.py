"""Plain MultiWorkerMirroredStrategy vs AutoByteStrategy (good and poor fixed configs).

    sudo .venv/bin/python benchmarks/tf_bench.py                 # 2 workers, 100mbit and 1gbit
    .venv/bin/python benchmarks/tf_bench.py --rates 1gbit --models alexnet --steps 3

For each link rate, one job of 2 workers on the testbed (shaped namespaces as root, loopback
otherwise) trains every model with the three variants side by side in the same processes,
interleaved in rounds so machine noise hits all three alike, and prints median step times and
ratios. Models: keras.applications ResNet50 and VGG16 (32x32 input, weights=None) and an
AlexNet-like convnet.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from typing import Any

VARIANTS = ("mwms", "good", "poor")
MODELS = ("resnet50", "vgg16", "alexnet")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rates", default="100mbit,1gbit", help="comma-separated link rates")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--batch", type=int, default=8, help="per-worker batch size")
    p.add_argument("--steps", type=int, default=1, help="timed steps per variant per round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--warmup", type=int, default=5, help="untimed steps (traces, first plan)")
    p.add_argument("--good", default="4MiB:16MiB", help="partition:credit of the good config")
    p.add_argument("--poor", default="64KiB:64KiB", help="partition:credit of the poor config")
    p.add_argument("--timeout", type=float, default=2400.0, help="seconds per job")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--rate", default="1gbit", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# -- worker side ------------------------------------------------------------------------------
def build(name: str, strategy: Any) -> Any:
    import keras

    keras.utils.set_random_seed(3)
    with strategy.scope():
        if name == "resnet50":
            model = keras.applications.ResNet50(weights=None, input_shape=(32, 32, 3), classes=10)
        elif name == "vgg16":
            base = keras.applications.VGG16(weights=None, include_top=False,
                                            input_shape=(32, 32, 3), pooling="avg")
            model = keras.Sequential([base, keras.layers.Dense(10)])
        else:
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
        model.compile(optimizer=keras.optimizers.SGD(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def worker(args: argparse.Namespace) -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    import autobyte_tf
    from autobyte_tf import _patches
    from autobyte_tf._checks import file_barrier

    plain = tf.distribute.MultiWorkerMirroredStrategy()
    _patches.install()  # Keras 3 fit under plain MWMS needs the #20585 fixes too
    strategies: dict[str, Any] = {"mwms": plain}
    for variant in ("good", "poor"):
        partition, credit = getattr(args, variant).split(":")
        strategies[variant] = autobyte_tf.AutoByteStrategy(
            partition_bytes=partition, credit_bytes=credit, window_steps=2, sample_every=50,
            bandwidth=args.rate)
    # every worker makes all its strategies before any collective runs (each one
    # re-initialises TF's collective runtime)
    file_barrier(os.environ["TF_BENCH_BARRIER"], strategies["good"].rank,
                 strategies["good"].num_workers)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.batch * 4, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 10, args.batch * 4)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch).repeat() \
        .with_options(options)

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
        models = {v: build(name, s) for v, s in strategies.items()}
        for v, model in models.items():
            model.fit(data, steps_per_epoch=args.warmup if v != "mwms" else 2, verbose=0)
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        warm = {v: s.statistics().warmup_steps for v, s in strategies.items() if v != "mwms"}
        for _ in range(args.rounds):
            for v, model in models.items():
                timer = Timer()
                model.fit(data, steps_per_epoch=args.steps, verbose=0, callbacks=[timer])
                times[v].extend(timer.times)
        extra = {v: strategies[v].statistics().warmup_steps - r for v, r in warm.items()}
        good = strategies["good"].statistics()
        nbytes = sum(int(np.prod(w.shape)) * 4 for w in models["mwms"].trainable_weights)
        row = {"model": name, "rate": args.rate, "bytes": nbytes,
               "median_s": {v: statistics.median(t) for v, t in times.items()},
               "warmup_steps_while_timed": extra,
               "measured_plan": {v: strategies[v].measured_plan for v in ("good", "poor")},
               "good_warmup_s": good.warmup_s / max(1, good.warmup_steps)}
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
                "--rounds", str(args.rounds), "--warmup", str(args.warmup), "--good", args.good,
                "--poor", args.poor]
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
    print(f"\n2 workers, batch {args.batch}/worker; good={args.good} poor={args.poor} "
          "(partition:credit); median step time")
    head = (f"{'model':9} {'rate':8} {'MB':>5} {'MWMS ms':>8} {'good ms':>8} {'poor ms':>8} "
            f"{'MWMS/good':>9} {'MWMS/poor':>9} {'trace s':>7} shaped")
    print(head)
    print("-" * len(head))
    for r in rows:
        m = r["median_s"]
        print(f"{r['model']:9} {r['rate']:8} {r['bytes'] / 1e6:5.0f} {m['mwms'] * 1e3:8.1f} "
              f"{m['good'] * 1e3:8.1f} {m['poor'] * 1e3:8.1f} {m['mwms'] / m['good']:9.2f} "
              f"{m['mwms'] / m['poor']:9.2f} {r.get('good_trace_s', math.nan):7.1f} "
              f"{r['shaped']}")
    print("(ratio > 1: AutoByte faster than plain MWMS; 'trace s': mean duration of an AutoByte "
          "step that (re)traced, i.e. the cost of a reconfiguration)")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())

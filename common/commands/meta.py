"""``autobyte meta generate|train|eval``: the meta-network's dataset, training and evaluation.

    autobyte meta generate --samples 4800 --seed 0 --out datasets/sim_train_v1.npz
    autobyte meta generate --holdout --grid --jobs 24 --seed 0 --out datasets/sim_holdout_v1.npz
    autobyte meta train --data datasets/sim_train_v1.npz --out common/meta/pretrained.keras
    autobyte meta eval --data datasets/sim_holdout_v1.npz

``--holdout`` draws only what training never sees (DenseNet-121, random layer profiles from
another stream, 2-5 Gbit/s links); ``--grid`` runs every candidate of the tuner's search space
per job, so eval can compare the configuration the model picks with the best one.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from typing import Any

from common.errors import ConfigError

__all__ = ["register"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "meta", help="generate data for, train and evaluate the meta-network",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="meta_command", metavar="ACTION", required=True)

    gen = sub.add_parser("generate", help="simulate a dataset (reproducible from --seed)")
    size = gen.add_mutually_exclusive_group(required=True)
    size.add_argument("--samples", type=int, help="rows (jobs = samples / --configs-per-job)")
    size.add_argument("--jobs", type=int, help="jobs (each with its configurations)")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--configs-per-job", type=int, default=8)
    gen.add_argument("--holdout", action="store_true",
                     help="only held-out models and bandwidths (for evaluation)")
    gen.add_argument("--grid", action="store_true",
                     help="every candidate of the tuner's search space per job")
    gen.add_argument("--out", required=True, help="output .npz")
    gen.set_defaults(func=_generate)

    tr = sub.add_parser("train", help="train a network on one or more datasets")
    tr.add_argument("--data", action="append", help="dataset .npz (repeatable; default "
                    "datasets/sim_train_v1.npz)")
    tr.add_argument("--out", default="meta.keras", help="model file to write (.keras)")
    tr.add_argument("--epochs", type=int, default=60)
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--eval", dest="eval_data", help="held-out dataset to evaluate on after")
    tr.set_defaults(func=_train)

    ev = sub.add_parser("eval", help="held-out quality and inference time of a model")
    ev.add_argument("--model", help="model file (default: the pretrained model)")
    ev.add_argument("--data", default="datasets/sim_holdout_v1.npz", help="dataset .npz")
    ev.set_defaults(func=_eval)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class _Ticker:
    """Progress on stderr at most every two seconds, with an estimate of the time left."""

    def __init__(self, label: str) -> None:
        self.label, self.t0, self.last = label, time.monotonic(), 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last < 2.0:
            return
        self.last = now
        elapsed = now - self.t0
        left = elapsed / done * (total - done) if done else math.nan
        _say(f"{self.label}: {done}/{total} ({100 * done / total:.0f}%), {elapsed:.0f} s, "
             f"about {left:.0f} s left")


def _generate(args: argparse.Namespace) -> int:
    from common.meta import generate
    from common.tuners import SearchSpace

    grid = list(SearchSpace()) if args.grid else None
    per_job = len(grid) if grid is not None else args.configs_per_job
    jobs = args.jobs if args.jobs is not None else math.ceil(args.samples / max(1, per_job))
    if jobs < 1:
        raise ConfigError(f"--samples/--jobs must give at least one job, got jobs={jobs}")
    data = generate(jobs=jobs, seed=args.seed, configs_per_job=args.configs_per_job,
                    holdout=args.holdout, grid=grid, progress=_Ticker("generate"))
    path = data.save(args.out)
    print(f"wrote {path}: {data.num_jobs} jobs, {len(data)} samples "
          f"({path.stat().st_size / 1e6:.2f} MB)")
    return 0


def _load_sets(paths: list[str]) -> Any:
    from common.meta import Dataset

    sets = [Dataset.load(p) for p in paths]
    return sets[0] if len(sets) == 1 else Dataset.concat(sets)


def _train(args: argparse.Namespace) -> int:
    from common.meta import evaluate, train

    data = _load_sets(args.data or ["datasets/sim_train_v1.npz"])
    _say(f"train: {data.num_jobs} jobs, {len(data)} samples, up to {args.epochs} epochs")
    t0 = time.monotonic()
    model = train(data, epochs=args.epochs, seed=args.seed, report=lambda s: _say(f"train: {s}"))
    path = model.save(args.out)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB) after "
          f"{time.monotonic() - t0:.0f} s")
    if args.eval_data:
        print(f"held-out ({args.eval_data}, simulated): "
              f"{evaluate(model, _load_sets([args.eval_data])).describe()}")
    return 0


def _eval(args: argparse.Namespace) -> int:
    import numpy as np

    from common.meta import MetaModel, evaluate
    from common.tuners import SearchSpace

    model = MetaModel.load(args.model)
    data = _load_sets([args.data])
    report = evaluate(model, data)
    sources = sorted(set(data["job_source"].tolist()))
    print(f"{args.data} (source: {', '.join(sources)}): {report.describe()}")
    grid = np.array(list(SearchSpace()))
    job = data.job(0)
    model.predict(job, grid[:, 0], grid[:, 0] * grid[:, 1])  # compile once
    times = []
    for _ in range(30):
        t = time.perf_counter()
        model.predict(job, grid[:, 0], grid[:, 0] * grid[:, 1])
        times.append(time.perf_counter() - t)
    times.sort()
    print(f"one inference over all {len(grid)} candidates: median "
          f"{1e3 * statistics.median(times):.1f} ms, p90 {1e3 * times[int(0.9 * len(times))]:.1f}"
          f" ms (features included)")
    return 0

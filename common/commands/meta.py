"""``autobyte meta generate|train|collect|eval``: the meta-network's data, training and quality.

The meta-network predicts a job's speed under each configuration, so the tuner can pick one
without trying it. These commands make its datasets (simulated, or from real runs), train or
fine-tune it, and measure it on jobs it never saw.

    autobyte meta generate --jobs 600 --seed 0 --out datasets/sim_train_v3.npz
    autobyte meta train --data datasets/sim_train_v3.npz --out m.keras
    autobyte meta eval --model m.keras
    autobyte meta collect --from-logs autobyte-logs --out runs/testbed.npz
    autobyte meta train --init common/meta/pretrained.keras --data datasets/sim_train_v3.npz \\
        --data runs/testbed.npz --holdout-runs 'tensorflow-*-300mbit/*' --out m.keras

Testbed data (``collect``) is used as the tuner uses it: the statistics of each window score
every configuration its run swept ("as deployed"); ``--holdout-runs`` keeps whole runs out of
training and evaluates on them after. Each action has its own page: autobyte meta ACTION -h.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import common
from common.errors import ConfigError

__all__ = ["DATASETS", "register", "shipped_dataset"]

# The shipped datasets sit next to common/; defaults are found here, not in the cwd.
DATASETS = Path(common.__file__).resolve().parent.parent / "datasets"
_MAKE = {
    "sim_train_v3.npz": "autobyte meta generate --jobs 600 --seed 0 --out {path}",
    "sim_holdout_v3.npz": "autobyte meta generate --holdout --grid --jobs 24 --seed 0 "
                          "--out {path}",
}
_RAW = argparse.RawDescriptionHelpFormatter

_GENERATE = """\
Simulate training jobs (shipped and random layer profiles, clusters and links) and record the
speed of each under several configurations and native: the rows the meta-network learns from.
The same --seed gives the same file (datasets/SCHEMA.md).

    autobyte meta generate --jobs 600 --seed 0 --out datasets/sim_train_v3.npz
    autobyte meta generate --holdout --grid --jobs 24 --seed 0 --out datasets/sim_holdout_v3.npz

--holdout draws only what training never sees (DenseNet-121, random layer profiles from
another stream, 2-5 Gbit/s links); --grid runs every candidate of the tuner's search space per
job, so eval can compare the configuration the model picks with the best one.
"""

_TRAIN = f"""\
Train a new meta-network on one or more datasets, or fine-tune one (--init), e.g. on testbed
runs; without --data it trains on the shipped {DATASETS / "sim_train_v3.npz"}.

    autobyte meta train --data datasets/sim_train_v3.npz --data datasets/sim_train_v3_seed1.npz \\
        --out sim.keras --eval datasets/sim_holdout_v3.npz
    autobyte meta train --init sim.keras --data datasets/testbed_v4.npz \\
        --data datasets/sim_train_v3.npz --data datasets/sim_train_v3_seed1.npz --epochs 10 \\
        --out pretrained.keras --eval datasets/sim_holdout_v3.npz

(the two steps that make the shipped model: datasets/SCHEMA.md), or a fine-tune of it:

    autobyte meta train --init common/meta/pretrained.keras --data runs/testbed.npz \\
        --holdout-runs '*-300mbit/*' --head-only --out m.keras
"""

_COLLECT = """\
Turn the windows of real jobs' decision logs into a dataset (source testbed), so the
meta-network can learn from real runs. --from-logs reads existing logs; --run first runs sweep
jobs of the demo workers on the testbed (each switches through fixed configurations; root for
shaped links), one framework x model x rate at a time.

    autobyte meta collect --from-logs autobyte-logs --out runs/testbed.npz
    autobyte meta collect --run --frameworks tensorflow --rates 100mbit,1gbit --out tb.npz
"""

_EVAL = f"""\
How well a model predicts speeds and picks configurations on jobs it never saw (MAPE, share of
the best speed its pick reaches), and how long one inference over every candidate takes.
Without --data it uses the shipped {DATASETS / "sim_holdout_v3.npz"}.

    autobyte meta eval
    autobyte meta eval --model m.keras --data runs/testbed.npz --runs '*-300mbit/*' --online
    autobyte meta eval --data runs/testbed.npz --leave-models-out

--leave-models-out answers what a user's own architecture gets: for each model of the testbed
runs, the network fine-tuned on the runs of every other model is scored on that model's runs,
per framework, next to the network as it is. With --online too, that network also replays the
held-out runs window by window, adapting online and not: whether adapting helps on an
architecture the network never saw.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "meta", help="generate data for, train and evaluate the meta-network",
        description=__doc__, formatter_class=_RAW)
    sub = parser.add_subparsers(dest="meta_command", metavar="ACTION", required=True,
                                help="what to do (each has its own -h)")

    gen = sub.add_parser(
        "generate", help="simulate a dataset (reproducible from --seed)", formatter_class=_RAW,
        description=_GENERATE)
    size = gen.add_mutually_exclusive_group(required=True)
    size.add_argument("--samples", type=int,
                      help="rows (jobs = samples / rows per job: configurations + native)")
    size.add_argument("--jobs", type=int, help="jobs (each with its configurations)")
    gen.add_argument("--seed", type=int, default=0, help="random stream (default 0)")
    gen.add_argument("--configs-per-job", type=int, default=8,
                     help="random configurations per job, besides native (default 8)")
    gen.add_argument("--holdout", action="store_true",
                     help="only held-out models and bandwidths (for evaluation)")
    gen.add_argument("--grid", action="store_true",
                     help="every candidate of the tuner's search space per job")
    gen.add_argument("--out", required=True, help="output .npz")
    gen.set_defaults(func=_generate)

    tr = sub.add_parser(
        "train", help="train a network on one or more datasets", formatter_class=_RAW,
        description=_TRAIN)
    tr.add_argument("--data", action="append", help="dataset .npz (repeatable; default the "
                    "shipped datasets/sim_train_v3.npz)")
    tr.add_argument("--out", default="meta.keras",
                    help="model file to write (.keras, default meta.keras)")
    tr.add_argument("--epochs", type=int, default=60,
                    help="at most this many passes over the data (default 60)")
    tr.add_argument("--seed", type=int, default=0, help="initial weights and shuffling (0)")
    tr.add_argument("--eval", dest="eval_data", help="held-out dataset to evaluate on after")
    tr.add_argument("--init", help="fine-tune this model file (e.g. common/meta/pretrained"
                    ".keras) instead of training a new network")
    tr.add_argument("--holdout-runs", action="append", default=[], metavar="PATTERN",
                    help="testbed runs (shell pattern on job_run, e.g. '*-300mbit/*') left out "
                    "of training and evaluated after (repeatable)")
    tr.add_argument("--testbed-weight", type=float, default=1.0,
                    help="loss weight of a testbed row against a simulated one (default 1)")
    tr.add_argument("--learning-rate", type=float,
                    help="default 2e-3 for a new network, 3e-4 with --init")
    tr.add_argument("--head-only", action="store_true",
                    help="with --init: train the head only (the encoder stays as it is)")
    tr.set_defaults(func=_train)

    co = sub.add_parser(
        "collect", help="testbed data: decision logs of real runs -> a dataset",
        formatter_class=_RAW,
        description=_COLLECT)
    what = co.add_mutually_exclusive_group(required=True)
    what.add_argument("--from-logs", nargs="+", metavar="PATH",
                      help="decision logs, or folders searched for decisions-*.jsonl")
    what.add_argument("--run", action="store_true", help="run sweep jobs, then convert their logs")
    co.add_argument("--out", required=True, help="dataset .npz to write")
    co.add_argument("--servers", type=int, default=1,
                    help="parameter servers of the logged PS jobs (default 1, as --run uses)")
    co.add_argument("--frameworks", default="tensorflow,mxnet",
                    help="--run: comma-separated (default tensorflow,mxnet)")
    co.add_argument("--models", default="cnn,mlp,deep,vgg,transformer,lstm,mobilenetv2,resnet20",
                    help="--run: demo models, comma-separated (default %(default)s; resnet's "
                    "90 MB of gradients make its sweeps minutes long below 1gbit)")
    co.add_argument("--rates", default="100mbit,300mbit,500mbit,1gbit,3gbit",
                    help="--run: link rates, comma-separated (default %(default)s)")
    co.add_argument("--max-configs", type=int, default=12,
                    help="--run: most configurations one job sweeps (at least 4, default 12)")
    co.add_argument("--budget", type=float, default=30.0,
                    help="--run: seconds of training per job the sweep is sized to (estimated, "
                    "default 30)")
    co.add_argument("--sweep-steps", type=int, default=15,
                    help="--run: steps per configuration (windows of 5: the first holds the "
                    "switch, the rest are samples; default 15)")
    co.add_argument("--passes", type=int, default=1, choices=(1, 2),
                    help="--run: 2 visits every configuration again, in reverse order, so a "
                    "host whose speed drifts during a job weighs on all alike (default 1)")
    co.add_argument("--seed", type=int, default=0,
                    help="--run: which configurations are drawn (default 0)")
    co.add_argument("--logs", help="--run: folder for the jobs' logs (default runs/collect-<time>)")
    co.add_argument("--timeout", type=float, default=300.0,
                    help="--run: seconds per job (default 300)")
    co.add_argument("--quiet", action="store_true", help="--run: no line per window")
    co.set_defaults(func=_collect)

    ev = sub.add_parser(
        "eval", help="held-out quality and inference time of a model", formatter_class=_RAW,
        description=_EVAL)
    ev.add_argument("--model", help="model file (default: the pretrained model)")
    ev.add_argument("--data", help="dataset .npz (default the shipped "
                    "datasets/sim_holdout_v3.npz)")
    ev.add_argument("--runs", action="append", metavar="PATTERN",
                    help="only the testbed runs matching (shell pattern on job_run; repeatable)")
    ev.add_argument("--online", nargs="?", const="ridge", metavar="METHODS",
                    help="also replay each testbed run window by window, adapting online with "
                    "each of METHODS (comma-separated: ridge, the tuner's default, and/or adam; "
                    "default ridge) on its past windows before scoring the next, against the "
                    "same replay without adapting (1-3 s per window); with "
                    "--leave-models-out, each model's runs replayed by the network fine-tuned "
                    "without them")
    ev.add_argument("--leave-models-out", action="store_true",
                    help="fine-tune on all but one model's testbed runs and score that one, "
                    "for each model, per framework (about a minute per model)")
    ev.add_argument("--train-data", action="append", metavar="PATH",
                    help="--leave-models-out: simulated data to keep training on as well "
                    "(repeatable; default none)")
    ev.add_argument("--epochs", type=int, default=15,
                    help="--leave-models-out: fine-tuning passes (default 15)")
    ev.set_defaults(func=_eval)


def shipped_dataset(name: str) -> Path:
    """A dataset that ships next to ``common/``: a default must not depend on the cwd."""
    path = DATASETS / name
    if not path.is_file():
        make = _MAKE.get(name, "autobyte meta generate ... --out {path}").format(path=path)
        raise ConfigError(f"the shipped dataset {path} is missing; make it with: {make}")
    return path


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
    per_job = (len(grid) if grid is not None else args.configs_per_job) + 1  # and native
    jobs = args.jobs if args.jobs is not None else math.ceil(args.samples / max(1, per_job))
    if jobs < 1:
        raise ConfigError(f"--samples/--jobs must give at least one job, got jobs={jobs}")
    data = generate(jobs=jobs, seed=args.seed, configs_per_job=args.configs_per_job,
                    holdout=args.holdout, grid=grid, progress=_Ticker("generate"))
    path = data.save(args.out)
    print(f"wrote {path}: {data.num_jobs} jobs, {len(data)} samples "
          f"({path.stat().st_size / 1e6:.2f} MB)")
    return 0


def _split(text: str, name: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ConfigError(f"{name} must list at least one value, got {name}={text!r}")
    return items


def _collect(args: argparse.Namespace) -> int:
    from common.bench._collect import run_sweeps, samples_from_logs, sweep_plan
    from common.meta import Dataset

    if args.servers < 1:
        raise ConfigError(f"--servers must be >= 1, got --servers={args.servers}")
    out = Path(args.out)
    if out.suffix != ".npz":
        raise ConfigError(f"--out must name a .npz file, got --out={args.out}")
    failed: list[str] = []
    t0 = time.monotonic()
    if args.run:
        if not args.timeout > 0:
            raise ConfigError(f"--timeout must be > 0 seconds, got --timeout={args.timeout}")
        jobs = sweep_plan(frameworks=_split(args.frameworks, "--frameworks"),
                          models=_split(args.models, "--models"),
                          rates=_split(args.rates, "--rates"), max_configs=args.max_configs,
                          budget_s=args.budget, seed=args.seed,
                          sweep_steps=args.sweep_steps, passes=args.passes)
        logs_dir = Path(args.logs or time.strftime("runs/collect-%Y%m%d-%H%M%S"))
        _say(f"collect: {len(jobs)} sweep jobs, {sum(j.drawn for j in jobs)} "
             f"configurations, logs in {logs_dir}")
        logs, failed = run_sweeps(jobs, out=logs_dir, timeout=args.timeout,
                                  echo=not args.quiet, say=_say)
        for line in failed:
            _say(f"collect: FAILED {line}")
        if not logs:
            raise ConfigError(f"no sweep job finished ({len(failed)} failed); nothing to write")
        paths: list[str] = [str(p) for p in logs]
    else:
        paths = args.from_logs
    got = samples_from_logs(paths, servers=args.servers)
    _say(f"collect: {got.describe()}")
    if not got.samples:
        raise ConfigError(f"no usable windows in {', '.join(map(str, paths))}: "
                          f"{got.describe()}")
    data = Dataset.from_samples(got.samples, source="testbed", runs=got.runs)
    path = data.save(out)
    print(f"wrote {path}: {len(set(got.runs))} runs, {len(data)} samples "
          f"({path.stat().st_size / 1e3:.0f} kB) after {time.monotonic() - t0:.0f} s"
          + (f"; {len(failed)} job(s) failed" if failed else ""))
    return 1 if failed else 0


def _load_sets(paths: list[str]) -> Any:
    from common.meta import Dataset

    sets = [Dataset.load(p) for p in paths]
    return sets[0] if len(sets) == 1 else Dataset.concat(sets)


def _train(args: argparse.Namespace) -> int:
    from common.meta import MetaModel, fine_tune, train

    data = _load_sets(args.data or [str(shipped_dataset("sim_train_v3.npz"))])
    held = None
    if args.head_only and not args.init:
        raise ConfigError("--head-only fine-tunes an existing model: give --init MODEL too")
    if args.holdout_runs:
        held = _match_runs(data, args.holdout_runs)
        if held.num_jobs == 0:
            raise ConfigError(f"--holdout-runs {args.holdout_runs} match no run of the data "
                              f"(runs: {', '.join(data.runs()) or 'none'})")
        data = data.select_jobs(~_run_mask(data, args.holdout_runs))
        _say(f"train: holding out {len(held.runs())} testbed run(s): {', '.join(held.runs())}")
    if not len(data):
        raise ConfigError("no training samples left")
    testbed = int((data["job_source"] == "testbed").sum())
    data = data.as_deployed()
    _say(f"train: {data.num_jobs} jobs ({testbed} testbed windows, each scoring its run's "
         f"configurations), {len(data)} samples, up to {args.epochs} epochs")
    report = lambda s: _say(f"train: {s}")  # noqa: E731
    t0 = time.monotonic()
    if args.init:
        base = MetaModel.load(args.init)
        model = fine_tune(base, data, epochs=args.epochs, seed=args.seed,
                          learning_rate=args.learning_rate or 3e-4, report=report,
                          testbed_weight=args.testbed_weight, head_only=args.head_only)
    else:
        model = train(data, epochs=args.epochs, seed=args.seed,
                      learning_rate=args.learning_rate or 2e-3, report=report,
                      testbed_weight=args.testbed_weight)
    path = model.save(args.out)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB) after "
          f"{time.monotonic() - t0:.0f} s")
    if args.eval_data:
        print(f"held-out ({args.eval_data}, simulated): "
              f"{_describe(model, _load_sets([args.eval_data]))}")
    if held is not None:
        print(f"held-out testbed runs ({', '.join(args.holdout_runs)}): "
              f"{_describe(model, held)}")
    return 0


def _run_mask(data: Any, patterns: list[str]) -> Any:
    import fnmatch

    import numpy as np

    return np.array([bool(r) and any(fnmatch.fnmatchcase(r, p) for p in patterns)
                     for r in data["job_run"].tolist()], dtype=bool)


def _match_runs(data: Any, patterns: list[str]) -> Any:
    return data.select_jobs(_run_mask(data, patterns))


def _describe(model: Any, data: Any, *, per_run: bool = False) -> str:
    """Simulated jobs as they are; testbed runs as deployed (each window's statistics score
    every configuration of its run), plus each window scored with its own statistics."""
    from common.meta import evaluate

    lines = []
    sim = data.select_jobs(data["job_run"] == "")
    if sim.num_jobs:
        lines.append(evaluate(model, sim).describe())
    runs = data.runs()
    if runs:
        real = data.select_jobs(data["job_run"] != "")
        deployed = evaluate(model, real.as_deployed())
        own = evaluate(model, real)
        lines.append(f"testbed, {len(runs)} runs as deployed: {deployed.describe()}; each "
                     f"window with its own statistics: MAPE {100 * own.mape:.1f}%")
        if per_run:
            for run in runs:
                one = evaluate(model, real.select_runs(run).as_deployed())
                lines.append(f"  {run}: {one.describe()}")
    return "\n".join(lines)


def _leave_models_out(model: Any, data: Any, args: argparse.Namespace) -> None:
    from common.meta import leave_models_out

    extra = _load_sets(args.train_data) if args.train_data else None
    t0 = time.monotonic()
    rows = leave_models_out(model, data, extra=extra, epochs=args.epochs,
                            online=_online_methods(args.online) if args.online else (),
                            report=lambda s: _say(f"leave-models-out: {s}"))
    print(f"leave-models-out ({time.monotonic() - t0:.0f} s; windows as deployed; the pick is "
          "the share of the run's best measured speed):")
    print(f"  {'model':<18} {'framework':<11} {'runs':>4} {'windows':>7}  "
          f"{'MAPE as is':>10} {'pick as is':>10}  {'MAPE held out':>13} "
          f"{'native measured':>15} {'pick held out':>13} {'guarded':>7}")
    for r in rows:
        print(f"  {r.model:<18} {r.framework:<11} {r.runs:>4} {r.after.jobs:>7}  "
              f"{100 * r.before.mape:>9.1f}% {100 * r.before.fraction_of_best:>9.1f}%  "
              f"{100 * r.after.mape:>12.1f}% {100 * r.after.native_mape:>14.1f}% "
              f"{100 * r.after.fraction_of_best:>12.1f}% "
              f"{100 * r.after.guarded_fraction:>6.1f}%")
    for framework in sorted({r.framework for r in rows}):
        mine = [r for r in rows if r.framework == framework]
        rows_n = sum(r.after.rows for r in mine)
        mape = sum(r.after.mape * r.after.rows for r in mine) / rows_n
        anchored_n = sum(r.after.native_rows for r in mine)
        anchored = sum(r.after.native_mape * r.after.native_rows for r in mine
                       if r.after.native_rows) / anchored_n if anchored_n else math.nan
        picks = [f for r in mine for f in r.after.per_job_fraction]
        pick = statistics.fmean(picks) if picks else math.nan
        kept = [f for r in mine for f in r.after.per_job_guarded]
        guarded = statistics.fmean(kept) if kept else math.nan
        print(f"  {framework}: {len(mine)} held-out models, {rows_n} predictions: MAPE "
              f"{100 * mape:.1f}% ({100 * anchored:.1f}% of {anchored_n} once native is "
              f"measured, as the tuner scores), pick {100 * pick:.1f}% of the best, "
              f"{100 * guarded:.1f}% with the guard (the faster of native and the tuner's "
              "pick once native is measured)")
    if any(r.online for r in rows):
        print("held-out runs replayed window by window (each window scored as the tuner "
              "scores it then: the network as adapted so far, and once native ran, anchored "
              "and with the simulator's prior):")
        for r in rows:
            print(f"  {r.model:<18} {r.framework:<11} " + "; ".join(
                f"{_replay_name(m)} MAPE {100 * e.mape:.1f}%, pick "
                f"{100 * e.fraction_of_best:.1f}% ({100 * e.guarded_fraction:.1f}% guarded)"
                for m, e in r.online.items()))
        for framework in sorted({r.framework for r in rows}):
            mine = [r for r in rows if r.framework == framework and r.online]
            for method in mine[0].online if mine else ():
                got = [r.online[method] for r in mine]
                n = sum(e.rows for e in got)
                mape = sum(e.mape * e.rows for e in got) / n
                pick = sum(e.fraction_of_best * e.rows for e in got) / n
                guarded = sum(e.guarded_fraction * e.rows for e in got) / n
                print(f"  {framework}, {_replay_name(method)}: {n} windows of {len(mine)} "
                      f"held-out models, MAPE {100 * mape:.1f}%, pick {100 * pick:.1f}%, "
                      f"{100 * guarded:.1f}% with the guard")


def _replay_name(method: str | None) -> str:
    return f"adapting online ({method})" if method else "not adapting"


def _online_methods(value: str) -> list[str]:
    from common.meta._train import ADAPT_METHODS

    methods = [m.strip() for m in value.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(ADAPT_METHODS))
    if unknown or not methods:
        raise ConfigError(f"--online takes adaptation methods from {list(ADAPT_METHODS)}, "
                          f"got --online {value!r}")
    return methods


def _eval(args: argparse.Namespace) -> int:
    import numpy as np

    from common.meta import MetaModel
    from common.meta._prior import score
    from common.tuners import SearchSpace

    path = args.data or str(shipped_dataset("sim_holdout_v3.npz"))
    model = MetaModel.load(args.model)
    data = _load_sets([path])
    if args.runs:
        data = _match_runs(data, args.runs)
        if data.num_jobs == 0:
            raise ConfigError(f"--runs {args.runs} match no run of {path}")
    sources = sorted(set(data["job_source"].tolist()))
    print(f"{path} (source: {', '.join(sources)}): "
          f"{_describe(model, data, per_run=True)}")
    if args.online and not args.leave_models_out:
        from common.meta import evaluate_online

        real = data.select_jobs(data["job_run"] != "")
        if not real.num_jobs:
            raise ConfigError(f"--online needs testbed runs; {path} has none")
        for method in [None, *_online_methods(args.online)]:
            name = f"adapting online ({method})" if method else "the same replay, not adapting"
            _say(f"replaying {len(real.runs())} run(s), {name}:")
            got = evaluate_online(model, real, method=method, report=_say)
            print(f"testbed runs replayed window by window, {name}: {got.describe()}")
    if args.leave_models_out:
        _leave_models_out(model, data, args)
    space = SearchSpace()
    grid = np.array([space.encode(c) for c in space.configs()])  # every candidate, native too
    job = data.job(0)
    model.predict(job, grid[:, 0], grid[:, 1])  # compile once
    times, scoring = [], []
    for _ in range(30):
        t = time.perf_counter()
        predicted = model.predict(job, grid[:, 0], grid[:, 1])
        times.append(time.perf_counter() - t)
        score(job, grid[:, 0], grid[:, 1], predicted, float(predicted[0]))
        scoring.append(time.perf_counter() - t)
    times.sort()
    scoring.sort()
    print(f"one inference over all {len(grid)} candidates: median "
          f"{1e3 * statistics.median(times):.1f} ms, p90 {1e3 * times[int(0.9 * len(times))]:.1f}"
          f" ms (features included); scored as the tuner does once native is measured (the "
          f"simulator's prior on the best): median {1e3 * statistics.median(scoring):.1f} ms, "
          f"p90 {1e3 * scoring[int(0.9 * len(scoring))]:.1f} ms")
    return 0

"""Scale by simulation: 8 to 128 workers, every strategy against the limit.

For each model (the four real profiles), architecture (ring all-reduce; PS with one server per
four workers) and worker count, at --bandwidth, the simulator runs:

  baseline   scheduling off: whole tensors in framework order, no credit (native)
  default    ByteScheduler with P3's default configuration (160 KiB, 1x)
  bo-static  the best of 15 Bayesian-optimisation evaluations (seed 0), then fixed
  grid       the optimum over the tuner's search space (176 configurations)
  autobyte   what the shipped meta-network picks from the job's features, one inference

Each cell is the fraction of the simulator's lower bound reached (lower_bound_s /
iteration_s; 1.0 is perfect overlap with no overhead). Writes a CSV and a PNG and prints the
table; everything here is simulated, nothing is measured on the testbed.

    autobyte bench scale [--workers 8,16,32,64,128]
        [--models resnet50,vgg16,alexnet,densenet121] [--bandwidth 10gbit] [--out runs/scale]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from common.config import Config
from common.sim import MODELS, get_profile, simulate
from common.tuners import BayesianTuner, DefaultTuner, SearchSpace, SimObjective, run_search
from common.units import format_bytes, parse_rate

STRATEGIES = ("baseline", "default", "bo-static", "grid", "autobyte")
BO_BUDGET = 15


def knobs(config: Config) -> str:
    return f"{format_bytes(config.partition_bytes)} x{config.credit_multiple:.0f}"


def meta_pick(model: Any, name: str, space: SearchSpace, configs: list[Config], *,
              workers: int, arch: str, servers: int, rate: float) -> Config:
    from common.meta import MetaInput

    profile = get_profile(name)
    job = MetaInput(layer_backward_s=tuple(x.backward_s for x in profile.layers),
                    layer_bytes=tuple(x.nbytes for x in profile.layers), workers=workers,
                    arch=arch, servers=servers, bandwidth_down_bps=rate,
                    bandwidth_up_bps=rate, model=name, batch_size=profile.batch_size)
    parts = np.array([c.partition_bytes for c in configs])
    credits = np.array([c.credit_bytes for c in configs])
    return configs[int(np.argmax(model.predict(job, parts, credits)))]


def one_job(name: str, arch: str, workers: int, rate: float, space: SearchSpace,
            configs: list[Config], meta: Any) -> dict[str, Any]:
    servers = max(1, workers // 4) if arch == "ps" else 1
    options: dict[str, Any] = {"workers": workers, "arch": arch, "servers": servers,
                               "bandwidth": rate}
    profile = get_profile(name)
    objective = SimObjective(profile, **options)
    probe = simulate(profile, Config(), trace=False, **options)
    bound_speed = probe.speed * probe.iteration_s / probe.lower_bound_s
    speeds = {c: objective(c) for c in configs}
    grid_best = max(speeds, key=lambda c: speeds[c])
    bo = run_search(BayesianTuner(space=space, seed=0), objective, budget=BO_BUDGET).best[0]
    picked = meta_pick(meta, name, space, configs, workers=workers, arch=arch,
                       servers=servers, rate=rate)
    chosen = {"baseline": Config(scheduling=False), "default": DefaultTuner().propose(),
              "bo-static": bo, "grid": grid_best, "autobyte": picked}
    row: dict[str, Any] = {"model": name, "arch": arch, "workers": workers,
                           "servers": servers, "bound_samples_per_s": bound_speed}
    for strategy, config in chosen.items():
        row[strategy] = objective(config) / bound_speed
        row[f"{strategy}_config"] = knobs(config) if config.scheduling else "off"
    return row


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    archs = sorted({r["arch"] for r in rows})
    fig, axes = plt.subplots(1, len(archs), figsize=(6 * len(archs), 4.2), sharey=True,
                             squeeze=False)
    for ax, arch in zip(axes[0], archs, strict=True):
        workers = sorted({r["workers"] for r in rows if r["arch"] == arch})
        for strategy in STRATEGIES:
            means = [statistics.fmean(r[strategy] for r in rows
                                      if r["arch"] == arch and r["workers"] == n)
                     for n in workers]
            ax.plot(workers, means, marker="o", label=strategy)
        ax.set_xscale("log", base=2)
        ax.set_xticks(workers, [str(n) for n in workers])
        ax.set_xlabel("workers")
        ax.set_title(f"{arch}: mean over models")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("fraction of the lower bound")
    axes[0][-1].legend(loc="best")
    fig.suptitle("Scale by simulation: speed as a fraction of the simulator's lower bound")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="8,16,32,64,128")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--archs", default="allreduce,ps")
    parser.add_argument("--bandwidth", default="10gbit")
    parser.add_argument("--out", default="runs/scale", help="folder for scale.csv and .png")
    args = parser.parse_args(argv)
    from common.meta import MetaModel

    rate = parse_rate(args.bandwidth, "bandwidth")
    worker_counts = [int(n) for n in args.workers.split(",")]
    space = SearchSpace()
    configs = space.configs()
    meta = MetaModel.load()
    rows = []
    started = time.perf_counter()
    jobs = [(m, a, n) for m in args.models.split(",") for a in args.archs.split(",")
            for n in worker_counts]
    head = (f"{'model':12} {'arch':9} {'n':>4} " + " ".join(f"{s:>9}" for s in STRATEGIES)
            + f"  {'grid config':>13} {'autobyte config':>15}")
    print(f"{args.bandwidth}; fraction of the lower bound reached (1.0 = the limit)")
    print(head)
    print("-" * len(head))
    for i, (name, arch, workers) in enumerate(jobs, start=1):
        row = one_job(name, arch, workers, rate, space, configs, meta)
        rows.append(row)
        print(f"{name:12} {arch:9} {workers:>4} "
              + " ".join(f"{row[s]:>9.3f}" for s in STRATEGIES)
              + f"  {row['grid_config']:>13} {row['autobyte_config']:>15}"
              f"   [{i}/{len(jobs)}, {time.perf_counter() - started:.0f} s]", flush=True)
    print("\nmean over models and worker counts, as a fraction of the grid optimum:")
    for strategy in STRATEGIES:
        ratio = statistics.fmean(r[strategy] / r["grid"] for r in rows)
        print(f"  {strategy:10} {ratio:.3f}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "scale.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, out / "scale.png")
    print(f"\nwrote {out / 'scale.csv'} and {out / 'scale.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Simulator speed and the tuner baselines against grid search, as tables.

    .venv/bin/python benchmarks/sim_bench.py            # about a minute on one core
    .venv/bin/python benchmarks/sim_bench.py --seeds 1  # BO with seed 0 only
    .venv/bin/python benchmarks/sim_bench.py --hard     # also 64 and 32 workers (slower)

1. Wall time to simulate one ResNet-50 iteration (a step of backward, communication and the
   next forward) with 128 workers, at several partition sizes (the cost grows with the number
   of chunks, not with the number of workers: workers are symmetric), best of --repeat runs.
2. Per profile and architecture (8 workers, 10 Gbit/s; PS with 8 servers): the grid-search
   optimum over the default space (176 configurations), how many evaluations Bayesian
   optimisation needed to get within 5% of it (budget 15; one figure per seed), BO's best
   after 15 relative to the grid's, and P3's default (160 KiB, 1x) relative to the grid's.
3. With --hard, the same for larger rings (64 workers; 32 workers with 200 us per hop), where
   the good configurations form a narrow ridge (credit bytes ~ constant) and BO can miss it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from common.config import Config
from common.sim import MODELS, get_profile, simulate
from common.tuners import (
    BayesianTuner,
    DefaultTuner,
    SearchSpace,
    SimObjective,
    run_search,
)
from common.units import format_bytes

KIB, MIB = 1024, 1024 * 1024
SETTINGS = {
    "ps": {"workers": 8, "arch": "ps", "servers": 8, "bandwidth": "10gbit"},
    "allreduce": {"workers": 8, "arch": "allreduce", "bandwidth": "10gbit"},
}
HARD_SETTINGS = {
    "ar64": {"workers": 64, "arch": "allreduce", "bandwidth": "10gbit"},
    "ar32-200us": {"workers": 32, "arch": "allreduce", "bandwidth": "10gbit",
                   "latency_s": 200e-6},
}
BUDGET, TOLERANCE = 15, 0.05


def timing(repeat: int) -> None:
    profile = get_profile("resnet50")
    print("1. one ResNet-50 iteration, 128 workers, 10gbit, credit 4x (best of "
          f"{repeat} runs)")
    print(f"{'arch':>10} {'partition':>10} {'chunks':>7} {'sim wall ms':>12} "
          f"{'iteration ms':>13}")
    for arch in ("allreduce", "ps"):
        for partition in (64 * KIB, 256 * KIB, MIB, 4 * MIB):
            config = Config(partition_bytes=partition, credit_bytes=4 * partition)
            walls = []
            for _ in range(repeat):
                start = time.perf_counter()
                result = simulate(profile, config, workers=128, arch=arch, servers=128,
                                  bandwidth="10gbit")
                walls.append(time.perf_counter() - start)
            print(f"{arch:>10} {format_bytes(partition):>10} {len(result.trace):>7} "
                  f"{min(walls) * 1e3:>12.1f} {result.iteration_s * 1e3:>13.1f}")
    scaling: list[str] = []
    for workers in (8, 128, 1024):
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            simulate(profile, Config(partition_bytes=MIB, credit_bytes=4 * MIB),
                     workers=workers, arch="allreduce", bandwidth="10gbit", trace=False)
            best = min(best, time.perf_counter() - start)
        scaling.append(f"{workers} workers {best * 1e3:.1f} ms")
    print("   1 MiB partitions, all-reduce, no trace: " + ", ".join(scaling))


def bo_vs_grid(seeds: int, settings: dict[str, dict[str, object]], title: str) -> bool:
    space = SearchSpace()
    print(f"\n{title}: Bayesian optimisation vs grid search ({len(space)} configurations); "
          f"BO budget {BUDGET}, target within {TOLERANCE:.0%}")
    print(f"{'model':>12} {'arch':>9} {'grid best (samples/s)':>28} {'grid s':>7} "
          f"{'BO evals to 95% (per seed)':>28} {'BO@15/grid':>11} {'P3/grid':>8}")
    ok = True
    for model in MODELS:
        for arch, options in settings.items():
            objective = SimObjective(get_profile(model), **options)
            start = time.perf_counter()
            speeds = {(p, m): objective(space.config(p, m)) for p, m in space}
            grid_s = time.perf_counter() - start
            (p, m), best = max(speeds.items(), key=lambda kv: kv[1])
            used, ratios = [], []
            for seed in range(seeds):
                run = run_search(BayesianTuner(space=space, seed=seed), objective,
                                 budget=BUDGET)
                used.append(run.evaluations_to((1 - TOLERANCE) * best))
                ratios.append(run.best[1] / best)
            ok &= all(u is not None for u in used)
            p3 = objective(DefaultTuner().propose()) / best
            grid = f"{best:.1f} @ {format_bytes(p)} x{m}"
            evals = ",".join("-" if u is None else str(u) for u in used)
            print(f"{model:>12} {arch:>9} {grid:>28} {grid_s:>7.1f} {evals:>28} "
                  f"{min(ratios):>11.3f} {p3:>8.3f}")
    print("   (BO@15/grid: the worst seed's best speed after 15 evaluations over the grid's)")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--hard", action="store_true", help="also the larger rings")
    args = parser.parse_args()
    timing(args.repeat)
    ok = bo_vs_grid(args.seeds, SETTINGS, "2. 8 workers, 10gbit (PS with 8 servers)")
    print("\nBO within 5% of the grid optimum in <= 15 evaluations for every seed:",
          "yes" if ok else "NO")
    if args.hard:
        hard = bo_vs_grid(args.seeds, HARD_SETTINGS, "3. larger rings")
        print("\nlarger rings, every seed within 5% in <= 15:", "yes" if hard else "no")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

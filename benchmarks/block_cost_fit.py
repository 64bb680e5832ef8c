"""What a block costs and how fast the link runs, fitted to real runs: the tuner's prior
(``common.meta._prior.BLOCK_COST`` and ``LINK_SCALE``) and the simulated data
(``common.meta._dataset.BLOCK_COST_S``, off the compute path only).

    .venv/bin/python benchmarks/block_cost_fit.py                              # 30 s
    .venv/bin/python benchmarks/block_cost_fit.py --costs 100us,1ms --cpu 0,1ms --scales 1 \
        --data runs/tb.npz

For every sweep run of a testbed dataset, the simulator replays each configuration the run
measured with the run's own layer times and link rate (the forward time set so that native's
simulated step equals its measured one), at each candidate per-block cost and link scale:
``--costs``, the transfer's start-up off the compute path; ``--cpu``, the compute each block
takes from the worker; ``--scales``, the link's rate over the run's measured one. Each
configuration's simulated ratio to native is compared with the measured ratio. Printed per arch
and triple: the mean and median |log(simulated / measured)|, the same over partitions of 64 KiB
and less, and the mean signed error per partition (positive: the simulator overrates the
configuration).
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import statistics
import sys

from common.commands.simulate import parse_seconds
from common.meta import Dataset, MetaInput
from common.meta._prior import simulated_speeds
from common.tuners import NATIVE_BYTES

SMALL = 64 * 1024


# (off the compute path, on it) in seconds a block, and the link's rate over the measured one
Cost = tuple[float, float, float]


def run_errors(data: Dataset, costs: list[Cost]) -> dict[tuple[str, Cost],
                                                         list[tuple[int, float]]]:
    """(arch, cost) -> (partition, log(simulated / measured ratio to native)) per config."""
    runs: dict[str, list[int]] = collections.defaultdict(list)
    for j, run in enumerate(data["job_run"].tolist()):
        if run:
            runs[run].append(j)
    out: dict[tuple[str, Cost], list[tuple[int, float]]] = collections.defaultdict(list)
    for jobs in runs.values():
        speeds: dict[tuple[int, int], list[float]] = collections.defaultdict(list)
        for j in jobs:
            rows = data["sample_job"] == j
            for p, c, v in zip(data["partition_bytes"][rows], data["credit_bytes"][rows],
                               data["speed"][rows], strict=True):
                speeds[(int(p), int(c))].append(float(v))
        job = data.job(jobs[0])
        for cost in costs:
            out[(job.arch, cost)] += _errors(job, speeds, cost)
    return out


def _errors(job: MetaInput, speeds: dict[tuple[int, int], list[float]],
            cost: Cost) -> list[tuple[int, float]]:
    """One run's configurations at one cost and scale (none without native or a link rate)."""
    native = [k for k in speeds if k[0] == NATIVE_BYTES]
    if not native or max(job.bandwidth_down_bps, job.bandwidth_up_bps) <= 0:
        return []
    measured_native = statistics.fmean(speeds[native[0]])
    configs = [k for k in speeds if k[0] != NATIVE_BYTES]
    simulated = simulated_speeds(job, [p for p, _ in configs], [c for _, c in configs],
                                 measured_native, block_cost=cost[:2], link_scale=cost[2])
    return [(p, math.log(v / statistics.fmean(speeds[(p, c)])))
            for (p, c), v in zip(configs, simulated.tolist(), strict=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..",
                                                       "datasets", "testbed_v7.npz"))
    parser.add_argument("--costs", default="100us,250us,1ms,2ms",
                        help="per-block costs off the compute path to try, comma-separated")
    parser.add_argument("--cpu", default="0,500us,1ms,1500us",
                        help="per-block compute costs to try, comma-separated")
    parser.add_argument("--scales", default="1,2,3",
                        help="link rates over the measured one to try, comma-separated")
    args = parser.parse_args(argv)
    scales = [_scale(x) for x in args.scales.split(",")]
    if not all(math.isfinite(x) and x > 0 for x in scales):
        parser.error(f"--scales takes numbers > 0, got {args.scales!r}")
    costs = [(parse_seconds(c, "--costs"), parse_seconds(u, "--cpu"), x)
             for c in args.costs.split(",") for u in args.cpu.split(",") for x in scales]
    errors = run_errors(Dataset.load(args.data), costs)
    print(f"{'arch':<10} {'cost':>8} {'cpu':>8} {'scale':>5} {'configs':>7} {'mean |err|':>10} "
          f"{'median':>7} {'<=64KiB':>8}  signed error by partition")
    for (arch, (cost, cpu, scale)), rows in sorted(errors.items()):
        absolute = [abs(e) for _, e in rows]
        small = [abs(e) for p, e in rows if p <= SMALL]
        by_part: dict[int, list[float]] = collections.defaultdict(list)
        for p, e in rows:
            by_part[p].append(e)
        signed = " ".join(f"{p >> 10}K:{statistics.fmean(v):+.2f}"
                          for p, v in sorted(by_part.items()))
        print(f"{arch:<10} {cost * 1e6:>6.0f}us {cpu * 1e6:>6.0f}us {scale:>5g} {len(rows):>7} "
              f"{statistics.fmean(absolute):>10.3f} "
              f"{statistics.median(absolute):>7.3f} "
              f"{statistics.fmean(small) if small else math.nan:>8.3f}  {signed}")
    return 0


def _scale(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


if __name__ == "__main__":
    sys.exit(main())

"""A long job tuned live from a chosen start against plain framework training, side by side.

    sudo .venv/bin/python benchmarks/start_bench.py                    # TF ResNet-20, 500mbit
    sudo .venv/bin/python benchmarks/start_bench.py --rounds 3 --start 64KiB:64KiB

Each round runs one job with the meta tuner from ``--start`` and then one of the framework's
own path (MultiWorkerMirroredStrategy / dist_sync), ``--steps`` each on the testbed. The
convergence experiment's 600-step jobs are too short for a TensorFlow try to pay for its
trace; this shows what the guard does when one can. It prints each job's median window speed
and the median over rounds of their ratio; the decision logs stay under ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from common.bench import JobSpec, run_jobs
from common.units import parse_bytes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", default="tensorflow")
    p.add_argument("--model", default="resnet20")
    p.add_argument("--rate", default="500mbit")
    p.add_argument("--start", default="1MiB:1MiB", help="partition:credit the tuned job starts on")
    p.add_argument("--steps", type=int, default=2400)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--out", default="runs/start-bench")
    args = p.parse_args(argv)
    partition, credit = (parse_bytes(x, "--start") for x in args.start.split(":"))
    ratios = []
    for r in range(args.rounds):
        job = {"framework": args.framework, "model": args.model, "steps": args.steps}
        tuned, plain = (run_jobs([spec], rate=args.rate, out=Path(args.out), echo=False)[0]
                        for spec in (JobSpec(f"start-meta-r{r}", tuner="meta",
                                             start=(partition, credit), **job),
                                     JobSpec(f"start-native-r{r}", start=None, baseline=True,
                                             **job)))
        speeds = [statistics.median(w.speed for w in run.windows) for run in (tuned, plain)]
        ratios.append(speeds[0] / speeds[1])
        print(f"round {r + 1}: meta from {args.start} {speeds[0]:.1f} samples/s (ends on "
              f"{tuned.windows[-1].config}), native {speeds[1]:.1f}: {ratios[-1]:.3f}x",
              flush=True)
    print(f"{args.framework} {args.model} {args.rate}, {args.steps} steps: median over "
          f"{args.rounds} round(s) {statistics.median(ratios):.3f}x native")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

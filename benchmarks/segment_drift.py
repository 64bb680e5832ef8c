"""Whether one plan's speed moves between the segments of a job, and whether it is the trace.

    sudo .venv/bin/python benchmarks/segment_drift.py [--framework tensorflow] \\
        [--model resnet20] [--rate 1gbit] [--steps 30]

One job on the testbed switches through three configurations that all run one block of every
gradient (the same plan, whatever the partition and credit), coming back to each: in
TensorFlow a return reuses the traced step. Prints each segment's median window. If the three
move together from segment to segment, the host's speed drifts; if each keeps its own speed,
the trace decides it. ``pick_ceiling.py`` estimates the same noise from sweep data.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from common.bench import JobSpec, run_jobs
from common.bench._jobs import MODULES

M = 1 << 20
ONE_BLOCK = ((16 * M, 48 * M), (32 * M, 480 * M), (4 * M, 56 * M))  # above resnet20's 1.1 MB
ORDER = (0, 1, 0, 1, 2, 0, 1, 2, 0, 1)
WINDOW = 5


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", default="tensorflow", choices=sorted(MODULES))
    p.add_argument("--model", default="resnet20", help="a model under 4 MiB of gradients")
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--steps", type=int, default=30, help="steps per segment (a multiple of 5)")
    p.add_argument("--out", default="runs/segment-drift")
    args = p.parse_args(argv)
    if args.steps < 2 * WINDOW or args.steps % WINDOW:
        p.error(f"--steps must be a multiple of {WINDOW} and >= {2 * WINDOW}, got {args.steps}")
    sweep = tuple(ONE_BLOCK[i] for i in ORDER)
    spec = JobSpec(f"drift-{args.framework[:2]}-{args.model}-{args.rate}",
                   framework=args.framework, model=args.model, steps=args.steps * len(sweep),
                   window=WINDOW, start=sweep[0], sweep=sweep, sweep_steps=args.steps)
    run = run_jobs([spec], rate=args.rate, out=Path(args.out), echo=False)[0]
    for n in range(len(sweep)):
        first, last = n * args.steps + 1, (n + 1) * args.steps
        rows = [w for w in run.windows if first < w.first and w.last <= last]
        if rows:  # the segment's first window holds the switch
            print(f"segment {n + 1:2d} (steps {first}-{last}) {rows[0].config:14s} median "
                  f"window {statistics.median(w.speed for w in rows):7.1f} samples/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

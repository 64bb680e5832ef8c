"""What a TensorFlow switch costs: the first trace of a new plan, and a switch back.

    sudo .venv/bin/python benchmarks/tf_switch_bench.py                 # MobileNetV2, 1gbit
    .venv/bin/python benchmarks/tf_switch_bench.py --model cnn --rounds 2

One job of 2 workers on the testbed switches A -> B -> A -> B -> native -> A every
``--every`` steps (A and B partition:credit), reporting every step. A switch to a plan never
used before traces the step anew; a switch back reuses the trace kept for that plan. For each
switch it prints the switch step's time against the median of the steps around it (the time
the switch added), and the median over rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from common.bench import JobSpec, run_jobs
from common.progress import NATIVE
from common.units import parse_bytes

BATCH = 32


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mobilenetv2")
    p.add_argument("--rate", default="1gbit")
    p.add_argument("--a", default="1MiB:4MiB", help="partition:credit of A")
    p.add_argument("--b", default="256KiB:1MiB", help="partition:credit of B")
    p.add_argument("--every", type=int, default=8, help="steps between switches")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default="runs/tf-switch")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    a = tuple(parse_bytes(x, "--a") for x in args.a.split(":"))
    b = tuple(parse_bytes(x, "--b") for x in args.b.split(":"))
    sweep = (a, b, a, b, NATIVE, a)
    labels = ["A (first trace)", "B (first trace)", "back to A", "back to B",
              "native (first trace)", "back to A"]
    added: dict[int, list[float]] = {i: [] for i in range(1, len(sweep))}
    for r in range(args.rounds):
        spec = JobSpec(f"switch-{args.model}-r{r}", framework="tensorflow", model=args.model,
                       steps=len(sweep) * args.every, window=1, start=a, sweep=sweep,
                       sweep_steps=args.every)
        run = run_jobs([spec], rate=args.rate, out=Path(args.out), echo=False)[0]
        step_s = {w.last: 2 * BATCH / w.speed for w in run.windows if w.speed > 0}
        for i in range(1, len(sweep)):
            # the demo asks after step i*every; the agreement applies it at the next step
            switch = i * args.every + 1
            around = [step_s[s] for s in range(switch - args.every + 3, switch - 1)
                      if s in step_s] + [step_s[s] for s in range(switch + 2, switch + 5)
                                         if s in step_s]
            if switch in step_s and around:
                added[i].append(step_s[switch] - statistics.median(around))
        print(f"round {r + 1}: " + ", ".join(
            f"{labels[i]} +{1e3 * added[i][-1]:.0f} ms" for i in added if added[i]), flush=True)
    print(f"\n{args.model} at {args.rate}, A={args.a}, B={args.b}; time a switch added to its "
          f"step (median of {args.rounds} rounds, against the median step around it):")
    for i in added:
        if added[i]:
            print(f"  {labels[i]:<22} {1e3 * statistics.median(added[i]):8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

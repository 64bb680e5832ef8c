"""What AutoByte costs a job that stays on the framework's own path, taken apart.

    sudo .venv/bin/python benchmarks/native_cost.py [--framework tensorflow] [--model cnn] \\
        [--rate 300mbit] [--steps 1325] [--rounds 3] [--devices 1] [--kinds baseline,off]

Four jobs a round on the testbed (``--kinds`` picks fewer), in alternating order: the
framework alone (``baseline``), AutoByte on native with no tuner (``off``: the adapter's native
path and its statistics), on native with a tuner that only measures (``observe``: the tuning
plane too, the coordinator and its messages) and as shipped (``shipped``: the meta-network, its
probes and adaptations).
Prints each job's speed and rank 0's CPU per step, then the medians of each kind's speed over
the round's baseline. Rounds on this machine spread by 5-10%: read medians of several.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from common.bench import JobSpec, run_jobs
from common.progress import NATIVE

KINDS = ("baseline", "off", "observe", "shipped")
WINDOW = 10  # the shipped default, so every kind sends windows alike


def job_spec(kind: str, name: str, **job: Any) -> JobSpec:
    """The job of one of ``KINDS``, with the ``JobSpec`` fields ``job`` gives."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    return JobSpec(name, window=WINDOW, baseline=kind == "baseline", shipped=kind == "shipped",
                   start=NATIVE, tuner="observe" if kind == "observe" else "none", **job)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", default="tensorflow", choices=("tensorflow", "mxnet"))
    p.add_argument("--model", default="cnn")
    p.add_argument("--rate", default="300mbit")
    p.add_argument("--steps", type=int, default=1325)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--devices", type=int, default=1, help="MXNet: CPU contexts per worker")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help=f"comma-separated, of {', '.join(KINDS)}; baseline is always run")
    p.add_argument("--out", default="runs/native-cost")
    args = p.parse_args(argv)
    kinds = ("baseline", *(k for k in KINDS[1:] if k in args.kinds.split(",")))
    if any(k not in KINDS for k in args.kinds.split(",")):
        p.error(f"--kinds must be of {', '.join(KINDS)}, got --kinds {args.kinds}")
    if args.steps < 3 * WINDOW or args.rounds < 1:
        p.error(f"--steps must be >= {3 * WINDOW} and --rounds >= 1, got --steps {args.steps} "
                f"--rounds {args.rounds}")
    if args.devices < 1 or (args.framework != "mxnet" and args.devices != 1):
        p.error(f"--devices must be >= 1, and 1 with TensorFlow, got --devices {args.devices}")
    label = args.model + (f"-{args.devices}dev" if args.devices > 1 else "")
    measured: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for r in range(args.rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            spec = job_spec(kind, f"{kind}-{args.framework[:2]}-{label}-{args.rate}-r{r}",
                            framework=args.framework, model=args.model, steps=args.steps,
                            devices=args.devices)
            run = run_jobs([spec], rate=args.rate, out=Path(args.out), echo=False)[0]
            speed, cpu = run.mean_speed(first=WINDOW + 1), run.cpu_s_per_step(first=WINDOW + 1)
            measured[kind].append((speed, cpu))
            print(f"round {r + 1} {kind:8s} {speed:8.1f} samples/s, rank 0 CPU "
                  f"{cpu * 1e3:.2f} ms a step", flush=True)
    base = [speed for speed, _ in measured["baseline"]]
    for kind in kinds:
        ratios = [speed / b for (speed, _), b in zip(measured[kind], base, strict=True)]
        cpu_ms = statistics.median(cpu for _, cpu in measured[kind]) * 1e3
        print(f"{kind:8s} / baseline: median {statistics.median(ratios):.3f} "
              f"(rounds {', '.join(f'{x:.3f}' for x in ratios)}), rank 0 CPU {cpu_ms:.2f} ms "
              "a step")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

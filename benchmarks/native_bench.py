"""AutoByte as shipped against the framework's own path, on models it never trained on.

    sudo .venv/bin/python benchmarks/native_bench.py                    # the default sweep
    sudo .venv/bin/python benchmarks/native_bench.py --frameworks tensorflow \\
        --models mobilenetv2 --rates 1gbit --rounds 1                     # one cell
    sudo .venv/bin/python benchmarks/native_bench.py --models mlp,cnn --rates 1gbit \
        --min-seconds 40                                                   # jobs of 40 s or more

For every framework x model x link rate, on the testbed (2 workers; MXNet adds a scheduler and
a server), each round runs one job after another: native (plain MultiWorkerMirroredStrategy /
native dist_sync) and AutoByte as shipped (its defaults, where it starts included, live meta
tuning; every window after the first counts, switches and warm-up included), in alternating
order (native first in even rounds, AutoByte first in odd ones, so a machine that drifts
between jobs weighs on both alike), then a grid job (``--grid none`` leaves it out) that
switches through fixed configurations, native among them, every ``--sweep-steps`` steps (its
windows after each switch are compared within the job, so the best fixed configuration and
native meet under the same conditions). Once per cell it also measures compute alone (every
worker trains on its own) and the link's rate, for the bound: max(compute alone, gradient bytes
over the link rate).

Prints one row per cell as it finishes (medians over rounds; ratios are taken per round, side by
side, with their lowest and highest; rank 0's CPU seconds per step, which other tenants of the
machine disturb less than wall time, for both) and appends it to ``--out`` (CSV), so a long
sweep keeps what it measured.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from common.bench import JobSpec, knobs_label, run_jobs
from common.progress import NATIVE
from common.units import parse_bytes, parse_rate

WORKERS = 2
BATCH = 32  # per worker (the demo workers' default)
COLUMNS = ["framework", "model", "rate", "rounds", "native", "autobyte", "autobyte/native",
           "ratio_min", "ratio_max", "cpu_native_ms", "cpu_autobyte_ms", "best_fixed",
           "best_fixed/native", "grid_native", "bound", "autobyte/bound",
           "native/bound", "compute_s", "comm_s", "link_mbit", "gradient_mb", "final_config",
           "steps"]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frameworks", default="tensorflow,mxnet")
    p.add_argument("--models", default="mobilenetv2,densenet,cnn,mlp,deep")
    p.add_argument("--rates", default="100mbit,300mbit,1gbit,3gbit")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=60, help="steps of the native and AutoByte jobs")
    p.add_argument("--min-seconds", type=float, default=0.0,
                   help="make the native and AutoByte jobs at least this long: a native job "
                        "of --steps per cell measures the step time first (a fast model's 60 "
                        "steps last a second, shorter than any real job's start-up)")
    p.add_argument("--window", type=int, default=5)
    p.add_argument("--grid", default="256KiB:1MiB,1MiB:4MiB,4MiB:16MiB,16MiB:32MiB,native",
                   help="fixed configurations of the grid job ('native' for native; the first "
                        "is a scheduled one, the job's start), or 'none' for no grid job")
    p.add_argument("--sweep-steps", type=int, default=10)
    p.add_argument("--out", default="runs/native-bench/results.csv")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per job")
    p.add_argument("--devices", type=int, default=1,
                   help="MXNet: CPU contexts per worker (the rows' model reads e.g. cnn-2dev)")
    p.add_argument("--servers", type=int, default=1,
                   help="MXNet: parameter servers, all on one host (the rows' model reads e.g. "
                        "cnn-2srv)")
    args = p.parse_args(argv)
    mxnet_only = args.frameworks.split(",") == ["mxnet"]
    if args.devices < 1 or (not mxnet_only and args.devices != 1):
        p.error(f"--devices must be >= 1, and 1 with TensorFlow, got devices={args.devices}")
    if args.servers < 1 or (not mxnet_only and args.servers != 1):
        p.error(f"--servers must be >= 1, and 1 with TensorFlow, got servers={args.servers}")
    if args.rounds < 1 or args.steps < 2 * args.window:
        p.error(f"--rounds must be >= 1 and --steps >= 2 windows, got rounds={args.rounds}, "
                f"steps={args.steps}")
    if args.grid.strip() == "none":
        args.grid_configs = []
        return args
    args.grid_configs = [NATIVE if g.strip() == "native" else
                         tuple(parse_bytes(x, "--grid") for x in g.split(":"))
                         for g in args.grid.split(",") if g.strip()]
    if not args.grid_configs or args.grid_configs[0] == NATIVE:
        p.error(f"--grid must start with a scheduled configuration (the grid job's start), "
                f"got --grid {args.grid!r}")
    return args


def link_rate(rate: str) -> float:
    """The shaped link's measured rate in bit/s (one 3 s flow between two hosts)."""
    from common.testbed import Testbed, measure_flow

    with Testbed(hosts=2, rate=rate) as tb:
        if not tb.shaped:
            return float("nan")
        return measure_flow(tb, 0, 1, seconds=3.0).rate()


def cell(args: argparse.Namespace, framework: str, model: str, rate: str,
         out: Path) -> dict[str, Any]:
    label = model + (f"-{args.devices}dev" if args.devices > 1 else "") + \
        (f"-{args.servers}srv" if args.servers > 1 else "")
    name = f"{framework[:2]}-{label}-{rate}"
    spec = functools.partial(JobSpec, framework=framework, model=model, devices=args.devices,
                             servers=args.servers)
    window = args.window
    per_round: list[dict[str, float]] = []
    final = ""
    steps = args.steps
    if args.min_seconds > 0:
        probe = run_jobs([spec(f"steps-{name}", steps=args.steps, window=window, baseline=True)],
                         rate=rate, out=out, timeout=args.timeout, echo=False)[0]
        per_step = WORKERS * BATCH / probe.mean_speed(first=window + 1)
        steps = max(steps, window * math.ceil(args.min_seconds / per_step / window))
        print(f"  {name}: {steps} steps a job ({per_step * 1e3:.0f} ms a native step)",
              flush=True)
    for r in range(args.rounds):
        order = ["native", "auto"] if r % 2 == 0 else ["auto", "native"]
        runs = {kind: run_jobs([spec(f"{kind}-{name}-r{r}", steps=steps, window=window,
                                     baseline=kind == "native", shipped=kind == "auto")],
                               rate=rate, out=out, timeout=args.timeout, echo=False)[0]
                for kind in order}
        native, auto = runs["native"], runs["auto"]
        row = {"native": native.mean_speed(first=window + 1),
               "autobyte": auto.mean_speed(first=window + 1),
               "cpu_native": native.cpu_s_per_step(first=window + 1),
               "cpu_autobyte": auto.cpu_s_per_step(first=window + 1),
               "best_fixed": math.nan, "grid_native": math.nan,
               "gradient_bytes": float(native.gradient_bytes or auto.gradient_bytes)}
        best_label = "-"
        if args.grid_configs:
            sweep = tuple(args.grid_configs)
            grid = run_jobs([spec(f"grid-{name}-r{r}", steps=len(sweep) * args.sweep_steps,
                                  window=window, start=sweep[0], sweep=sweep,
                                  sweep_steps=args.sweep_steps)],
                            rate=rate, out=out, timeout=args.timeout, echo=False)[0]
            measured = grid.by_config()
            labels = {knobs_label(*k) for k in sweep}
            fixed = {k: v for k, v in measured.items() if k in labels and k != "native"}
            best_label = max(fixed, key=lambda k: fixed[k])
            row.update(best_fixed=fixed[best_label],
                       grid_native=measured.get("native", math.nan))
        per_round.append(row)
        final = auto.windows[-1].config if auto.windows else "?"
        print(f"  {name} round {r + 1}: native {row['native']:.1f}, autobyte "
              f"{row['autobyte']:.1f} ({row['autobyte'] / row['native']:.3f}x, ends on "
              f"{final}; rank 0 CPU {row['cpu_native'] * 1e3:.1f} vs "
              f"{row['cpu_autobyte'] * 1e3:.1f} ms a step), best fixed {best_label} "
              f"{row['best_fixed']:.1f} vs grid native {row['grid_native']:.1f}", flush=True)
    local = run_jobs([spec(f"local-{name}", steps=4 * window, window=window, local=True)],
                     rate=rate, out=out, timeout=args.timeout, echo=False)[0]
    link = link_rate(rate)
    samples = WORKERS * BATCH
    compute_s = samples / local.mean_speed(first=window + 1)
    gradient = statistics.median(r["gradient_bytes"] for r in per_round)
    # bytes over the busiest link: a ring sends 2(n-1)/n of them per worker link; the servers'
    # host (all of them on one, the testbed's placement) carries every worker's
    factor = 2 * (WORKERS - 1) / WORKERS if framework == "tensorflow" else WORKERS
    comm_s = gradient * factor * 8 / link
    bound = samples / max(compute_s, comm_s if math.isfinite(comm_s) else 0.0)

    def median(key: str) -> float:
        return statistics.median(r[key] for r in per_round)

    def ratio(a: str, b: str) -> float:
        return statistics.median(r[a] / r[b] for r in per_round)

    return {"framework": framework, "model": label, "rate": rate, "rounds": args.rounds,
            "native": median("native"), "autobyte": median("autobyte"),
            "autobyte/native": ratio("autobyte", "native"),
            "ratio_min": min(r["autobyte"] / r["native"] for r in per_round),
            "ratio_max": max(r["autobyte"] / r["native"] for r in per_round),
            "cpu_native_ms": median("cpu_native") * 1e3,
            "cpu_autobyte_ms": median("cpu_autobyte") * 1e3, "best_fixed": median("best_fixed"),
            "best_fixed/native": ratio("best_fixed", "grid_native"),
            "grid_native": median("grid_native"), "bound": bound,
            "autobyte/bound": median("autobyte") / bound,
            "native/bound": median("native") / bound, "compute_s": compute_s, "comm_s": comm_s,
            "link_mbit": link / 1e6, "gradient_mb": gradient / 1e6, "final_config": final,
            "steps": steps}


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    new = not out.exists()
    if not new:
        with out.open(encoding="utf-8") as f:
            header = f.readline().strip().split(",")
        if header != [*COLUMNS, "date"]:
            print(f"native bench: {out} has other columns (an older version's); pass another "
                  f"--out", file=sys.stderr)
            return 2
    started = time.monotonic()
    print(f"native bench: {args.rounds} round(s), {args.steps} steps a job, grid "
          f"{args.grid} x {args.sweep_steps} steps; rates {args.rates}", flush=True)
    print("  ".join(f"{c:>12}" for c in COLUMNS), flush=True)
    failed = 0
    with out.open("a", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[*COLUMNS, "date"])
        if new:
            writer.writeheader()
        for framework in args.frameworks.split(","):
            for model in args.models.split(","):
                for rate in args.rates.split(","):
                    parse_rate(rate, "--rates")
                    try:
                        row = cell(args, framework, model, rate, out.parent / "jobs")
                    except Exception as exc:  # one failing cell must not lose the others
                        failed += 1
                        print(f"  {framework} {model} {rate}: FAILED: {exc}"[:2000], flush=True)
                        continue
                    print("  ".join(f"{fmt(row[c]):>12}" for c in COLUMNS), flush=True)
                    writer.writerow({**row, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                  time.gmtime())})
                    f.flush()
    print(f"native bench: done in {(time.monotonic() - started) / 60:.1f} min, results in "
          f"{out}{f'; {failed} cell(s) failed' if failed else ''}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())


"""``autobyte bench``: the paper's evaluation, one experiment or all of them.

    autobyte bench all --quick          # every experiment, reduced (about 20 minutes here)
    autobyte bench convergence          # one experiment: convergence, dynamic, joining,
                                        # sweep, overhead (testbed), scale (simulated)
    autobyte bench convergence --frameworks mxnet --models resnet --rates 1gbit --steps 60
                                        # on a model of second-long steps, at one rate
    autobyte bench convergence --frameworks tensorflow --models resnet --partitions 256KiB,1MiB,4MiB
                                        # a grid without small blocks, which on a large
                                        # model mean thousands of collectives a step

Each experiment trains real jobs on the local testbed (root: hosts in network namespaces with
shaped links; otherwise loopback, unshaped, and the rates mean nothing: it says so), prints a
table, and writes <out>/<experiment>.csv and .png; ``all`` also writes <out>/SUMMARY.md with
the date and the machine. What each experiment runs: ``common/bench/_experiments.py``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.errors import AutoByteError

__all__ = ["register"]

TESTBED = ("convergence", "dynamic", "joining", "sweep", "overhead")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("bench", help="the paper's evaluation on the testbed (CSV, PNG, "
                              "table)", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("experiment", choices=(*TESTBED, "scale", "all"),
                   help="the experiment to run, or all of them")
    p.add_argument("--quick", action="store_true",
                   help="the reduced version (one model, two rates, shorter jobs)")
    p.add_argument("--out", default="runs/bench", help="folder for CSV, PNG, logs (runs/bench)")
    p.add_argument("--frameworks", default="tensorflow,mxnet",
                   help="comma-separated, of tensorflow and mxnet (both)")
    p.add_argument("--models", default=None,
                   help="comma-separated demo models (the sweep runs each; convergence, "
                   "dynamic and overhead the first); default cnn, full: cnn,mlp,deep")
    p.add_argument("--rates", default=None,
                   help="comma-separated link rates (the sweep runs each; convergence and "
                   "overhead the first); default 100mbit,1gbit, full: 50mbit to 3gbit")
    p.add_argument("--steps", type=int, default=None,
                   help="steps of each convergence, dynamic and overhead job (each "
                   "experiment's own by default: fewer suit models of second-long steps)")
    p.add_argument("--rounds", type=int, default=1,
                   help="dynamic: run every method's job this often, in turn, each round in "
                   "the reverse order (medians of rounds, for a host whose speed drifts; 1)")
    p.add_argument("--partitions", default=None,
                   help="comma-separated partition sizes of the measured grid (each with "
                   "credits of 1, 4 and 16 partitions); default 16KiB,64KiB,256KiB,1MiB,4MiB")
    p.set_defaults(func=_run)


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}"


def _run(args: argparse.Namespace) -> int:
    from common.bench._experiments import EXPERIMENTS, Plan

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = [*TESTBED, "scale"] if args.experiment == "all" else [args.experiment]
    if any(n in TESTBED for n in names) and os.geteuid() != 0:
        print("autobyte bench: not root, so the testbed is loopback without shaping: the rates "
              "below are not applied and the comparison says little about networks")
    frameworks = _listed(args.frameworks, "--frameworks", "tensorflow and/or mxnet",
                         lambda f: f in ("tensorflow", "mxnet"))
    if args.rounds < 1:
        raise AutoByteError(f"--rounds must be at least 1, got --rounds {args.rounds}")
    plan = dataclasses.replace(Plan.make(args.quick, out), frameworks=frameworks,
                               job_steps=args.steps, rounds=args.rounds)
    if args.models is not None:
        from common.progress import MODELS

        plan = dataclasses.replace(plan, models=_listed(
            args.models, "--models", f"demo models of {', '.join(MODELS)}",
            lambda m: m in MODELS))
    if args.rates is not None:
        plan = dataclasses.replace(plan, rates=_listed(
            args.rates, "--rates", "link rates such as 1gbit", _is_rate))
    if args.partitions is not None:
        from common.config import MAX_PARTITION_BYTES, MIN_PARTITION_BYTES
        from common.units import format_bytes

        sizes = (f"sizes from {format_bytes(MIN_PARTITION_BYTES)} to "
                 f"{format_bytes(MAX_PARTITION_BYTES)}, such as 256KiB")
        plan = dataclasses.replace(plan, partitions=tuple(_partition(p) for p in _listed(
            args.partitions, "--partitions", sizes, _is_partition)))
    if args.steps is not None and args.steps < 2 * plan.window:
        raise AutoByteError(f"--steps must be at least two windows ({2 * plan.window}), got "
                            f"--steps {args.steps}")
    started = time.perf_counter()
    summary = [f"# AutoByte evaluation ({'quick' if args.quick else 'full'})", "",
               f"{time.strftime('%Y-%m-%d %H:%M')} on {_machine()}; "
               f"`autobyte bench {args.experiment}{' --quick' if args.quick else ''}`", ""]
    failed: list[str] = []
    for i, name in enumerate(names, start=1):
        print(f"\n== [{i}/{len(names)}] {name}  ({time.perf_counter() - started:.0f} s so far)",
              flush=True)
        if name == "scale":
            summary += _scale(out, args.quick)
            continue
        try:
            result = EXPERIMENTS[name](plan)
        except AutoByteError as exc:  # the others still run; the exit code says it failed
            failed.append(name)
            print(f"autobyte bench: {name} failed: {exc}", file=sys.stderr)
            summary += [f"## {name}", "", f"failed: {str(exc).splitlines()[0]}", ""]
            continue
        csv_path = out / f"{name}.csv"
        _write_csv(result.rows, csv_path)
        png = out / f"{name}.png"
        if result.plot is not None:
            result.plot(png)
        print(result.table)
        for note in result.notes:
            print(f"  {note}")
        print(f"  wrote {csv_path}" + (f" and {png}" if result.plot is not None else ""))
        summary += [f"## {name}", "", "```", result.table, "```", "",
                    *[f"- {n}" for n in result.notes], ""]
        if args.experiment == "all":  # after each experiment: an interrupted run keeps them
            _write_summary(out, summary)
    took = time.perf_counter() - started
    print(f"\nautobyte bench {args.experiment}: {took / 60:.1f} min")
    if args.experiment == "all":
        _write_summary(out, [*summary, f"Took {took / 60:.1f} min."])
        print(f"wrote {out / 'SUMMARY.md'}")
    if failed:
        print(f"autobyte bench: failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _listed(text: str, option: str, allowed: str,
            valid: Callable[[str], bool]) -> tuple[str, ...]:
    """A comma-separated option's items, each ``valid``, at least one."""
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    if not items or not all(valid(item) for item in items):
        raise AutoByteError(f"{option} must name {allowed}, got {option} {text!r}")
    return items


def _is_rate(text: str) -> bool:
    from common.units import parse_rate

    try:
        parse_rate(text, "--rates")
    except AutoByteError:
        return False
    return True


def _is_partition(text: str) -> bool:
    try:
        _partition(text)
    except AutoByteError:
        return False
    return True


def _partition(text: str) -> int:
    """A grid partition size, in the range ``Config`` allows ``partition_bytes``."""
    from common.config import Config

    flags = {"partition_bytes": "--partitions", "credit_bytes": "--partitions"}
    return Config.from_env({}, partition_bytes=text, credit_bytes=text,
                           flags=flags).partition_bytes


def _write_summary(out: Path, lines: list[str]) -> None:
    (out / "SUMMARY.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _scale(out: Path, quick: bool) -> list[str]:
    import contextlib
    import io

    from common.bench._scale import main as scale_main

    argv = ["--out", str(out)] + (["--workers", "8,32,128", "--models", "resnet50,vgg16"]
                                  if quick else [])
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        scale_main(argv)
    text = buffer.getvalue()
    print(text)
    return ["## scale (simulated)", "", "```", text.strip(), "```", ""]


def _write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    fields: list[str] = []
    for row in rows:
        fields += [k for k in row if k not in fields]
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)

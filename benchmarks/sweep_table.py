"""Where the side-by-side sweep stands: the latest measurement of each cell, as a table.

    .venv/bin/python benchmarks/sweep_table.py [--csv docs/bench/native-start.csv]

Reads the rows `benchmarks/native_bench.py` wrote (appended to docs/bench/native-start.csv)
and prints, per framework and model, AutoByte as shipped over native at each link rate (the
median of the cell's rounds, from its latest run), the lowest best-fixed ratio of the row
where a grid was measured, and the cells below ``--floor`` or not measured (variants such as
cnn-2dev, two devices a worker, or mlp-2min, 2-minute jobs, ran at one rate on purpose). A
cell's older runs stay in the CSV; docs/bench/README.md says what each run changed. No
framework needed.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys

RATES = ("100mbit", "300mbit", "1gbit", "3gbit")
NAMES = {"tensorflow": "TensorFlow", "mxnet": "MXNet"}


def latest(path: str) -> dict[tuple[str, str, str], dict[str, str]]:
    """The newest row of each (framework, model, rate)."""
    cells: dict[tuple[str, str, str], dict[str, str]] = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            if None in row or None in row.values():  # another format's row: columns shift
                raise ValueError(f"{path}, line {reader.line_num}: the row's fields do not "
                                 f"match the header's {len(reader.fieldnames or ())} columns")
            key = (row["framework"], row["model"], row["rate"])
            if key not in cells or row["date"] >= cells[key]["date"]:
                cells[key] = row
    return cells


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--csv", default="docs/bench/native-start.csv")
    p.add_argument("--floor", type=float, default=0.98,
                   help="AutoByte / native below this is listed (the issue's bar)")
    args = p.parse_args(argv)
    try:
        cells = latest(args.csv)
    except (OSError, ValueError) as exc:
        print(f"sweep_table: {exc}", file=sys.stderr)
        return 2
    rows = sorted({(fw, model) for fw, model, _ in cells},
                  key=lambda r: (r[0] != "tensorflow", r[1]))
    print("| framework | model | " + " | ".join(RATES) + " | best fixed / native, lowest |")
    print("|---" * (len(RATES) + 3) + "|")
    below, missing = [], []
    for fw, model in rows:
        ratios, fixed = [], []
        for rate in RATES:
            row = cells.get((fw, model, rate))
            if row is None:
                ratios.append("-")
                if "-" not in model:  # variants (cnn-2dev, mlp-2min) ran at one rate
                    missing.append(f"{NAMES[fw]} {model} {rate}")
                continue
            ratio = round(float(row["autobyte/native"]), 3)
            ratios.append(f"{ratio:.3f}")
            if ratio < args.floor:
                below.append(f"{NAMES[fw]} {model} {rate} ({ratio:.3f}, {row['date'][:10]})")
            if not math.isnan(float(row["best_fixed/native"])):
                fixed.append(float(row["best_fixed/native"]))
        lowest = f"{min(fixed):.3f}" if fixed else "-"
        print(f"| {NAMES[fw]} | {model} | " + " | ".join(ratios) + f" | {lowest} |")
    print(f"\nbelow {args.floor:g}: " + ("; ".join(below) or "none"))
    print("not measured: " + ("; ".join(missing) or "none"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

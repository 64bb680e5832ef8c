"""Each job's median window speed per link rate and configuration, from `autobyte bench` logs.

    .venv/bin/python benchmarks/window_medians.py runs/bench/jobs/dyn-*

A job's throughput mixes every rate and switch it ran; with the link alternating, the medians
per rate say what each configuration runs at each rate, so what a single configuration or a
switch per rate would reach can be worked out side by side with the job's own figure. The
first window (warm-up) is left out. Reads each job folder's windows.csv; no framework needed.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("jobs", nargs="+", type=Path, help="job folders holding windows.csv")
    args = p.parse_args(argv)
    for job in args.jobs:
        path = job / "windows.csv"
        if not path.is_file():
            print(f"{job}: no windows.csv (a job folder of `autobyte bench` holds one)",
                  file=sys.stderr)
            return 2
        with path.open(newline="", encoding="utf-8") as f:
            windows = list(csv.DictReader(f))[1:]
        by: dict[tuple[str, str], list[float]] = {}
        for w in windows:
            by.setdefault((w["rate"], w["config"]), []).append(float(w["mean_speed"]))
        cells = ", ".join(f"{rate} {config}: {statistics.median(v):.1f} ({len(v)} windows)"
                          for (rate, config), v in sorted(by.items()))
        print(f"{job.name}: {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

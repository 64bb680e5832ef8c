"""What the shipped meta tuner ranks first on a logged job, with the link rates as measured
and as given instead: whether a wrong link rate is why it picked what it picked.

    .venv/bin/python benchmarks/rank_whatif.py runs/bench/jobs/dyn-mx-autobyte \\
        [--steps 20] [--rates 1gbit,300mbit] [--top 5] [--servers 1]

Feeds the decision log's windows up to ``--steps`` to a fresh meta tuner as the coordinator
does (each window's statistics and its configuration's speed), then prints the tuner's score of
native and of its ``--top`` candidates; then again with every window's link rate replaced by
each of ``--rates``. Scores are samples/s as the tuner ranks them (``common.meta._prior.score``:
anchored on native's measured speed, the best mixed with the simulator's). Seconds; reads the
decision log only, no framework needed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from common.bench import knobs_label
from common.config import Config
from common.meta._tuner import create_meta_tuner
from common.stats import Observation
from common.units import format_rate, parse_rate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("job", type=Path, help="a job folder holding one decisions-*.jsonl")
    p.add_argument("--steps", type=int, default=20, help="windows that begin by this step")
    p.add_argument("--rates", default="", help="comma-separated link rates to try instead")
    p.add_argument("--top", type=int, default=5)
    p.add_argument("--servers", type=int, default=1, help="parameter servers (MXNet jobs)")
    args = p.parse_args(argv)
    logs = sorted(args.job.glob("decisions-*.jsonl"))
    if len(logs) != 1:
        print(f"{args.job}: expected one decisions-*.jsonl, found {len(logs)}", file=sys.stderr)
        return 2
    windows = []
    with logs[0].open(encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if record.get("type") == "window" and record["observation"]["first_step"] <= \
                    args.steps:
                windows.append(Observation.from_dict(record["observation"]))
    if not windows:
        print(f"{logs[0]}: no window begins by step {args.steps}", file=sys.stderr)
        return 2
    rates = [parse_rate(r) for r in args.rates.split(",") if r]
    for rate in [None, *rates]:
        tuner = create_meta_tuner(servers=args.servers)
        for obs in windows:
            if rate is not None:
                same = (rate,) * len(obs.ranks)
                obs = dataclasses.replace(obs, bandwidth_up=same, bandwidth_down=same)
            tuner.observe_window(obs)
            tuner.observe(obs.config, obs.speed)
        scores, points = tuner.scores(), tuner.candidates()
        native = next(s for s, c in zip(scores, points, strict=True) if not c.scheduling)
        best = [int(i) for i in np.argsort(-scores)[:args.top]]
        label = "as measured" if rate is None else f"at {format_rate(rate)}"
        print(f"{label}: native {native:.1f}; " + ", ".join(
            f"{_describe(points[i])} {scores[i]:.1f} ({scores[i] / native:.3f}x)"
            for i in best))
    return 0


def _describe(config: Config) -> str:
    return "native" if not config.scheduling else knobs_label(config.partition_bytes,
                                                              config.credit_bytes)


if __name__ == "__main__":
    sys.exit(main())

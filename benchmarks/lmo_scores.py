"""Leave-models-out predictions saved once, then scored every way the tuner could mix them.

    .venv/bin/python benchmarks/lmo_scores.py --model sim.keras --data datasets/testbed_v7.npz \\
        --runs '*-300mbit/*' --runs '*-3gbit/*' --out runs/lmo.npz      # ~4 min: fine-tunes
    .venv/bin/python benchmarks/lmo_scores.py --out runs/lmo.npz         # seconds: scores again

For each architecture of the testbed runs, a copy of ``--model`` is fine-tuned on the other
architectures' runs (as ``autobyte meta eval --leave-models-out`` does) and predicts every
window of the held-out runs as deployed. Saved per window: the network's speed, the speed
measured, native's measured speed in that job and the simulator's speed calibrated to it
(``common.meta._prior.simulated_speeds``, every candidate, no shortlist). The table then gives,
per framework, MAPE once native is measured (native's own windows excluded) and the guarded
pick (the faster measured of native and the top) for: the network anchored to native, the
simulator alone, the two mixed at several weights, and the tuner as shipped
(``common.meta._prior.score``). What `autobyte meta eval` prints for the
shipped mix is the same figure; this script adds the columns beside it.

With ``--costs`` and ``--cpu`` (block costs off and on the compute path, every pair) and
``--scales`` (the link's rate over the measured one; default the shipped ``LINK_SCALE``), the
simulator's speeds are also saved at each combination, and the prior's costs, scale and weight
are chosen as they would be for an architecture never seen: for each architecture, the
combination and weight (``CHOICE_WEIGHTS``, every window mixed) that score best on the other
architectures' runs, scored on its own:

    .venv/bin/python benchmarks/lmo_scores.py --model sim.keras --data datasets/testbed_v7.npz \
        --runs '*-300mbit/*' --runs '*-3gbit/*' --costs 250us,1ms --cpu 0,1ms --scales 1,2,3
"""

from __future__ import annotations

import argparse
import fnmatch
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from common.commands.simulate import parse_seconds
from common.meta import MetaModel
from common.meta._dataset import Dataset
from common.meta._features import anchor, speed_from_target
from common.meta._prior import score, simulated_speeds
from common.meta._train import FRAMEWORKS, arrays, fine_tune, predict_speeds
from common.tuners import NATIVE_BYTES

WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0)
CHOICE_WEIGHTS = (0.25, 0.4, 0.5, 0.6, 0.75)


def collect(args: argparse.Namespace) -> dict[str, NDArray[Any]]:
    data = Dataset.load(args.data)
    if args.runs:
        keep = np.array([any(fnmatch.fnmatch(r, p) for p in args.runs)
                         for r in data["job_run"]])
        data = data.select_jobs(keep | (data["job_run"] == ""))
    extra = Dataset.concat([Dataset.load(p) for p in args.extra]) if args.extra else None
    base = MetaModel.load(args.model)
    real = data.select_jobs(data["job_run"] != "")
    models = list(dict.fromkeys(real["job_model"].tolist()))
    scales: list[float | None] = [float(x) for x in args.scales.split(",") if x] or [None]
    grid = {f"sim {off:g} {cpu:g}" + ("" if scale is None else f" x{scale:g}"): (off, cpu, scale)
            for off in _seconds(args.costs, "--costs") for cpu in _seconds(args.cpu, "--cpu")
            for scale in scales}
    cols: dict[str, list[object]] = {k: [] for k in (
        "model", "framework", "job", "partition", "credit", "observed", "network",
        "native", "simulated", "shipped", "rate", "total_bytes", "layers", *grid)}
    job_id = 0
    for i, name in enumerate(models):
        t0 = time.monotonic()
        held = real.select_jobs(real["job_model"] == name)
        rest = real.select_jobs(real["job_model"] != name)
        train_on = (rest if extra is None else Dataset.concat([extra, rest])).as_deployed()
        tuned = fine_tune(base, train_on, epochs=args.epochs, seed=0, validation=0.0)
        for arch, framework in FRAMEWORKS.items():
            part = held.select_jobs(held["job_arch"] == arch)
            if not part.num_jobs:
                continue
            arr = arrays(part.as_deployed(), tuned.vocabulary)
            predicted = predict_speeds(tuned, arr)
            observed = speed_from_target(arr.target, arr.samples_per_step, arr.ref_s)
            for j in np.unique(arr.job):
                rows = np.flatnonzero(arr.job == j)
                natives = rows[arr.partition_bytes[rows] == NATIVE_BYTES]
                if not len(natives) or len(rows) == len(natives):
                    continue
                native = float(observed[natives[0]])
                job = arr.jobs[j]
                parts, credits = arr.partition_bytes[rows], arr.credit_bytes[rows]
                simulated = simulated_speeds(job, parts, credits, native)
                shipped = score(job, parts, credits, predicted[rows], native)
                at = {key: simulated_speeds(job, parts, credits, native, block_cost=(off, cpu),
                                            link_scale=scale)
                      for key, (off, cpu, scale) in grid.items()}
                for k, r in enumerate(rows):
                    for key, value in (("model", name), ("framework", framework),
                                       ("job", job_id), ("partition", parts[k]),
                                       ("credit", credits[k]), ("observed", observed[r]),
                                       ("network", predicted[r]), ("native", native),
                                       ("simulated", simulated[k]), ("shipped", shipped[k]),
                                       ("rate", max(job.bandwidth_down_bps,
                                                    job.bandwidth_up_bps)),
                                       ("total_bytes", sum(job.layer_bytes)),
                                       ("layers", job.num_layers),
                                       *((key, v[k]) for key, v in at.items())):
                        cols[key].append(value)
                job_id += 1
        print(f"{i + 1}/{len(models)} {name}: {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return {k: np.array(v) for k, v in cols.items()}


def _seconds(text: str, flag: str) -> list[float]:
    return [parse_seconds(t, flag) for t in text.split(",") if t]


def _anchored(d: dict[str, NDArray[Any]]) -> NDArray[np.float64]:
    """The network's speeds anchored to native's measurement, job by job."""
    anchored = np.empty_like(d["network"], dtype=np.float64)
    for j in np.unique(d["job"]):
        rows = np.flatnonzero(d["job"] == j)
        at = rows[d["partition"][rows] >= NATIVE_BYTES][0]
        anchored[rows] = anchor(d["network"][rows].astype(np.float64), float(d["network"][at]),
                                float(d["native"][at]))
    return anchored


def table(d: dict[str, NDArray[Any]]) -> None:
    anchored = _anchored(d)
    columns = {"anchored": anchored}
    for w in WEIGHTS[1:-1]:
        columns[f"mix {w:g}"] = np.exp((1 - w) * np.log(anchored) + w * np.log(d["simulated"]))
    columns["simulator"] = d["simulated"].astype(np.float64)
    columns["shipped"] = d["shipped"].astype(np.float64)
    print("| framework | model | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 2) + "|")
    for fw in ("tensorflow", "mxnet"):
        groups = [m for m in dict.fromkeys(d["model"][d["framework"] == fw].tolist())] + ["all"]
        for m in groups:
            sel = (d["framework"] == fw) & ((d["model"] == m) if m != "all" else True)
            cells = [_cell(d, sel, v) for v in columns.values()]
            name = f"**{m}**" if m == "all" else m
            print(f"| {fw} | {name} | " + " | ".join(cells) + " |")


def choose_left_out(d: dict[str, NDArray[Any]]) -> None:
    """Per framework: each architecture scored with the saved pair and weight that fit the
    other architectures best (MAPE once native is measured), and what was chosen."""
    anchored = _anchored(d)
    mixes = {(key, w): np.exp((1 - w) * np.log(anchored) + w * np.log(d[key].astype(float)))
             for key in d if key.startswith("sim ") for w in CHOICE_WEIGHTS}
    for fw in ("tensorflow", "mxnet"):
        errors: list[float] = []
        picks: list[float] = []
        chosen = []
        for m in dict.fromkeys(d["model"][d["framework"] == fw].tolist()):
            others = (d["framework"] == fw) & (d["model"] != m)
            best = min(mixes, key=lambda k: float(np.mean(_scores(d, others, mixes[k])[0])))
            held = _scores(d, (d["framework"] == fw) & (d["model"] == m), mixes[best])
            errors += held[0]
            picks += held[1]
            chosen.append(f"{m} {best[0][4:]} at {best[1]:g}")
        if errors:
            print(f"{fw}, chosen left out: MAPE {100 * np.mean(errors):.1f}%, guarded pick "
                  f"{100 * np.mean(picks):.1f}% ({'; '.join(chosen)})")


def _scores(d: dict[str, NDArray[Any]], sel: NDArray[Any],
            speeds: NDArray[Any]) -> tuple[list[float], list[float]]:
    """Each scheduled window's relative error once native is measured, and each job's
    guarded pick (the faster measured of native and the top, over the best)."""
    errors: list[float] = []
    picks: list[float] = []
    for j in np.unique(d["job"][sel]):
        rows = np.flatnonzero(d["job"] == j)
        others = rows[d["partition"][rows] < NATIVE_BYTES]
        native = rows[d["partition"][rows] >= NATIVE_BYTES][0]
        obs = d["observed"][rows]
        errors.extend(np.abs(speeds[others] - d["observed"][others]) / d["observed"][others])
        top = rows[int(np.argmax(speeds[rows]))]
        picks.append(max(d["observed"][top], d["observed"][native]) / obs.max())
    return errors, picks


def _cell(d: dict[str, NDArray[Any]], sel: NDArray[Any], speeds: NDArray[Any]) -> str:
    errors, picks = _scores(d, sel, speeds)
    if not errors:
        return "-"
    return f"{100 * np.mean(errors):.1f}%, {100 * np.mean(picks):.1f}%"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="the network to fine-tune (omit to score --out again)")
    p.add_argument("--data", default="datasets/testbed_v7.npz")
    p.add_argument("--extra", action="append", default=[],
                   help="simulated data to keep fine-tuning on (as --train-data of meta eval)")
    p.add_argument("--runs", action="append", metavar="PATTERN")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--costs", default="", help="block costs off the compute path to save the "
                   "simulator's speeds at, comma-separated (with --model)")
    p.add_argument("--cpu", default="0", help="block costs on the compute path, likewise")
    p.add_argument("--scales", default="", help="link rates over the measured one, likewise "
                   "(default: the shipped LINK_SCALE)")
    p.add_argument("--out", default="runs/lmo.npz")
    args = p.parse_args(argv)
    for text in filter(None, args.scales.split(",")):
        try:
            ok = math.isfinite(float(text)) and float(text) > 0
        except ValueError:
            ok = False
        if not ok:
            p.error(f"--scales takes numbers > 0, got {text!r}")
    out = Path(args.out)
    if args.model:
        d = collect(args)
        out.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(out, **d)
    elif not out.exists():
        p.error(f"--out {out} does not exist: give --model to make it")
    d = dict(np.load(out, allow_pickle=False))
    print(f"{len(np.unique(d['job']))} jobs, {len(d['job'])} windows; cells: MAPE once native "
          f"is measured, guarded pick")
    table(d)
    if any(key.startswith("sim ") for key in d):
        choose_left_out(d)
    return 0 if math.isfinite(float(np.mean(d["observed"]))) else 1


if __name__ == "__main__":
    sys.exit(main())

"""``autobyte report LOG``: what a job's tuning did, from its decision log, in text and a plot.

    autobyte report runs/demo-20261124-025650/tensorflow        # the newest log in a folder
    autobyte report autobyte-logs/decisions-20261122-211500-4242.jsonl --plot run.png

Prints the job, how the speed moved from the first windows to the last, each configuration's
speed per stretch of the same conditions (a link rate the bench or demo set, or until the loop
saw the speed change threefold): only configurations of one stretch are compared, and every
decision with the step it took effect and whether its predicted gain came true. The PNG (next
to the log unless --plot says where) plots speed against time (steps on the upper axis) with
link-rate changes, decisions where they took effect, and predictions that missed by more than
the job's adapt threshold; partition and credit below.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from common.units import format_bytes

__all__ = ["Decided", "Stretch", "decisions", "load", "plot", "register", "stretches",
           "summarize"]

Record = dict[str, Any]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="summarise a decision log and plot speed and configuration",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="decision log (decisions-*.jsonl) written by the "
                                    "coordinator, or a folder: its newest log")
    parser.add_argument("--plot", metavar="PNG",
                        help="PNG to write, in an existing folder (default: the log's name "
                             "with .png)")
    parser.add_argument("--no-plot", action="store_true", help="print the summary only")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    path = resolve(Path(args.log))
    records = load(path)
    print(summarize(records))
    if not args.no_plot:
        out = Path(args.plot) if args.plot else path.with_suffix(".png")
        if not out.parent.is_dir():
            raise ConfigError(f"--plot {str(out)!r}: folder {str(out.parent)!r} does not "
                              "exist (create it, or leave --plot out to write next to the log)")
        plot(records, out)
        print(f"plot: {out}")
    return 0


def resolve(path: Path) -> Path:
    """``path`` itself, or for a folder its newest ``decisions-*.jsonl`` (said so)."""
    if path.is_dir():
        logs = sorted(path.glob("decisions-*.jsonl"), key=lambda p: p.stat().st_mtime)
        if not logs:
            raise ConfigError(f"{str(path)!r} is a folder without decision logs "
                              "(decisions-*.jsonl); pass a log file or the folder of a job")
        if len(logs) > 1:
            print(f"report: {logs[-1]} (the newest of {len(logs)} logs in {path})")
        return logs[-1]
    if not path.exists():
        raise ConfigError(f"decision log {str(path)!r} does not exist")
    return path


def load(path: Path) -> list[Record]:
    """The log's records; a log without one measured window is refused (not a decision log,
    empty, or the job stopped before its first window)."""
    from common.decision_log import read_log

    try:
        records = read_log(path)
    except UnicodeDecodeError:
        raise ConfigError(f"{str(path)!r} is not a decision log (not text)") from None
    if not records:
        raise ConfigError(f"{str(path)!r} holds no decision records (empty or not a decision "
                          "log written by the coordinator)")
    if not _measured(records):
        raise ConfigError(f"{str(path)!r} has no measured window ({len(records)} record(s)): "
                          "the job stopped before the coordinator merged a window")
    return records


def _knobs(config: dict[str, Any]) -> str:
    text = f"{format_bytes(config['partition_bytes'])}/{format_bytes(config['credit_bytes'])}"
    return text if config.get("scheduling", True) else "native"


def _key(config: dict[str, Any]) -> tuple[int, int, bool]:
    scheduling = bool(config.get("scheduling", True))
    if not scheduling:
        return (0, 0, False)
    return (int(config["partition_bytes"]), int(config["credit_bytes"]), True)


def _measured(records: Sequence[Record]) -> list[Record]:
    return [r for r in records if r.get("type") == "window" and r.get("action") != "skip"
            and isinstance(r.get("speed"), int | float) and "first_step" in r]


def _adapt_threshold(records: Sequence[Record]) -> float:
    job = next((r for r in records if r.get("type") == "job"), None)
    try:
        return float(job["config"]["adapt_threshold"]) if job else 0.10
    except (KeyError, TypeError, ValueError):
        return 0.10


def _step_at(windows: Sequence[Record], when: float) -> int:
    """The first step of the first window logged at or after ``when`` (a time)."""
    for w in windows:
        if w.get("time", math.inf) >= when:
            return int(w["first_step"])
    return int(windows[-1]["last_step"]) + 1


@dataclasses.dataclass(frozen=True)
class Stretch:
    """Steps [first, last] run under the same conditions; ``why`` says what began it."""

    first: int
    last: int
    why: str
    windows: tuple[Record, ...]


def stretches(records: Sequence[Record]) -> list[Stretch]:
    """The job cut where conditions changed: a link rate set by the bench or demo (``link``
    events) or the loop's ``conditions_changed`` (the speed in force moved threefold)."""
    windows = _measured(records)
    cuts: dict[int, str] = {}
    for r in records:
        if r.get("type") != "event":
            continue
        if r.get("event") == "link":
            step = int(r["step"]) if isinstance(r.get("step"), int) else \
                _step_at(windows, float(r.get("time", 0.0)))
            cuts[step] = f"link {r.get('rate', '?')}"
        elif r.get("event") == "conditions_changed":
            step = _step_at(windows, float(r.get("time", 0.0)))
            cuts.setdefault(step, "speed moved threefold")
    first = int(windows[0]["first_step"])
    bounds = sorted((s, why) for s, why in cuts.items() if s > first)
    start_why = cuts.get(first) or next((why for s, why in sorted(cuts.items()) if s <= first),
                                        "job start")
    out: list[Stretch] = []
    begin, why = first, start_why
    for step, next_why in [*bounds, (1 << 62, "")]:
        rows = tuple(w for w in windows if begin <= w["first_step"] < step)
        if rows:
            out.append(Stretch(begin, int(rows[-1]["last_step"]), why, rows))
        begin, why = step, next_why
    return out


@dataclasses.dataclass(frozen=True)
class Decided:
    """One decision: where it took effect (None: never applied), its predicted speed and the
    speed measured on it until the next change."""

    id: int
    action: str
    reason: str
    planned_step: int
    config: dict[str, Any]
    before: float
    effect_step: int | None
    predicted: float | None
    measured: float | None

    @property
    def predicted_gain(self) -> float | None:
        return None if self.predicted is None or self.before <= 0 else \
            self.predicted / self.before - 1.0

    @property
    def measured_gain(self) -> float | None:
        return None if self.measured is None or self.before <= 0 else \
            self.measured / self.before - 1.0

    def missed(self, threshold: float) -> bool:
        """The prediction of the new configuration's speed missed the measurement by more
        than ``threshold`` (relative to the measurement)."""
        return self.predicted is not None and self.measured is not None and \
            self.measured > 0 and abs(self.predicted - self.measured) / self.measured > threshold


def decisions(records: Sequence[Record]) -> list[Decided]:
    """Every decision, its measured speed taken within the stretch of conditions it took
    effect in (a probe just before a link change is not judged at the new rate)."""
    windows = _measured(records)
    cuts = sorted(s.first for s in stretches(records)[1:])
    out = []
    for i, w in enumerate(windows):
        if w.get("decision_id") is None or w.get("target_step") is None:
            continue
        target, key = int(w["target_step"]), _key(w["next_config"])
        later = [x for x in windows[i + 1:] if x["first_step"] >= target]
        effect = later[0] if later and _key(later[0]["config"]) == key else None
        run: list[float] = []
        if effect is not None:
            end = next((c for c in cuts if c > effect["first_step"]), 1 << 62)
            for x in later:
                if _key(x["config"]) != key or x["first_step"] >= end:
                    break
                run.append(float(x["speed"]))
        predicted = next((float(c["predicted"]) for c in w.get("candidates") or ()
                          if isinstance(c, dict) and c.get("predicted") is not None
                          and _key(c["config"]) == key), None)
        settled = run[1:] or run  # the first window on it carries the switch
        out.append(Decided(int(w["decision_id"]), str(w.get("action")), str(w.get("reason")),
                           target, w["next_config"], float(w["speed"]),
                           None if effect is None else int(effect["first_step"]), predicted,
                           statistics.median(settled) if settled else None))
    return out


def summarize(records: Sequence[Record]) -> str:
    """The report's text: job, speed first vs last, configurations per stretch of the same
    conditions, decisions with where they took effect and how their predictions held."""
    lines: list[str] = []
    job = next((r for r in records if r.get("type") == "job"), None)
    if job is not None:
        lines.append(f"job: {job.get('num_workers')} worker(s), tuner {job.get('tuner')}, "
                     f"trigger {job.get('trigger')}, start {_knobs(job['config'])} "
                     "(partition/credit)")
    windows = _measured(records)
    skipped = sum(1 for r in records if r.get("type") == "window" and r.get("action") == "skip")
    first, last = windows[0], windows[-1]
    seconds = float(last.get("time", 0.0)) - float(first.get("time", 0.0))
    lines.append(f"windows: {len(windows)} measured ({skipped} skipped), steps "
                 f"{first['first_step']}..{last['last_step']} in {seconds:.0f} s")
    k = min(3, len(windows))
    start = statistics.fmean(w["speed"] for w in windows[:k])
    end = statistics.fmean(w["speed"] for w in windows[-k:])
    lines.append(f"speed: first {k} window(s) {start:.1f}, last {k} {end:.1f} samples/s "
                 f"({end / start:.2f}x)" if start > 0 else "speed: no samples")
    for s in stretches(records):
        by_config: dict[str, list[float]] = {}
        for w in s.windows:
            by_config.setdefault(_knobs(w["config"]), []).append(float(w["speed"]))
        lines.append("")
        lines.append(f"steps {s.first}..{s.last} ({s.why}): configurations compared under "
                     "the same conditions" if len(by_config) > 1 else
                     f"steps {s.first}..{s.last} ({s.why}): one configuration")
        best = max(by_config, key=lambda c: statistics.median(by_config[c]))
        lines.append(f"{'partition/credit':>20}  {'windows':>7}  {'median samples/s':>16}")
        for config, speeds in by_config.items():
            mark = "  <- best" if config == best and len(by_config) > 1 else ""
            lines.append(f"{config:>20}  {len(speeds):>7}  {statistics.median(speeds):>16.1f}"
                         f"{mark}")
    decided = decisions(records)
    threshold = _adapt_threshold(records)
    adapts = sum(1 for r in records if r.get("type") == "event" and r.get("event") == "adapt")
    guards = sum(1 for r in records if r.get("type") == "event" and r.get("event") == "guard")
    missed = [d for d in decided if d.missed(threshold)]
    lines.append("")
    lines.append(f"decisions: {len(decided)} ({sum(d.action == 'switch' for d in decided)} "
                 f"switch, {sum(d.action == 'explore' for d in decided)} explore; the guard "
                 f"acted {guards} time(s)), predictor adaptations: {adapts}, predictions "
                 f"missed by more than {threshold:.0%}: {len(missed)}")
    for d in decided:
        where = f"took effect at step {d.effect_step}" if d.effect_step is not None else \
            f"planned for step {d.planned_step}, not applied"
        lines.append(f"  #{d.id} {d.action} to {_knobs(d.config)}, {where} - {d.reason}")
        if d.predicted_gain is not None and d.measured_gain is not None:
            flag = "  MISSED" if d.missed(threshold) else ""
            lines.append(f"      predicted {d.predicted_gain:+.0%}, measured "
                         f"{d.measured_gain:+.0%} against {d.before:.1f} samples/s before"
                         f"{flag}")
    stopped = next((r for r in records if r.get("type") == "event"
                    and r.get("event") == "coordinator_stopped"), None)
    if stopped is not None and stopped.get("rejected"):
        lines.append(f"rejected messages: {stopped['rejected']}")
    return "\n".join(lines)


def plot(records: Sequence[Record], path: Path) -> None:
    """Speed (top) and partition/credit (bottom, log scale) against seconds since the job
    started, steps on the upper axis; link-rate changes, decisions where they took effect and
    predictions that missed by more than the adapt threshold marked."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'autobyte[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FuncFormatter

    windows = _measured(records)
    job = next((r for r in records if r.get("type") == "job"), None)
    t0 = float((job or windows[0]).get("time", 0.0))
    times = np.array([float(w.get("time", t0)) - t0 for w in windows])
    ends = np.array([float(w["last_step"]) for w in windows])

    def step_of(t: Any) -> Any:
        return np.interp(t, times, ends)

    def time_of(step: Any) -> Any:
        return np.interp(step, ends, times)

    threshold = _adapt_threshold(records)
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(10, 6.5))
    try:
        speeds = [float(w["speed"]) for w in windows]
        top.plot(times, speeds, marker=".", label="measured")
        predicted = [math.nan if w.get("predicted") is None else float(w["predicted"])
                     for w in windows]
        if any(p == p for p in predicted):  # NaN breaks the line where nothing was predicted
            top.plot(times, predicted, linestyle=":", marker="x", label="predicted")
            miss = [(t, p) for t, p, s in zip(times, predicted, speeds, strict=True)
                    if p == p and s > 0 and abs(p - s) / s > threshold]
            if miss:
                top.scatter(*zip(*miss, strict=True), s=80, facecolors="none",
                            edgecolors="red", label=f"prediction off > {threshold:.0%}")
        for d in decisions(records):
            if d.effect_step is not None:
                t = float(time_of(d.effect_step))
                for ax in (top, bottom):
                    ax.axvline(t, color="grey", alpha=0.4, linewidth=1)
        for s in stretches(records)[1:]:
            t = float(time_of(s.first))
            for ax in (top, bottom):
                ax.axvline(t, color="red", linestyle="--", linewidth=1)
            top.annotate(s.why, (t, 1.0), xycoords=("data", "axes fraction"),
                         xytext=(3, -12), textcoords="offset points", color="red")
        top.set_ylabel("samples/s")
        top.legend(loc="best")
        if len(times) > 1 and np.all(np.diff(times) > 0):
            steps_axis = top.secondary_xaxis("top", functions=(step_of, time_of))
            steps_axis.set_xlabel("step")
        top.set_title("AutoByte: speed and configuration (grey: decisions took effect)",
                      pad=28)
        edges = [float(time_of(w["first_step"])) for w in windows]
        for field, label in (("partition_bytes", "partition"), ("credit_bytes", "credit")):
            bottom.step(edges, [w["config"][field] if w["config"].get("scheduling", True)
                                else math.nan for w in windows], where="post", label=label)
        ends_t = [*edges[1:], float(times[-1])]
        for i, w in enumerate(windows):
            if not w["config"].get("scheduling", True):
                bottom.axvspan(edges[i], ends_t[i], color="black", alpha=0.12, linewidth=0,
                               label="native" if not any(
                                   not x["config"].get("scheduling", True)
                                   for x in windows[:i]) else None)
        bottom.set_yscale("log", base=2)
        bottom.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_bytes(v)))
        bottom.set_ylabel("bytes")
        bottom.set_xlabel("seconds since the job started")
        bottom.legend(loc="best")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)

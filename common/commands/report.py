"""``autobyte report LOG``: summarise a decision log and plot speed and configuration.

    autobyte report autobyte-logs/decisions-20261122-211500-4242.jsonl
    autobyte report decisions.jsonl --plot run.png

Prints the job, how the speed moved from the first windows to the last, each configuration's
measured speed, and every decision with its reason; writes a PNG (next to the log unless
--plot says where): speed over steps on top, partition and credit size below, decisions
marked.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from common.units import format_bytes

__all__ = ["plot", "register", "summarize"]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report", help="summarise a decision log and plot speed and configuration",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="decision log (JSONL) written by the coordinator")
    parser.add_argument("--plot", help="PNG to write (default: the log's name with .png)")
    parser.add_argument("--no-plot", action="store_true", help="print the summary only")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from common.decision_log import read_log

    path = Path(args.log)
    if not path.is_file():
        raise ConfigError(f"decision log {str(path)!r} does not exist")
    records = read_log(path)
    print(summarize(records))
    if not args.no_plot:
        out = Path(args.plot) if args.plot else path.with_suffix(".png")
        plot(records, out)
        print(f"plot: {out}")
    return 0


def _knobs(config: dict[str, Any]) -> str:
    text = f"{format_bytes(config['partition_bytes'])}/{format_bytes(config['credit_bytes'])}"
    return text if config.get("scheduling", True) else text + " (off)"


def _measured(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == "window" and r.get("action") != "skip"
            and r.get("speed") is not None]


def summarize(records: Sequence[dict[str, Any]]) -> str:
    """The report's text: job, speed first vs last, per-configuration table, decisions."""
    lines: list[str] = []
    job = next((r for r in records if r["type"] == "job"), None)
    if job is not None:
        lines.append(f"job: {job.get('num_workers')} worker(s), tuner {job.get('tuner')}, "
                     f"trigger {job.get('trigger')}, start {_knobs(job['config'])} "
                     "(partition/credit)")
    windows = _measured(records)
    if not windows:
        lines.append("no measured windows in this log")
        return "\n".join(lines)
    skipped = sum(1 for r in records if r["type"] == "window" and r.get("action") == "skip")
    first, last = windows[0], windows[-1]
    lines.append(f"windows: {len(windows)} measured ({skipped} skipped), steps "
                 f"{first['first_step']}..{last['last_step']}")
    k = min(3, len(windows))
    start = statistics.fmean(w["speed"] for w in windows[:k])
    end = statistics.fmean(w["speed"] for w in windows[-k:])
    lines.append(f"speed: first {k} window(s) {start:.1f}, last {k} {end:.1f} samples/s "
                 f"({end / start:.2f}x)" if start > 0 else "speed: no samples")
    by_config: dict[str, list[float]] = {}
    for w in windows:
        by_config.setdefault(_knobs(w["config"]), []).append(w["speed"])
    best = max(by_config, key=lambda c: statistics.fmean(by_config[c]))
    lines.append("")
    lines.append(f"{'partition/credit':>20}  {'windows':>7}  {'mean samples/s':>14}")
    for config, speeds in by_config.items():
        mark = "  <- best" if config == best else ""
        lines.append(f"{config:>20}  {len(speeds):>7}  {statistics.fmean(speeds):>14.1f}{mark}")
    decided = [w for w in windows if w.get("decision_id") is not None]
    adapts = sum(1 for r in records if r["type"] == "event" and r.get("event") == "adapt")
    lines.append("")
    lines.append(f"decisions: {len(decided)} ({sum(w['action'] == 'switch' for w in decided)} "
                 f"switch, {sum(w['action'] == 'explore' for w in decided)} explore), "
                 f"adaptations requested: {adapts}")
    for w in decided:
        lines.append(f"  #{w['decision_id']} at step {w['target_step']}: {w['action']} to "
                     f"{_knobs(w['next_config'])} - {w['reason']}")
    stopped = next((r for r in records if r["type"] == "event"
                    and r.get("event") == "coordinator_stopped"), None)
    if stopped is not None and stopped.get("rejected"):
        lines.append(f"rejected messages: {stopped['rejected']}")
    return "\n".join(lines)


def plot(records: Sequence[dict[str, Any]], path: Path,
         marks: Sequence[tuple[float, str]] = ()) -> None:
    """Speed (top) and partition/credit (bottom, log scale) over steps; decisions marked, and
    ``marks`` (step, label), e.g. when the link rate changed."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("plotting needs matplotlib: pip install 'autobyte[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    windows = _measured(records)
    steps = [(w["first_step"] + w["last_step"]) / 2 for w in windows]
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    try:
        top.plot(steps, [w["speed"] for w in windows], marker=".", label="observed")
        predicted = [float("nan") if w.get("predicted") is None else w["predicted"]
                     for w in windows]
        if any(p == p for p in predicted):  # NaN breaks the line where nothing was predicted
            top.plot(steps, predicted, linestyle=":", marker="x", label="predicted")
        for w in windows:
            if w.get("target_step") is not None:
                for ax in (top, bottom):
                    ax.axvline(w["target_step"], color="grey", alpha=0.3, linewidth=1)
        for step, label in marks:
            for ax in (top, bottom):
                ax.axvline(step, color="red", linestyle="--", linewidth=1)
            top.annotate(label, (step, 1.0), xycoords=("data", "axes fraction"),
                         xytext=(3, -12), textcoords="offset points", color="red")
        top.set_ylabel("samples/s")
        top.legend(loc="best")
        top.set_title("AutoByte: speed and configuration (grey: decisions take effect)")
        edges = [w["first_step"] for w in windows]
        mib = 1024.0**2
        bottom.step(edges, [w["config"]["partition_bytes"] / mib for w in windows],
                    where="post", label="partition")
        bottom.step(edges, [w["config"]["credit_bytes"] / mib for w in windows],
                    where="post", label="credit")
        bottom.set_yscale("log", base=2)
        bottom.set_ylabel("MiB")
        bottom.set_xlabel("step")
        bottom.legend(loc="best")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)

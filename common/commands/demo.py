"""``autobyte demo``: a short real training job per framework on the local testbed, tuned live.

    autobyte demo                                  # both frameworks, 1gbit -> 100mbit mid-run
    autobyte demo --framework tensorflow --steps 120 --rates 1gbit,200mbit

Each job (2 workers; MXNet also a scheduler and a server) starts from a poor configuration
with live tuning on; halfway the link rate changes. Progress is shown per window; at the end
a table puts each phase's first window against its last, and ``autobyte report``'s plot is
drawn from the job's decision log. As root the hosts are network namespaces with shaped links;
otherwise everything runs on loopback, unshaped, and the rate change is skipped (said so).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from common.progress import parse, worker_env
from common.units import parse_bytes, parse_rate

__all__ = ["Phase", "register", "run_demo"]

FRAMEWORKS = {"tensorflow": "autobyte_tf.demo", "mxnet": "autobyte_mx.demo"}
WORKERS = 2


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo", help="short real training runs tuned live while the link rate changes",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--framework", choices=(*FRAMEWORKS, "all"), default="all",
                   help="which framework's job to run (default all: one after the other)")
    p.add_argument("--steps", type=int, default=200, help="training steps per job (200)")
    p.add_argument("--window", type=int, default=5, help="steps per statistics window (5)")
    p.add_argument("--rates", default="1gbit,100mbit",
                   help="link rate at the start and after the switch (1gbit,100mbit)")
    p.add_argument("--switch-step", type=int,
                   help="step at which the rate changes (default: half of --steps)")
    p.add_argument("--tuner", default="meta", help="tuner (meta, bayesian, grid, default)")
    p.add_argument("--start", default="16KiB:16KiB", metavar="PARTITION:CREDIT",
                   help="the poor configuration the job starts from (16KiB:16KiB)")
    p.add_argument("--out", help="folder for logs and plots (runs/demo-<time>)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per job (600)")
    p.set_defaults(func=_run)


@dataclasses.dataclass(frozen=True)
class Phase:
    """One rate of one job: its first and last windows as rank 0 measured them."""

    framework: str
    rate: str
    first_step: int
    last_step: int
    start_config: str
    start_speed: float
    end_config: str
    end_speed: float
    end_windows: int


@dataclasses.dataclass
class JobResult:
    framework: str
    phases: list[Phase]
    agree: bool
    log: Path | None
    plot: Path | None
    switched_at: int | None


def _run(args: argparse.Namespace) -> int:
    frameworks = list(FRAMEWORKS) if args.framework == "all" else [args.framework]
    out = Path(args.out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    results = run_demo(frameworks=frameworks, steps=args.steps, window=args.window,
                       rates=args.rates, switch_step=args.switch_step, tuner=args.tuner,
                       start=args.start, out=out, timeout=args.timeout)
    print()
    print(summary_table(results))
    return 0 if all(r.agree for r in results) else 1


def run_demo(*, frameworks: list[str], steps: int, window: int, rates: str,
             switch_step: int | None, tuner: str, start: str, out: Path,
             timeout: float) -> list[JobResult]:
    rate_list = [r.strip() for r in rates.split(",") if r.strip()]
    if len(rate_list) not in (1, 2):
        raise ConfigError(f"--rates must be one rate or two (start,after), got {rates!r}")
    for r in rate_list:
        parse_rate(r, "--rates")
    if steps < 4 * window or window < 1:
        raise ConfigError(f"--steps must be at least 4 windows and --window >= 1, got "
                          f"--steps {steps}, --window {window}")
    switch = steps // 2 if switch_step is None else switch_step
    if not 0 < switch < steps:
        raise ConfigError(f"--switch-step must be in (0, {steps}), got {switch}")
    from common.config import Config

    partition, _, credit = start.partition(":")
    partition_bytes = parse_bytes(partition, "--start partition")
    credit_bytes = parse_bytes(credit or partition, "--start credit")
    Config.from_env({}, partition_bytes=partition_bytes, credit_bytes=credit_bytes, tuner=tuner,
                    window_steps=window, flags={
                        "partition_bytes": "--start partition", "credit_bytes": "--start credit",
                        "tuner": "--tuner", "window_steps": "--window"})  # before anything runs
    env = {"AUTOBYTE_TUNER": tuner, "AUTOBYTE_WINDOW_STEPS": str(window),
           "AUTOBYTE_PARTITION_BYTES": str(partition_bytes),
           "AUTOBYTE_CREDIT_BYTES": str(credit_bytes), **worker_env()}
    return [_run_job(fw, steps=steps, rates=rate_list, switch=switch, env=env, out=out / fw,
                     timeout=timeout) for fw in frameworks]


class _Watcher:
    """The launcher's stream: shows rank 0's progress and changes the rate at the switch."""

    def __init__(self, framework: str, steps: int, on_step: Any) -> None:
        self.framework, self.steps = framework, steps
        self.on_step = on_step
        self.records: list[dict[str, Any]] = []
        self.started = time.perf_counter()

    def write(self, text: str) -> int:
        record = parse(text)
        if record is None:
            return len(text)
        self.records.append(record)
        try:
            kind = record["kind"]
            elapsed = time.perf_counter() - self.started
            if kind == "progress":
                rate = self.on_step(int(record["step"]))
                print(f"  {self.framework:10} step {record['step']:>4}/{self.steps}  "
                      f"{rate:>8}  {record['config']:<32} {record['samples_per_s']:8.1f} "
                      f"samples/s  [{elapsed:5.0f} s]", flush=True)
            elif kind == "start" and record.get("rank") == 0:
                print(f"  {self.framework:10} started: {record['workers']} workers, "
                      f"{record['config']}, live tuning: {record['tuning']}", flush=True)
        except (KeyError, TypeError, ValueError):
            pass  # a malformed record must never stop the stream
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()


def _run_job(framework: str, *, steps: int, rates: list[str], switch: int,
             env: dict[str, str], out: Path, timeout: float) -> JobResult:
    from common.commands.report import plot
    from common.decision_log import DecisionLog, read_log
    from common.launch import launch
    from common.testbed import Testbed

    out.mkdir(parents=True, exist_ok=True)
    hosts = WORKERS if framework == "tensorflow" else WORKERS + 1
    rate_now, switched, switched_at = rates[0], None, 0.0
    with Testbed(hosts=hosts, rate=rates[0]) as tb:
        print(f"\n{framework}: {tb.describe()}", flush=True)
        if len(rates) > 1 and not tb.shaped:
            print(f"  (loopback: the rate change to {rates[1]} at step {switch} is skipped)")

        def on_step(step: int) -> str:
            nonlocal rate_now, switched, switched_at
            if len(rates) > 1 and tb.shaped and switched is None and step >= switch:
                tb.set_rate(rates[1])
                rate_now, switched, switched_at = rates[1], step, time.time()
                print(f"  {framework:10} step {step:>4}: link rate -> {rates[1]}", flush=True)
            return rate_now if tb.shaped else "loopback"

        watcher = _Watcher(framework, steps, on_step)
        result = launch(framework=framework,
                        command=[sys.executable, "-m", FRAMEWORKS[framework],
                                 "--steps", str(steps)],
                        workers=WORKERS, env={**env, "AUTOBYTE_LOG_DIR": str(out)},
                        testbed=tb, timeout=timeout, stream=watcher)
    for name, proc in result.processes.items():  # the last lines of each, for a look later
        (out / f"{name}.log").write_text(proc.output, encoding="utf-8")
    if result.returncode != 0:
        tails = "\n".join(f"--- {name} (exit {p.returncode})\n{p.output[-2000:]}"
                          for name, p in result.processes.items())
        raise ConfigError(f"the {framework} demo job failed (exit {result.returncode}):\n{tails}")
    done = [r for r in watcher.records if r.get("kind") == "done"]
    checksums = {r["rank"]: r["checksum"] for r in done}
    agree = len(checksums) == WORKERS and len(set(checksums.values())) == 1
    logs = sorted(out.glob("decisions-*.jsonl"))
    if logs and tb.shaped:  # the log records the link's rates, for the report
        with DecisionLog(logs[-1]) as log:
            log.write("event", {"event": "link", "step": 0, "rate": rates[0]})
            if switched is not None:
                log.write("event", {"event": "link", "step": switched, "rate": rates[1],
                                    "time": switched_at})
    records = read_log(logs[-1]) if logs else []
    picture = None
    if any(r.get("type") == "window" for r in records):
        picture = out.with_suffix(".png")
        plot(records, picture)
    phases = phases_from_log(framework, records, rates if tb.shaped else ["loopback"],
                             switched)
    return JobResult(framework, phases, agree, logs[-1] if logs else None, picture, switched)


def phases_from_log(framework: str, records: list[dict[str, Any]], rates: list[str],
                    switched: int | None) -> list[Phase]:
    """Per rate: the job's own measurement (the coordinator's merged windows, traced steps
    left out) of its first window against the median of every window it ran at the
    configuration in force at the end (robust to a window disturbed by, e.g., the tuner
    adapting on rank 0). The first window of each phase is left out: the job's first starts
    cold, and the window a switch falls in ran partly at the old rate (the rate changes when
    rank 0's progress line for the switch step arrives)."""
    windows = [r for r in records if r.get("type") == "window" and r.get("speed")]
    end = 1 << 30
    bounds = [(rates[0], 0, end if switched is None else switched)]
    if switched is not None:
        bounds.append((rates[1], switched, end))
    phases = []
    for rate, lo, hi in bounds:
        rows = [w for w in windows if lo <= w["first_step"] and w["last_step"] < hi]
        rows = rows[1:]  # the job's first window starts cold; a later one saw the change
        if not rows:
            continue
        final = [float(w["speed"]) for w in rows if w["config"] == rows[-1]["config"]]
        phases.append(Phase(framework, rate, rows[0]["first_step"], rows[-1]["last_step"] + 1,
                            _knobs(rows[0]["config"]), float(rows[0]["speed"]),
                            _knobs(rows[-1]["config"]), statistics.median(final), len(final)))
    return phases


def _knobs(config: dict[str, Any]) -> str:
    from common.config import Config

    return Config.from_dict(config).describe()


def summary_table(results: list[JobResult]) -> str:
    head = (f"{'framework':10} {'rate':>8} {'steps':>8}  {'first window':<34} {'samples/s':>9}"
            f"  {'final configuration':<34} {'windows':>7} {'samples/s':>9} {'gain':>6}")
    lines = ["AutoByte demo: per link rate, its first window against the median of the windows "
             "at its final configuration (samples/s of the whole job, as the coordinator merged "
             "them)",
             head, "-" * len(head)]
    for job in results:
        for p in job.phases:
            gain = p.end_speed / p.start_speed if p.start_speed > 0 else float("nan")
            lines.append(f"{p.framework:10} {p.rate:>8} {p.first_step:>3}-{p.last_step:<4}  "
                         f"{p.start_config:<34} {p.start_speed:9.1f}  {p.end_config:<34} "
                         f"{p.end_windows:>7} {p.end_speed:9.1f} {gain:5.2f}x")
    lines.append("")
    for job in results:
        lines.append(f"{job.framework}: weights equal on every worker: "
                     f"{'yes' if job.agree else 'NO'}; decision log: {job.log or 'none'}; "
                     f"plot: {job.plot or 'none'}")
    return "\n".join(lines)


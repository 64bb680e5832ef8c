"""Real training jobs for the evaluation: the adapters' demo workers on the testbed.

A ``JobSpec`` says what one job runs (framework, model, tuner, start configuration, baseline,
a sweep of fixed configurations); ``run_jobs`` runs one or several at once on one testbed
(later jobs may join when the first reaches a step), changes the link rate when the first job
reaches given steps, and returns each job's windows as rank 0 measured them.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from common.errors import ConfigError
from common.progress import NATIVE, parse, worker_env
from common.units import format_bytes

__all__ = ["JobRun", "JobSpec", "Window", "knobs_label", "run_jobs"]

MODULES = {"tensorflow": "autobyte_tf.demo", "mxnet": "autobyte_mx.demo"}
WORKERS = 2


def knobs_label(partition: int, credit: int) -> str:
    if (partition, credit) == NATIVE:
        return "native"
    return f"{format_bytes(partition)}:{format_bytes(credit)}"


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """One training job. ``start`` is (partition, credit) bytes, or None for the adapter's
    own default; ``tuner`` a tuner name or "none"; ``shipped`` sets no AUTOBYTE_* knob at all
    (AutoByte as shipped: ``window`` is then only the progress records'); ``baseline`` runs the
    framework without AutoByte; ``sweep`` switches through fixed configurations every
    ``sweep_steps`` steps (the first is ``start``)."""

    name: str
    framework: str = "tensorflow"
    model: str = "cnn"
    steps: int = 100
    window: int = 5
    tuner: str = "none"
    start: tuple[int, int] | None = (1 << 20, 4 << 20)
    baseline: bool = False
    local: bool = False  # compute alone: every worker trains on its own
    sweep: tuple[tuple[int, int], ...] = ()
    sweep_steps: int = 20
    join_at: int | None = None  # start when the first job reaches this step
    shipped: bool = False
    devices: int = 1  # MXNet: CPU contexts per worker
    servers: int = 1  # MXNet: parameter servers (all on the scheduler's host)

    def __post_init__(self) -> None:
        if self.framework not in MODULES:
            raise ConfigError(f"framework must be one of {sorted(MODULES)}, got "
                              f"framework={self.framework!r}")
        if self.steps < 2 * self.window or self.window < 1:
            raise ConfigError(f"a job needs window >= 1 and at least two windows, got "
                              f"steps={self.steps}, window={self.window}")
        if self.sweep and (self.sweep[0] != self.start or self.sweep_steps % self.window):
            raise ConfigError("a sweep starts at the start configuration and switches on "
                              "window boundaries")

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", MODULES[self.framework], "--steps", str(self.steps),
               "--model", self.model, "--window", str(self.window)]
        if self.baseline:
            cmd.append("--baseline")
        if self.local:
            cmd.append("--local")
        if self.devices != 1:
            cmd += ["--devices", str(self.devices)]
        if self.sweep:
            cmd += ["--sweep", ",".join("native" if (p, c) == NATIVE else f"{p}:{c}"
                                    for p, c in self.sweep),
                    "--sweep-steps", str(self.sweep_steps)]
        return cmd

    def env(self, log_dir: Path) -> dict[str, str]:
        env = {"AUTOBYTE_LOG_DIR": str(log_dir), **worker_env()}
        if self.shipped:
            return env
        env["AUTOBYTE_TUNER"] = "observe" if self.sweep else self.tuner
        env["AUTOBYTE_WINDOW_STEPS"] = str(self.window)
        if self.start == NATIVE:
            env["AUTOBYTE_SCHEDULING"] = "false"
        elif self.start is not None:
            env["AUTOBYTE_PARTITION_BYTES"] = str(self.start[0])
            env["AUTOBYTE_CREDIT_BYTES"] = str(self.start[1])
        return env


@dataclasses.dataclass(frozen=True)
class Window:
    """One progress record of rank 0: steps ``first..last``, speeds in samples/s."""

    first: int
    last: int
    speed: float  # median step
    mean_speed: float  # samples over wall time
    cpu_s_per_step: float
    config: str
    rate: str


@dataclasses.dataclass
class JobRun:
    spec: JobSpec
    windows: list[Window]
    elapsed_s: float
    log: Path | None
    gradient_bytes: int = 0  # the model's trainable bytes (one worker's gradients)
    began_s: float = 0.0  # time.monotonic() when the job was launched

    def mean_speed(self, first: int = 0, last: int = 1 << 30) -> float:
        """Samples/s over the windows in [first, last] (time-weighted: total samples over
        total time), what the job got."""
        rows = [w for w in self.windows if w.first >= first and w.last <= last]
        if not rows:
            return float("nan")
        time_s = sum((w.last - w.first + 1) / w.mean_speed for w in rows if w.mean_speed > 0)
        return sum(w.last - w.first + 1 for w in rows) / time_s if time_s > 0 else float("nan")

    def by_config(self) -> dict[str, float]:
        """Median window speed per configuration, the first window after each switch left
        out (it may hold steps of the previous configuration and the retrace)."""
        seen: dict[str, list[float]] = {}
        previous = None
        for w in self.windows:
            if w.config == previous:
                seen.setdefault(w.config, []).append(w.speed)
            previous = w.config
        return {c: statistics.median(v) for c, v in seen.items() if v}

    def cpu_s_per_step(self, first: int = 0) -> float:
        rows = [w.cpu_s_per_step for w in self.windows if w.first >= first]
        return statistics.median(rows) if rows else float("nan")


class _Watch:
    """A job's output stream: keeps rank 0's progress records and calls ``on_step``."""

    def __init__(self, spec: JobSpec, on_step: Callable[[int], str], echo: bool) -> None:
        self.spec, self.on_step, self.echo = spec, on_step, echo
        self.windows: list[Window] = []
        self.last_step = 0
        self.gradient_bytes = 0

    def write(self, text: str) -> int:
        record = parse(text)
        if record is not None and record.get("kind") == "start":
            self.gradient_bytes = int(record.get("gradient_bytes") or 0)
        if record is None or record.get("kind") != "progress":
            return len(text)
        try:
            step = int(record["step"])
            rate = self.on_step(step)
            self.windows.append(Window(
                first=self.last_step + 1, last=step, speed=float(record["samples_per_s"]),
                mean_speed=float(record.get("mean_samples_per_s", record["samples_per_s"])),
                cpu_s_per_step=float(record.get("cpu_s_per_step", float("nan"))),
                config=_short(str(record["config"])), rate=rate))
            self.last_step = step
            if self.echo:
                w = self.windows[-1]
                print(f"    {self.spec.name:<22} step {step:>4}/{self.spec.steps} {rate:>8} "
                      f"{w.config:<18} {w.speed:8.1f} samples/s", flush=True)
        except (KeyError, TypeError, ValueError):
            pass  # a malformed record never stops the stream
        return len(text)

    def flush(self) -> None:
        sys.stdout.flush()


def _save_windows(path: Path, windows: list[Window]) -> None:
    """Every window rank 0 reported, so a run's numbers can be looked at again."""
    import csv

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([field.name for field in dataclasses.fields(Window)])
        writer.writerows(dataclasses.astuple(w) for w in windows)


def _short(describe: str) -> str:
    """"partition=64KiB credit=256KiB (4x) ..." -> "64KiB:256KiB", AutoByte's native ->
    "native"; baselines unchanged."""
    if describe.startswith("native"):
        return "native"
    if not describe.startswith("partition="):
        return describe
    fields = dict(item.split("=", 1) for item in describe.split() if "=" in item)
    return f"{fields.get('partition', '?')}:{fields.get('credit', '?')}"


def _note_link(path: Path, rate: str, changes: Sequence[tuple[int, str, float]], *,
               own_steps: bool) -> None:
    """Record the link's rates in a job's decision log (``autobyte report`` marks them).
    The steps are the first job's: a job that joined later gets its changes by time only."""
    from common.decision_log import DecisionLog

    with DecisionLog(path) as log:
        if own_steps:
            log.write("event", {"event": "link", "step": 0, "rate": rate})
        for step, new, when in changes:
            log.write("event", {"event": "link", "step": step if own_steps else None,
                                "rate": new, "time": when})


def run_jobs(specs: Sequence[JobSpec], *, rate: str, out: Path,
             rate_changes: Sequence[tuple[int, str]] = (), timeout: float = 900.0,
             echo: bool = True) -> list[JobRun]:
    """Run ``specs`` on one testbed (2 worker hosts, plus one for MXNet's scheduler and
    server); the first starts at once, others at their ``join_at`` step of the first. The
    link rate starts at ``rate`` and changes to each ``rate_changes`` (step, rate) when the
    first job reaches that step. Raises ConfigError when a job fails."""
    from common.launch import launch
    from common.testbed import Testbed

    if not specs or specs[0].join_at is not None:
        raise ConfigError("the first job starts at once (join_at=None)")
    out.mkdir(parents=True, exist_ok=True)
    hosts = WORKERS + (1 if any(s.framework == "mxnet" for s in specs) else 0)
    changes = sorted(rate_changes)
    results: list[Any] = [None] * len(specs)
    started = [threading.Event() for _ in specs]
    with Testbed(hosts=hosts, rate=rate) as tb:
        state: dict[str, Any] = {"rate": rate if tb.shaped else "loopback", "next": 0}
        link: list[tuple[int, str, float]] = []  # (step of the first job, rate, time) set
        lock = threading.Lock()

        def first_step(step: int) -> str:
            with lock:
                while state["next"] < len(changes) and step >= changes[state["next"]][0]:
                    new = changes[state["next"]][1]
                    if tb.shaped:
                        tb.set_rate(new)
                        state["rate"] = new
                        link.append((step, new, time.time()))
                    state["next"] += 1
                for i, spec in enumerate(specs):
                    if spec.join_at is not None and step >= spec.join_at:
                        started[i].set()
                return str(state["rate"])

        def current_rate(step: int) -> str:
            with lock:
                return str(state["rate"])

        def run(i: int) -> None:
            spec = specs[i]
            if i > 0 and not started[i].wait(timeout):
                results[i] = ConfigError(f"job {spec.name} never started: the first job did "
                                         f"not reach step {spec.join_at}")
                return
            began = time.monotonic()
            log_dir = out / spec.name
            watch = _Watch(spec, first_step if i == 0 else current_rate, echo)
            result = launch(framework=spec.framework, command=spec.command(), workers=WORKERS,
                            servers=spec.servers, env=spec.env(log_dir), testbed=tb,
                            timeout=timeout, stream=watch,
                            linger=1.0 if spec.local else 30.0)  # no worker joins ps-lite
            if i == 0:
                for event in started:  # a job waiting for a step that never came starts now
                    event.set()
            if result.returncode != 0:
                tails = "\n".join(f"--- {name} (exit {p.returncode})\n{p.output[-1500:]}"
                                  for name, p in result.processes.items())
                results[i] = ConfigError(f"bench job {spec.name} failed (exit "
                                         f"{result.returncode}):\n{tails}")
                return
            logs = sorted(log_dir.glob("decisions-*.jsonl"))
            if logs and tb.shaped:
                _note_link(logs[-1], rate, list(link), own_steps=i == 0)
            results[i] = JobRun(spec, watch.windows, time.monotonic() - began,
                                logs[-1] if logs else None, watch.gradient_bytes, began)
            _save_windows(log_dir / "windows.csv", watch.windows)

        threads = [threading.Thread(target=run, args=(i,), name=f"bench-{s.name}")
                   for i, s in enumerate(specs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for r in results:
        if isinstance(r, Exception):
            raise r
    return list(results)

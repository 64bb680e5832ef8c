"""Meta-network training data from real runs: decision logs -> ``Sample`` rows.

A job's coordinator logs every merged window (``common.decision_log``): the configuration in
force, the speed it reached and the whole observation (Table II). Every usable window becomes
one ``Sample``: the job as the tuner saw it at that window (``JobTracker``: the link as the
best of the recent windows, layer times their median), the window's (partition, credit) and
its speed. Left out, and counted by reason: a log's first window (it holds the
trace and warm-up); the first window after every change of configuration (it holds the switch
and the retrace), unless the log lacks the window before it (which then held the switch) and
it measured every one of its steps (no retrace); windows cut short by a switch between window
boundaries (fewer steps than the job's window: MXNet applies a switch a few steps after the
step asked for, and the steps before it are slower); windows the coordinator skipped
(incomplete); windows without a usable observation (no per-layer times) and windows without
a positive speed.

``sweep_plan`` and ``run_sweeps`` make such logs on the testbed: jobs of the adapters' demo
workers that switch through fixed configurations (``run_jobs``, tuner ``observe``).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from common.errors import ConfigError, ControlError
from common.meta._features import JobTracker, MetaInput, Sample
from common.tuners._space import NATIVE_BYTES

__all__ = [
    "LogSamples",
    "SweepJob",
    "find_logs",
    "run_sweeps",
    "samples_from_log",
    "samples_from_logs",
    "sweep_configs",
    "sweep_plan",
    "visits",
]

K = 1024
# per-worker step time of the demo models without communication (s), and their gradient
# bytes (measured here: cnn 0.85 MB in 4 layers; mlp and deep from their parameter counts)
_COMPUTE_S = 0.04
MODEL_BYTES = {"cnn": 0.85e6, "mlp": 12.8e6, "deep": 4.8e6, "mobilenetv2": 9.0e6,
               "densenet": 28.2e6, "resnet": 90e6, "vgg": 5.4e6, "transformer": 1.1e6,
               "lstm": 0.86e6, "resnet20": 1.09e6}
SMALL_PARTITION = 16 * K


@dataclasses.dataclass
class LogSamples:
    """What one or more logs gave: ``samples`` (with the run each came from) and how many
    windows were left out, by reason."""

    samples: list[Sample] = dataclasses.field(default_factory=list)
    runs: list[str] = dataclasses.field(default_factory=list)
    windows: int = 0
    skipped: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    logs: int = 0
    recovered: int = 0  # kept although their configuration's first logged window

    def extend(self, other: LogSamples) -> None:
        self.samples += other.samples
        self.runs += other.runs
        self.windows += other.windows
        self.skipped.update(other.skipped)
        self.logs += other.logs
        self.recovered += other.recovered

    def describe(self) -> str:
        why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
        kept = (f"; {self.recovered} of the samples follow a switch window the log lacks "
                f"(every step measured, so kept)" if self.recovered else "")
        return (f"{self.logs} log(s), {self.windows} window(s): {len(self.samples)} sample(s)"
                f", {sum(self.skipped.values())} skipped" + (f" ({why})" if why else "") + kept)


def find_logs(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, folders searched (recursively) for ``decisions-*.jsonl``."""
    found: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            logs = sorted(path.rglob("decisions-*.jsonl"))
            if not logs:
                raise ConfigError(f"{path}: a folder without decision logs (decisions-*.jsonl)")
            found += logs
        elif path.is_file():
            found.append(path)
        else:
            raise ConfigError(f"{path}: no such file or folder (give decision logs, "
                              f"decisions-*.jsonl, or folders holding them)")
    return found


def run_name(path: Path) -> str:
    """A log's run: its folder and file name (``collect --run`` gives each job a folder)."""
    return f"{path.parent.name}/{path.stem}"


def _knobs(config: Any) -> tuple[int, int] | None:
    """(partition, credit) as a model of speed reads them (native: ``NATIVE_BYTES``)."""
    try:
        if config.get("scheduling", True) is False:
            return NATIVE_BYTES, NATIVE_BYTES
        return int(config["partition_bytes"]), int(config["credit_bytes"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def samples_from_log(path: str | Path, *, servers: int = 1,
                     run: str | None = None) -> LogSamples:
    """The usable windows of one decision log as Samples (module docstring says which)."""
    from common.decision_log import read_log

    path = Path(path)
    try:
        records = read_log(path)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such decision log") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable decision log ({exc})") from None
    if not records:
        raise ConfigError(f"{path}: no decision-log records in it (one JSON object a line, "
                          f"each with a 'type')")
    out = LogSamples(logs=1)
    name = run or run_name(path)
    windows = [r for r in records if r.get("type") == "window"]
    size = _window_steps(records, windows)
    previous: tuple[int, int] | None = None
    previous_last = -1
    first = True
    tracker = JobTracker()
    for record in windows:
        out.windows += 1
        job = _track(tracker, record, servers)
        knobs = _knobs(record.get("config"))
        changed = knobs != previous
        follows = _step(record, "first_step") == previous_last + 1
        previous, previous_last = knobs, _step(record, "last_step")
        if first:
            first = False
            out.skipped["first window of the log (trace, warm-up)"] += 1
            continue
        if changed:
            if not follows and size and _span(record) == size == _step(record, "steps"):
                # the window before was never logged and held the switch: this one
                # measured all its steps (no retrace), so it is the configuration's second
                out.recovered += 1
            else:
                out.skipped["first window after a switch (switch, retrace)"] += 1
                continue
        if record.get("action") == "skip":
            out.skipped["skipped by the coordinator (incomplete)"] += 1
            continue
        if size and _span(record) < size:
            # the tail cut off by a switch between window boundaries (MXNet applies a switch
            # a few steps late): a few steps, and slower as the switch is prepared
            out.skipped["partial window (cut short by a switch)"] += 1
            continue
        speed = record.get("speed")
        if knobs is None or isinstance(speed, bool) or not isinstance(speed, int | float) \
                or not math.isfinite(speed) or speed <= 0:
            out.skipped["no configuration or no positive speed"] += 1
            continue
        if job is None:
            out.skipped["no usable observation (per-layer times)"] += 1
            continue
        out.samples.append(Sample(job, knobs[0], knobs[1], float(speed)))
        out.runs.append(name)
    return out


def _track(tracker: JobTracker, record: dict[str, Any], servers: int) -> MetaInput | None:
    """The job as the tuner saw it at this window (``JobTracker`` over every complete window
    with statistics, the left-out ones included): a window without them (no step of it was
    timed per tensor) keeps the last; None before any has them."""
    from common.stats import Observation

    if record.get("action") == "skip":
        return None
    try:
        obs = Observation.from_dict(record.get("observation") or {})
        return tracker.update(MetaInput.from_observation(obs, servers=servers))
    except (ConfigError, ControlError):
        return tracker.job


def _step(record: dict[str, Any], name: str) -> int:
    try:
        return int(record[name])
    except (KeyError, TypeError, ValueError):
        return -10


def _span(record: dict[str, Any]) -> int:
    return max(0, _step(record, "last_step") - _step(record, "first_step") + 1)


def _window_steps(records: list[dict[str, Any]], windows: list[dict[str, Any]]) -> int:
    """The job's window size: its ``job`` record's configuration, else the commonest span
    (0 when unknown: no window is then taken as partial)."""
    for record in records:
        if record.get("type") == "job":
            try:
                return int(record["config"]["window_steps"])
            except (KeyError, TypeError, ValueError):
                break
    spans = collections.Counter(_span(w) for w in windows if _span(w) > 0)
    return spans.most_common(1)[0][0] if spans else 0


def samples_from_logs(paths: Sequence[str | Path], *, servers: int = 1) -> LogSamples:
    """Every log under ``paths`` (files, or folders searched for decisions-*.jsonl)."""
    out = LogSamples()
    for path in find_logs(paths):
        out.extend(samples_from_log(path, servers=servers))
    return out


# --- sweeps on the testbed -----------------------------------------------------------------

# steps per configuration: three windows of 5, the first holds the switch, the other two are
# samples (a 10-step mean per configuration, the meta-network's target)
SWEEP_STEPS = 15
WINDOW_STEPS = 5


@dataclasses.dataclass(frozen=True)
class SweepJob:
    name: str
    framework: str
    model: str
    rate: str
    configs: tuple[tuple[int, int], ...]  # in the order visited: with passes, each again
    sweep_steps: int = SWEEP_STEPS

    @property
    def steps(self) -> int:
        return self.sweep_steps * len(self.configs)

    @property
    def drawn(self) -> int:
        """How many configurations it measures (each visited once or twice)."""
        return len(set(self.configs))


FRAMEWORKS = ("tensorflow", "mxnet")


def sweep_configs(count: int, rng: np.random.Generator) -> tuple[tuple[int, int], ...]:
    """``count`` (partition, credit) bytes, then native (``common.progress.NATIVE``) as one
    more: small ones (16 KiB at 1x, and from 8 configurations on also at a random multiple),
    the rest spread over the tuner's search space (partition strata over 64 KiB-64 MiB in log
    scale, a random credit multiple 1-16 each). The first (the job's start) is never a small
    one nor native: every job measures native somewhere after it, so the data holds the
    candidate the tuner weighs every other one against."""
    from common.progress import NATIVE
    from common.tuners import SearchSpace

    if count < 3:
        raise ConfigError(f"a sweep needs at least 3 configurations, got count={count}")
    space = SearchSpace()
    parts = space.partitions
    small = [(SMALL_PARTITION, SMALL_PARTITION)]
    if count >= 8:
        small.append((SMALL_PARTITION, SMALL_PARTITION * int(rng.integers(2, 17))))
    spread = count - len(small)
    edges = np.linspace(0, len(parts), spread + 1)
    out = []
    for i in range(spread):
        low, high = int(edges[i]), max(int(edges[i]) + 1, int(edges[i + 1]))
        p = parts[int(rng.integers(low, high))]
        out.append((p, p * int(rng.choice(space.credit_multiples))))
    rng.shuffle(out)
    # the small ones somewhere after the start: they are the slowest to switch into
    for item in [*small, NATIVE]:
        out.insert(int(rng.integers(1, len(out) + 1)), item)
    return tuple(out)


def estimated_step_s(framework: str, model: str, rate: str) -> float:
    """A rough step time (compute plus the bottleneck link's bytes), to size a sweep."""
    from common.units import parse_rate

    factor = 2.0 if framework == "mxnet" else 1.0  # one server carries both workers
    return _COMPUTE_S + 8 * MODEL_BYTES[model] * factor / parse_rate(rate, "rate")


def sweep_plan(*, frameworks: Sequence[str], models: Sequence[str], rates: Sequence[str],
               max_configs: int = 12, budget_s: float = 30.0, seed: int = 0,
               sweep_steps: int = SWEEP_STEPS, passes: int = 1) -> list[SweepJob]:
    """One job per framework x model x rate; each sweeps as many configurations (4 to
    ``max_configs``), ``sweep_steps`` steps each, ``passes`` times, as fit ``budget_s``
    seconds of training at its estimated step time. A second pass visits them again in
    reverse order (``visits``), so a host whose speed drifts during a job weighs on every
    configuration alike."""
    from common.progress import MODELS
    from common.units import parse_rate

    for name, values, allowed in (("framework", frameworks, FRAMEWORKS),
                                  ("model", models, MODELS)):
        bad = [v for v in values if v not in allowed]
        if bad or not values:
            raise ConfigError(f"{name}s must be some of {list(allowed)}, got {list(values)}")
    if not rates:
        raise ConfigError("rates must name at least one link rate, e.g. 100mbit")
    for rate in rates:
        parse_rate(rate, "rate")
    if passes not in (1, 2):
        raise ConfigError(f"passes must be 1 or 2, got passes={passes}")
    if max_configs < 4:
        raise ConfigError(f"max_configs must be >= 4, got max_configs={max_configs}")
    if not budget_s > 0:
        raise ConfigError(f"budget_s must be > 0 seconds, got budget_s={budget_s!r}")
    if sweep_steps < 2 * WINDOW_STEPS:
        raise ConfigError(f"sweep_steps must be >= {2 * WINDOW_STEPS} (a switch window and a "
                          f"sample window of {WINDOW_STEPS} steps), got sweep_steps={sweep_steps}")
    jobs = []
    for framework in frameworks:
        for model in models:
            for rate in rates:
                step = estimated_step_s(framework, model, rate)
                count = max(4, min(max_configs,
                                   int(budget_s / (passes * sweep_steps * step))))
                name = f"{framework}-{model}-{rate}"
                rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
                jobs.append(SweepJob(name, framework, model, rate,
                                     visits(sweep_configs(count, rng), passes), sweep_steps))
    return jobs


def visits(configs: tuple[tuple[int, int], ...], passes: int) -> tuple[tuple[int, int], ...]:
    """The order a sweep visits ``configs`` in: once, or then again backwards from the one
    before the last (the last, just measured, comes at the very end)."""
    if passes == 1:
        return configs
    back = configs[-2::-1]
    return (*configs, *back, configs[-1])


def run_sweeps(jobs: Sequence[SweepJob], *, out: Path, timeout: float = 300.0,
               echo: bool = True, say: Callable[[str], None] = print,
               ) -> tuple[list[Path], list[str]]:
    """Run ``jobs`` one after another, each on its own testbed (``common.bench.run_jobs``).
    Returns the decision logs written and the errors of jobs that failed (the others go on)."""
    from common.bench._jobs import JobSpec, run_jobs

    logs: list[Path] = []
    errors: list[str] = []
    began = time.monotonic()
    for i, job in enumerate(jobs):
        spec = JobSpec(job.name, framework=job.framework, model=job.model, steps=job.steps,
                       window=WINDOW_STEPS, start=job.configs[0], sweep=job.configs,
                       sweep_steps=job.sweep_steps)
        say(f"collect: job {i + 1}/{len(jobs)} {job.name}: {job.drawn} configurations, "
            f"{job.steps} steps")
        t0 = time.monotonic()
        try:
            run = run_jobs([spec], rate=job.rate, out=out, timeout=timeout, echo=echo)[0]
        except ConfigError as exc:
            errors.append(f"{job.name}: {exc}")
            say(f"collect: job {job.name} failed, going on: {str(exc).splitlines()[0]}")
            continue
        if run.log is None:
            errors.append(f"{job.name}: the job wrote no decision log")
        else:
            logs.append(run.log)
        done = time.monotonic() - began
        left = done / (i + 1) * (len(jobs) - i - 1)
        say(f"collect: job {i + 1}/{len(jobs)} done in {time.monotonic() - t0:.0f} s; "
            f"{done:.0f} s so far, about {left:.0f} s left")
    return logs, errors

"""Meta-network datasets: jobs (a model's layers on a cluster) and samples (a configuration of
one job and the speed it reached), stored as one compressed ``.npz`` (datasets/SCHEMA.md).

The simulator source draws each job at random (one of the four real profiles or a randomised
layer profile; 1-128 workers; PS or all-reduce; 0.1-100 Gbit/s; device speed, batch size,
bandwidth that changes within the window; a per-block cost around what each framework's blocks
cost here, ``BLOCK_COST_S``) and a few configurations per job (partition
log-uniform in 4 KB-1 GB, credit 1x-16x). Everything derives from ``seed`` and the job index,
so a larger set is rebuilt exactly from the same seed. ``grid=True`` runs every candidate of a
search space for each job instead: what held-out evaluation needs to compare the pick with
the best.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
import zipfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from common.errors import ConfigError, ModelFileError
from common.meta._features import MetaInput, Sample
from common.tuners._space import NATIVE_BYTES

__all__ = ["DATASET_VERSION", "HOLDOUT_BANDWIDTH_BPS", "HOLDOUT_MODELS", "Dataset", "generate"]

DATASET_VERSION = 1
MIN_PARTITION, MAX_PARTITION = 4 * 1024, 1024**3
# the simulator's cost is per chunk: partitions that cut one iteration into more chunks than
# this (overhead-bound anyway) are not drawn; time-varying bandwidth (slower to
# simulate) only for configurations with at most SCHEDULE_CHUNKS chunks
MAX_CHUNKS = 32768
SCHEDULE_CHUNKS = 8192
# the CPU time one block costs, by arch, off the compute path: fitted to the ratios to native of
# real testbed runs by benchmarks/block_cost_fit.py (a TensorFlow collective about 2 ms on this
# machine, an MXNet key's push and pull about 1 ms; the simulator's own 100 us put TensorFlow's
# 64KiB blocks a third above what ran). Each job draws within a factor BLOCK_COST_SPREAD of it,
# so the network does not learn one machine's figure. The tuner's prior charges the better fit
# of two parts (``common.meta._prior.BLOCK_COST``); files generated with it trained a network no
# better on architectures left out (datasets/SCHEMA.md), so the shipped files keep this one.
BLOCK_COST_S = {"allreduce": 2e-3, "ps": 1e-3}
BLOCK_COST_SPREAD = 2.0
# never in the training data: evaluation on these measures generalisation
HOLDOUT_MODELS: tuple[str, ...] = ("densenet121",)
HOLDOUT_BANDWIDTH_BPS: tuple[float, float] = (2e9, 5e9)

_JOB_STR = ("job_model", "job_source", "job_arch", "job_run")
_JOB_NUM = ("job_workers", "job_servers", "job_batch_size", "job_bandwidth_down_bps",
            "job_bandwidth_up_bps", "job_layer_start", "job_layer_count")
_LAYER = ("layer_backward_s", "layer_bytes")
_SAMPLE = ("sample_job", "partition_bytes", "credit_bytes", "speed", "iteration_s",
           "lower_bound_s")
COLUMNS = _JOB_STR + _JOB_NUM + _LAYER + _SAMPLE
# may be absent (files written before it existed): read as ""
OPTIONAL = ("job_run",)

Progress = Callable[[int, int], None]


@dataclasses.dataclass(frozen=True)
class Dataset:
    """Columns as numpy arrays (names and units in datasets/SCHEMA.md)."""

    columns: dict[str, npt.NDArray[Any]]

    def __post_init__(self) -> None:
        missing = [c for c in COLUMNS if c not in self.columns and c not in OPTIONAL]
        if missing:
            raise ConfigError(f"dataset lacks columns {missing}")
        if "job_run" not in self.columns:
            self.columns["job_run"] = np.array([""] * len(self.columns["job_model"]), dtype=str)

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        return self.columns[name]

    @property
    def num_jobs(self) -> int:
        return len(self.columns["job_model"])

    def __len__(self) -> int:
        return len(self.columns["sample_job"])

    def job(self, j: int) -> MetaInput:
        c = self.columns
        start, count = int(c["job_layer_start"][j]), int(c["job_layer_count"][j])
        return MetaInput(
            layer_backward_s=tuple(c["layer_backward_s"][start:start + count].tolist()),
            layer_bytes=tuple(c["layer_bytes"][start:start + count].tolist()),
            workers=int(c["job_workers"][j]), arch=str(c["job_arch"][j]),
            servers=int(c["job_servers"][j]), batch_size=int(c["job_batch_size"][j]),
            bandwidth_down_bps=float(c["job_bandwidth_down_bps"][j]),
            bandwidth_up_bps=float(c["job_bandwidth_up_bps"][j]), model=str(c["job_model"][j]))

    def select_jobs(self, keep: npt.NDArray[np.bool_]) -> Dataset:
        """The jobs where ``keep`` is True, with their layers and samples."""
        jobs = np.flatnonzero(keep)
        return Dataset.from_parts([self._part(int(j)) for j in jobs])

    def _part(self, j: int) -> dict[str, Any]:
        c = self.columns
        start, count = int(c["job_layer_start"][j]), int(c["job_layer_count"][j])
        rows = c["sample_job"] == j
        part = {k: c[k][j] for k in _JOB_STR + _JOB_NUM}
        part.update({k: c[k][start:start + count] for k in _LAYER})
        part.update({k: c[k][rows] for k in _SAMPLE})
        return part

    @staticmethod
    def from_parts(parts: Sequence[dict[str, Any]]) -> Dataset:
        """Concatenate per-job parts (job fields scalar, layer and sample fields arrays)."""
        cols: dict[str, list[Any]] = {k: [] for k in COLUMNS}
        start = 0
        for j, part in enumerate(parts):
            count = len(part["layer_bytes"])
            for k in _JOB_STR + _JOB_NUM:
                cols[k].append(part.get(k, "") if k in OPTIONAL else part[k])
            cols["job_layer_start"][-1], cols["job_layer_count"][-1] = start, count
            start += count
            for k in _LAYER + _SAMPLE[1:]:
                cols[k].append(np.asarray(part[k]))
            cols["sample_job"].append(np.full(len(part["speed"]), j))
        out: dict[str, npt.NDArray[Any]] = {}
        for k in _JOB_STR:
            out[k] = np.array([str(v) for v in cols[k]], dtype=str)
        for k in _JOB_NUM:
            kind = np.float64 if "bandwidth" in k else np.int64
            out[k] = np.array(cols[k], dtype=kind)
        for k in _LAYER + _SAMPLE:
            kind = np.float64 if k in ("layer_backward_s", "speed", "iteration_s",
                                       "lower_bound_s") else np.int64
            out[k] = (np.concatenate(cols[k]).astype(kind) if cols[k]
                      else np.zeros(0, dtype=kind))
        return Dataset(out)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            np.savez_compressed(fh, schema_version=np.array(DATASET_VERSION), **self.columns)
        return path

    @staticmethod
    def load(path: str | Path) -> Dataset:
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                version = int(data["schema_version"]) if "schema_version" in data else None
                if version != DATASET_VERSION:
                    raise ModelFileError(f"{path}: dataset schema version {version}, this "
                                         f"AutoByte reads version {DATASET_VERSION}")
                return Dataset({k: data[k] for k in COLUMNS if k in data})
        except FileNotFoundError:
            raise ModelFileError(f"{path}: no such dataset file") from None
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise ModelFileError(f"{path}: not a readable dataset ({exc})") from None

    @staticmethod
    def from_samples(samples: Sequence[Sample], *, source: str = "testbed",
                     runs: Sequence[str] | None = None) -> Dataset:
        """Rows from observations of real runs (e.g. a decision log's windows); samples
        with the same ``job`` (equal MetaInput) and run form one job. ``runs``: the run
        (e.g. the decision log) of each sample, kept in ``job_run``."""
        if runs is not None and len(runs) != len(samples):
            raise ConfigError(f"runs must name one run per sample, got {len(runs)} runs for "
                              f"{len(samples)} samples")
        jobs: dict[tuple[str, MetaInput], list[Sample]] = {}
        for i, s in enumerate(samples):
            jobs.setdefault((runs[i] if runs is not None else "", s.job), []).append(s)
        parts = []
        for (run, job), rows in jobs.items():
            iteration = [job.workers * job.batch_size / s.speed for s in rows]
            parts.append({
                "job_model": job.model, "job_source": source, "job_arch": job.arch,
                "job_run": run,
                "job_workers": job.workers, "job_servers": job.servers,
                "job_batch_size": job.batch_size, "job_bandwidth_down_bps": job.bandwidth_down_bps,
                "job_bandwidth_up_bps": job.bandwidth_up_bps, "job_layer_start": 0,
                "job_layer_count": 0, "layer_backward_s": job.layer_backward_s,
                "layer_bytes": job.layer_bytes,
                "partition_bytes": [s.partition_bytes for s in rows],
                "credit_bytes": [s.credit_bytes for s in rows],
                "speed": [s.speed for s in rows], "iteration_s": iteration,
                "lower_bound_s": [math.nan] * len(rows)})
        return Dataset.from_parts(parts)

    def runs(self) -> list[str]:
        """The named runs (``job_run``), in order of first appearance."""
        return list(dict.fromkeys(r for r in self["job_run"].tolist() if r))

    def select_runs(self, pattern: str, *, keep: bool = True) -> Dataset:
        """The jobs whose run matches the shell-style ``pattern`` (``keep=False``: all the
        others, unnamed runs included)."""
        names = self["job_run"].tolist()
        match = np.array([bool(r) and fnmatch.fnmatchcase(r, pattern) for r in names],
                         dtype=bool)
        return self.select_jobs(match if keep else ~match)

    def as_deployed(self) -> Dataset:
        """Testbed windows paired as the tuner uses them: the tuner scores every candidate
        with the statistics of the window in force, so each window of a run becomes a job
        whose samples are every sampled configuration of that run (its own included), each
        at the mean speed of its windows in the run (``collect --run`` samples two 5-step
        windows a configuration: a 10-step mean). Jobs without a run (the simulator's) are
        kept as they are."""
        parts: list[dict[str, Any]] = []
        by_run: dict[str, list[int]] = {}
        for j, run in enumerate(self["job_run"].tolist()):
            if run:
                by_run.setdefault(run, []).append(j)
            else:
                parts.append(self._part(j))
        for jobs in by_run.values():
            own = [self._part(j) for j in jobs]
            speeds: dict[tuple[int, int], list[float]] = {}
            for part in own:
                for p, c, v in zip(part["partition_bytes"], part["credit_bytes"],
                                   part["speed"], strict=True):
                    speeds.setdefault((int(p), int(c)), []).append(float(v))
            targets = {"partition_bytes": np.array([k[0] for k in speeds], np.int64),
                       "credit_bytes": np.array([k[1] for k in speeds], np.int64),
                       "speed": np.array([np.mean(v) for v in speeds.values()])}
            for context in own:
                per_step = int(context["job_workers"]) * int(context["job_batch_size"])
                parts.append({**context, **targets,
                              "iteration_s": per_step / targets["speed"],
                              "lower_bound_s": np.full(len(targets["speed"]), math.nan)})
        return Dataset.from_parts(parts)

    @staticmethod
    def concat(sets: Iterable[Dataset]) -> Dataset:
        return Dataset.from_parts([d._part(j) for d in sets for j in range(d.num_jobs)])


def generate(*, jobs: int, seed: int, configs_per_job: int = 8, holdout: bool = False,
             grid: Sequence[tuple[int, int]] | None = None,
             progress: Progress | None = None) -> Dataset:
    """Simulated jobs. ``holdout=False`` never draws ``HOLDOUT_MODELS`` nor a bandwidth in
    ``HOLDOUT_BANDWIDTH_BPS``; ``holdout=True`` draws only those (and random profiles from
    another stream). ``grid``: (partition, credit multiple) pairs run for every job instead of
    ``configs_per_job`` random ones."""
    from common.sim import get_profile, random_profile

    if jobs < 1 or configs_per_job < 1:
        raise ConfigError(f"jobs and configs_per_job must be >= 1, got jobs={jobs}, "
                          f"configs_per_job={configs_per_job}")
    parts = []
    stream = 1 if holdout else 0
    for j in range(jobs):
        rng = np.random.default_rng([seed, stream, j])
        batch = int(rng.choice([16, 32, 64]))
        scale = math.exp(rng.uniform(math.log(0.25), math.log(4.0)))
        real = _real_models(holdout)
        if rng.random() < 0.4:
            name = str(rng.choice(real))
            profile = get_profile(name, batch_size=batch, compute_scale=scale)
        else:
            profile = random_profile(rng, batch_size=batch, name="random")
        low = max(MIN_PARTITION, math.ceil(profile.total_bytes / MAX_CHUNKS))
        points = list(grid) if grid is not None else _random_points(rng, configs_per_job, low)
        points.append((NATIVE_BYTES, 1))
        parts.append(_simulate_job(rng, profile, points, holdout))
        if progress is not None:
            progress(j + 1, jobs)
    return Dataset.from_parts(parts)


def _real_models(holdout: bool) -> list[str]:
    from common.sim import MODELS

    return [m for m in MODELS if (m in HOLDOUT_MODELS) == holdout]


def _random_points(rng: np.random.Generator, count: int,
                   low: int) -> list[tuple[int, int]]:
    logs = rng.uniform(math.log(low), math.log(MAX_PARTITION), count)
    return [(int(math.exp(v)), int(rng.integers(1, 17))) for v in logs]


def _bandwidth(rng: np.random.Generator, holdout: bool) -> float:
    low, high = HOLDOUT_BANDWIDTH_BPS
    if holdout:
        return math.exp(rng.uniform(math.log(low), math.log(high)))
    while True:
        rate = math.exp(rng.uniform(math.log(0.1e9), math.log(100e9)))
        if not low <= rate <= high:
            return rate


def _simulate_job(rng: np.random.Generator, profile: Any, points: Sequence[tuple[int, int]],
                  holdout: bool) -> dict[str, Any]:
    from common.config import Config
    from common.sim import BandwidthSchedule, lower_bound, simulate

    workers = max(1, min(128, round(2 ** rng.uniform(0, 7))))
    arch = "ps" if rng.random() < 0.5 else "allreduce"
    servers = int(rng.choice([1, max(1, workers // 4), workers])) if arch == "ps" else 1
    rate = _bandwidth(rng, holdout)
    spread = math.log(BLOCK_COST_SPREAD)
    block_cost = BLOCK_COST_S[arch] * math.exp(rng.uniform(-spread, spread))
    schedule, steps = BandwidthSchedule.constant(rate), 1
    fine = min(p for p, _ in points if p != NATIVE_BYTES)
    if rng.random() < 0.3 and profile.total_bytes / fine <= SCHEDULE_CHUNKS:
        # the link rate changes within the window
        estimate = lower_bound(profile, workers=workers, arch=arch, servers=servers,
                               bandwidth=rate)
        low = rate * rng.uniform(0.3, 0.9)
        span = estimate * rng.uniform(0.5, 3.0)
        schedule, steps = BandwidthSchedule([(span, rate), (span, low)]), 2
    measured = schedule.mean_rate * rng.lognormal(0.0, 0.05, 2)  # monitor noise
    times = np.array([x.backward_s for x in profile.layers]) * rng.lognormal(0.0, 0.05,
                                                                              len(profile.layers))
    sample: dict[str, list[float]] = {k: [] for k in ("partition_bytes", "credit_bytes", "speed",
                                                      "iteration_s", "lower_bound_s")}
    for partition, multiple in points:
        config = Config(scheduling=False) if partition == NATIVE_BYTES else \
            Config(partition_bytes=partition, credit_bytes=partition * multiple)
        result = simulate(profile, config, workers=workers, arch=arch, servers=servers,
                          bandwidth=schedule, steps=steps, overhead_s=block_cost, trace=False)
        jitter = rng.lognormal(0.0, 0.02)  # compute noise over a 10-step window
        sample["partition_bytes"].append(partition)
        sample["credit_bytes"].append(partition * multiple)
        sample["iteration_s"].append(result.iteration_s * jitter)
        sample["speed"].append(result.speed / jitter)
        sample["lower_bound_s"].append(result.lower_bound_s)
    return {
        "job_model": profile.name, "job_source": "sim", "job_arch": arch,
        "job_workers": workers, "job_servers": servers, "job_batch_size": profile.batch_size,
        "job_bandwidth_down_bps": float(measured[0]), "job_bandwidth_up_bps": float(measured[1]),
        "job_layer_start": 0, "job_layer_count": 0,
        "layer_backward_s": times, "layer_bytes": [x.nbytes for x in profile.layers],
        **sample,
    }

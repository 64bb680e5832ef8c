"""Feature encoding for the meta-network: pure numpy, no Keras, so the data pipeline, the
dataset generator and the tests run without a framework.

A job (``MetaInput``: the paper's Table II statistics plus per-layer bytes) is encoded once
into a layer sequence and a static vector; each candidate (partition, credit) is encoded into
a small vector that also relates it to the job's layer sizes (how many chunks it makes, how
much of the model it splits), because that is what lets one network generalise to models it
never saw. The target is normalised so one network covers 1-128 workers and 0.1-100 Gbit/s:

    ref_s  = 1.5 * sum(backward) + 8 * total_bytes * comm_factor / min(B_d, B_u)
    target = log(iteration_s / ref_s),    iteration_s = workers * batch_size / speed

``ref_s`` is computation plus communication with no overlap (forward taken as half of
backward, as the simulator assumes; only backward is measured per layer). The ratio lies in
about [0.5, a few]: the network learns how well a configuration overlaps and how much its
chunk count costs, not the absolute speed, which the inputs already fix.

Sequence: layers in backward order (the order gradients become ready), at most ``SEQ_LEN``
steps. Models with more layers (DenseNet-121 has 121) are bucketed into ``SEQ_LEN``
contiguous groups of nearly equal layer count, summing bytes and time, so totals stay exact;
shorter ones are padded with all-zero steps that a mask skips (a real step is never all zero:
its cumulative fractions are > 0).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from common.errors import ConfigError
from common.stats import comm_factor
from common.tuners._space import NATIVE_BYTES

__all__ = [
    "CANDIDATE_FEATURES",
    "FEATURE_VERSION",
    "KNOWN_MODELS",
    "SEQ_FEATURES",
    "SEQ_LEN",
    "STATIC_FEATURES",
    "EncodedJob",
    "JobTracker",
    "MetaInput",
    "Sample",
    "anchor",
    "encode_candidates",
    "encode_job",
    "reference_s",
    "speed_from_target",
    "target_from_speed",
]

FEATURE_VERSION = 3  # 3: native on a parameter server counts one block per layer
SEQ_LEN = 64
SEQ_FEATURES = 8
KNOWN_MODELS: tuple[str, ...] = ("resnet50", "vgg16", "alexnet", "densenet121")
STATIC_FEATURES = 11 + len(KNOWN_MODELS) + 1
CANDIDATE_FEATURES = 9
ASSUMED_OVERHEAD_S = 100e-6  # per-chunk cost hint; the network learns the real one
ARCHS = ("ps", "allreduce")

Array = npt.NDArray[np.float32]


@dataclasses.dataclass(frozen=True, kw_only=True)
class MetaInput:
    """What the meta-network knows about a job (Table II plus per-layer gradient bytes).

    layer_backward_s, layer_bytes: per layer in forward order (index 0 nearest the input).
    bandwidth_down_bps, bandwidth_up_bps: measured B_d, B_u in bit/s (worker means).
    servers: parameter servers (ignored for all-reduce). model: a name, "" when unknown.
    """

    layer_backward_s: tuple[float, ...]
    layer_bytes: tuple[int, ...]
    workers: int
    arch: str
    bandwidth_down_bps: float
    bandwidth_up_bps: float
    servers: int = 1
    model: str = ""
    batch_size: int = 32

    def __post_init__(self) -> None:
        times = tuple(float(t) for t in self.layer_backward_s)
        sizes = tuple(int(b) for b in self.layer_bytes)
        object.__setattr__(self, "layer_backward_s", times)
        object.__setattr__(self, "layer_bytes", sizes)
        if not sizes or len(times) != len(sizes):
            raise ConfigError(f"layer_backward_s and layer_bytes must be non-empty and of one "
                              f"length, got {len(times)} and {len(sizes)}")
        if not all(math.isfinite(t) and t >= 0 for t in times) or sum(times) <= 0:
            raise ConfigError("layer_backward_s must be finite seconds >= 0 with a sum > 0, "
                              f"got sum={sum(times)!r}")
        if min(sizes) < 0 or sum(sizes) <= 0:
            raise ConfigError(f"layer_bytes must be >= 0 with a sum > 0, got min={min(sizes)}, "
                              f"sum={sum(sizes)}")
        for name, low in (("workers", 1), ("servers", 1), ("batch_size", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an int >= {low}, got {name}={value!r}")
        arch = str(self.arch).strip().lower().replace("-", "").replace("_", "")
        if arch not in ARCHS:
            raise ConfigError(f"arch must be one of {list(ARCHS)}, got arch={self.arch!r}")
        object.__setattr__(self, "arch", arch)
        for name in ("bandwidth_down_bps", "bandwidth_up_bps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) \
                    or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name} must be a finite number of bit/s > 0, "
                                  f"got {name}={value!r}")
        object.__setattr__(self, "model", str(self.model).strip().lower())

    @property
    def num_layers(self) -> int:
        return len(self.layer_bytes)

    @classmethod
    def from_observation(cls, obs: Any, *, servers: int = 1) -> MetaInput:
        """From a merged ``common.stats.Observation``: per-layer times and bandwidths averaged
        over the workers that measured them (a worker may time no step of a window), batch
        size recovered from speed x step time."""
        rows = [r for r in obs.layer_backward_s if r]
        if not rows or not obs.layer_bytes:
            raise ConfigError("the observation has no per-layer backward times or bytes; the "
                              "meta-network needs both (enable layer timing in the adapter)")
        down = [b for b in obs.bandwidth_down if b > 0]
        up = [b for b in obs.bandwidth_up if b > 0]
        times = np.mean(np.array(rows, dtype=np.float64), axis=0)
        n = int(obs.num_workers)
        batch = max(1, round(float(obs.speed) * float(obs.step_time_s) / n)) \
            if obs.step_time_s > 0 else 32
        return cls(layer_backward_s=tuple(float(t) for t in times),
                   layer_bytes=tuple(obs.layer_bytes), workers=n, arch=obs.arch,
                   bandwidth_down_bps=float(np.mean(down)) if down else 0.0,
                   bandwidth_up_bps=float(np.mean(up)) if up else 0.0, servers=servers,
                   model=obs.model, batch_size=batch)


class JobTracker:
    """The job as the meta-network is shown it, from its last ``history`` windows.

    One window's statistics move with the configuration in force: an adapter that does not
    time its links reports B_u, B_d as bytes over step time, so a slow configuration reads as a
    slow link (on the testbed, one TensorFlow job's windows read its 1 Gbit/s link as 57 Mbit/s
    under 16 KiB partitions and 882 under 512 KiB ones), and small partitions' CPU cost slows
    the measured layers. Scoring
    every candidate with one window's figures then carries that window's configuration into
    all of them. So the link is the best B_u, B_d among the recent windows (what the job has
    shown it can move) and each layer's time the median of theirs. A window of another job
    (other layers, workers or architecture) starts the history anew. The tuner and the
    dataset's testbed rows (``common.bench._collect``) both describe jobs this way.
    """

    def __init__(self, history: int = 8) -> None:
        if isinstance(history, bool) or not isinstance(history, int) or history < 1:
            raise ConfigError(f"history must be an int >= 1 window, got history={history!r}")
        self.history = history
        self._recent: collections.deque[MetaInput] = collections.deque(maxlen=history)
        self.job: MetaInput | None = None  # the latest ``update``'s answer

    def reset(self) -> None:
        self._recent.clear()
        self.job = None

    def keep_newest(self) -> None:
        """Forget all but the newest window (the environment changed: e.g. the link)."""
        while len(self._recent) > 1:
            self._recent.popleft()

    def update(self, window: MetaInput) -> MetaInput:
        """Add the newest window; the job as the recent windows describe it."""
        if self._recent:
            last = self._recent[-1]
            if (last.layer_bytes, last.workers, last.arch, last.servers) != \
                    (window.layer_bytes, window.workers, window.arch, window.servers):
                self._recent.clear()
        self._recent.append(window)
        if len(self._recent) == 1:
            self.job = window
            return window
        times = np.median(np.array([w.layer_backward_s for w in self._recent]), axis=0)
        self.job = dataclasses.replace(
            window, layer_backward_s=tuple(float(t) for t in times),
            bandwidth_down_bps=max(w.bandwidth_down_bps for w in self._recent),
            bandwidth_up_bps=max(w.bandwidth_up_bps for w in self._recent))
        return self.job


@dataclasses.dataclass(frozen=True)
class Sample:
    """One observation of a job: ``speed`` samples/s (a window's mean) under (partition,
    credit) in bytes."""

    job: MetaInput
    partition_bytes: int
    credit_bytes: int
    speed: float


@dataclasses.dataclass(frozen=True)
class EncodedJob:
    """One job's network inputs: ``sequence`` (SEQ_LEN, SEQ_FEATURES), ``static``
    (STATIC_FEATURES,), plus what candidate encoding and de-normalisation need.

    ``native_blocks``: how many blocks the framework's own path sends a step: one pack in
    all-reduce, one key per tensor on a parameter server (a layer with bytes stands for its
    tensors, as in the simulator), so native's per-block cost is seen where it is paid."""

    sequence: Array
    static: Array
    layer_bytes: npt.NDArray[np.float64]
    ref_s: float
    comm_s: float
    total_bytes: float
    samples_per_step: int
    native_blocks: int


def reference_s(job: MetaInput) -> tuple[float, float]:
    """(ref_s, comm_s): no-overlap iteration time and its communication part."""
    compute = 1.5 * math.fsum(job.layer_backward_s)
    rate = min(job.bandwidth_down_bps, job.bandwidth_up_bps)
    comm = 8.0 * sum(job.layer_bytes) * comm_factor(job.arch, job.workers, job.servers) / rate
    return compute + comm, comm


def target_from_speed(speed: npt.ArrayLike, samples_per_step: npt.ArrayLike,
                      ref_s: npt.ArrayLike) -> Array:
    """log(iteration_s / ref_s) from samples/s (samples_per_step = workers x batch)."""
    iteration = np.asarray(samples_per_step, np.float64) / np.asarray(speed, np.float64)
    out: Array = np.log(iteration / np.asarray(ref_s, np.float64)).astype(np.float32)
    return out


def speed_from_target(target: npt.ArrayLike, samples_per_step: npt.ArrayLike,
                      ref_s: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The inverse of ``target_from_speed``: samples/s."""
    iteration = np.asarray(ref_s, np.float64) * np.exp(np.asarray(target, np.float64))
    speed: npt.NDArray[np.float64] = np.asarray(samples_per_step, np.float64) / iteration
    return speed


ANCHOR_WEIGHT = 0.5  # how far, in log terms, native's measurement moves the predictions


def anchor(predicted: npt.ArrayLike, predicted_native: float,
           measured_native: float) -> npt.NDArray[np.float64]:
    """Predicted speeds moved ``ANCHOR_WEIGHT`` of the way, in log terms, from the network's
    prediction of native to its measurement: every job measures native first, and on an
    architecture the network never saw much of its error is one factor shared by the job's
    configurations (compute outside the timed layers, CPU contention), but native's own path
    also differs from the scheduled ones. Left out one architecture at a time on testbed_v4,
    weights 0, 0.25, 0.5, 0.75 and 1 gave MAPE 10.8/9.3/9.6/11.5/14.8% in MXNet and
    19.4/17.2/16.0/15.8/17.4% in TensorFlow (the network before fine-tuning on real runs:
    31.8/25.6/20.4/18.9/21.9% and 38.5/32.0/25.0/19.7/21.0%). The ranking is unchanged."""
    scale = measured_native / predicted_native if predicted_native > 0 and \
        measured_native > 0 else 1.0
    out: npt.NDArray[np.float64] = np.asarray(predicted, np.float64) * scale ** ANCHOR_WEIGHT
    return out


def model_slot(model: str, vocabulary: Sequence[str] = KNOWN_MODELS) -> int:
    """One-hot slot of a known model the network was trained on (``vocabulary``); any other
    name (and "") shares the last slot, so an unseen model is judged by its layers alone."""
    name = model.strip().lower().replace("-", "").replace("_", "")
    return KNOWN_MODELS.index(name) if name in vocabulary and name in KNOWN_MODELS \
        else len(KNOWN_MODELS)


def encode_job(job: MetaInput, *, vocabulary: Sequence[str] = KNOWN_MODELS) -> EncodedJob:
    """Encode the job once; candidates are encoded against it with ``encode_candidates``."""
    ref, comm = reference_s(job)
    times = np.asarray(job.layer_backward_s[::-1], np.float64)  # backward order
    sizes = np.asarray(job.layer_bytes[::-1], np.float64)
    groups = np.array_split(np.arange(len(times)), min(SEQ_LEN, len(times)))
    t = np.array([times[g].sum() for g in groups])
    s = np.array([sizes[g].sum() for g in groups])
    counts = np.array([len(g) for g in groups], np.float64)
    k = len(groups)
    t_frac, s_frac = t / t.sum(), s / s.sum()
    backward = float(times.sum())
    seq = np.zeros((SEQ_LEN, SEQ_FEATURES), np.float32)
    ratio = np.log((s_frac * comm + 1e-9) / (t_frac * backward + 1e-9))
    seq[:k] = np.stack([
        t_frac * k, s_frac * k,
        np.log(t_frac * k + 1e-2) / 3, np.log(s_frac * k + 1e-2) / 3,
        np.cumsum(t_frac), np.cumsum(s_frac),
        counts / counts.mean(), np.clip(ratio / 5, -3, 3),
    ], axis=1)
    static = np.zeros(STATIC_FEATURES, np.float32)
    static[:11] = [
        math.log2(job.workers) / 7,
        job.arch == "ps", job.arch == "allreduce",
        math.log2(job.servers) / 7 if job.arch == "ps" else 0.0,
        math.log10(job.bandwidth_down_bps / 1e9), math.log10(job.bandwidth_up_bps / 1e9),
        math.log10(job.num_layers) / 2,
        math.log10(sizes.sum() / 1e8),
        math.log10(backward / 0.1),
        max(-3.0, min(3.0, math.log((comm + 1e-9) / (1.5 * backward)) / 3)),
        math.log10(job.batch_size / 32),
    ]
    static[11 + model_slot(job.model, vocabulary)] = 1.0
    native_blocks = int(np.count_nonzero(sizes)) if job.arch == "ps" else 1
    return EncodedJob(seq, static, np.asarray(job.layer_bytes, np.float64), ref, comm,
                      float(sizes.sum()), job.workers * job.batch_size, native_blocks)


def encode_candidates(job: EncodedJob, partitions: npt.ArrayLike,
                      credits: npt.ArrayLike) -> Array:
    """(C, CANDIDATE_FEATURES) for candidate partition and credit sizes in bytes."""
    p = np.asarray(partitions, np.float64).reshape(-1)
    c = np.asarray(credits, np.float64).reshape(-1)
    if p.shape != c.shape or p.size == 0 or np.any(p < 1) or np.any(c < p):
        raise ConfigError(f"candidates need partitions >= 1 byte and credits >= their "
                          f"partition, one each, got {p.size} partitions and {c.size} credits")
    sizes = job.layer_bytes[job.layer_bytes > 0]
    chunks = np.where(p >= NATIVE_BYTES, job.native_blocks,
                      np.ceil(job.total_bytes / p))  # the plan's fused blocks
    split = (sizes[None, :] * (sizes[None, :] > p[:, None])).sum(axis=1) / job.total_bytes
    per_byte = job.comm_s / job.total_bytes
    ref = job.ref_s
    out = np.stack([
        (np.log2(p) - 22) / 6, (c / p - 8.5) / 4.6,
        np.log(p / job.total_bytes) / 5, np.log(chunks) / 5,
        np.log(chunks * ASSUMED_OVERHEAD_S / ref) / 3, np.log(c / job.total_bytes) / 5,
        split,
        np.log(np.minimum(p, job.total_bytes) * per_byte / ref + 1e-9) / 5,
        np.log(np.minimum(c, job.total_bytes) * per_byte / ref + 1e-9) / 5,
    ], axis=1)
    result: Array = out.astype(np.float32)
    return result


"""The simulator as a prior on the network's best candidates, once native is measured.

The network learns from a handful of architectures; the simulator (``common.sim``) runs the
plan that runs, on the job's own measured layers and link, for any architecture. Neither is
right alone on a model the network never saw (left out one architecture at a time, see
datasets/SCHEMA.md: the network's anchored speeds miss by 11-13%, the simulator's by 10% in
TensorFlow and 11% in MXNet), but their errors differ, so the tuner ranks by a mix of the two
in log terms. A simulated block costs what one costs on this kind of machine (``BLOCK_COST``),
and the link runs at a multiple of the rate a window measures (``LINK_SCALE``).
The simulator's forward time is what is left of native's measured step after its simulated
communication, so its speeds say how each configuration differs from native, not how fast the
machine is; it costs about 10 us a block (a 64 KiB partition of ResNet-50: 1,559 blocks,
13 ms), so only native and the network's ``SHORTLIST`` best are simulated, as far as
``BLOCK_BUDGET`` blocks in all go (best first: a shortlisted candidate beyond it keeps the
anchored score).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from common.config import Config
from common.meta._features import MetaInput, anchor
from common.sim import Layer, Profile, simulate
from common.tuners import NATIVE_BYTES

__all__ = ["BLOCK_BUDGET", "BLOCK_COST", "LINK_SCALE", "NATIVE_WINDOWS", "PRIOR_WEIGHT",
           "SHORTLIST", "score", "simulated_speeds"]

# What one block costs here, by arch: (the transfer's own start-up, off the compute path; the
# compute it takes from the worker), fitted to the testbed runs' ratios to native by
# benchmarks/block_cost_fit.py. A TensorFlow collective takes about a millisecond of the cores
# that compute; an MXNet key's cost fits best off the compute path.
BLOCK_COST: dict[str, tuple[float, float]] = {"allreduce": (0.25e-3, 1e-3), "ps": (1e-3, 0.0)}
# The link's rate as the simulator runs it over the rate a window measures (bytes over the union
# of the transfers' busy intervals), by arch, fitted the same way. A busy interval holds more
# than the wire's time: a PS key's push and then its pull, each transfer's per-message costs on
# the shared cores, the wait for the other workers (the measured rate reads 0.3-1.2 of the
# testbed's shaped one, whose token bucket also lets 256 KiB through at once after a pause).
LINK_SCALE: dict[str, float] = {"allreduce": 2.0, "ps": 3.0}
# the simulator's share, in log terms, of a shortlisted candidate's score: larger where it fits
# the runs better (left out one architecture at a time: datasets/SCHEMA.md)
PRIOR_WEIGHT: dict[str, float] = {"allreduce": 0.5, "ps": 0.5}
SHORTLIST = 12  # the network's best candidates the simulator scores too
BLOCK_BUDGET = 2000  # blocks simulated per scoring: about 20 ms here
NATIVE_WINDOWS = 8  # native's recent windows whose median is its measurement


def simulated_speeds(job: MetaInput, partitions: npt.ArrayLike, credits: npt.ArrayLike,
                     native_speed: float, *, block_cost: tuple[float, float] | None = None,
                     link_scale: float | None = None) -> npt.NDArray[np.float64]:
    """Samples/s of each (partition, credit) in bytes (``NATIVE_BYTES``: native) as the
    simulator runs it on ``job``'s layers and link, its forward time set so native's simulated
    step takes what native measured (``native_speed`` samples/s), a block costing
    ``block_cost`` and the link running at ``link_scale`` times the job's measured rate
    (defaults: the job's framework's, ``BLOCK_COST`` and ``LINK_SCALE``)."""
    scale = LINK_SCALE[job.arch] if link_scale is None else link_scale
    rate = scale * max(job.bandwidth_down_bps, job.bandwidth_up_bps)
    overhead_s, cpu_s = BLOCK_COST[job.arch] if block_cost is None else block_cost
    backward = math.fsum(job.layer_backward_s)

    def profile(forward_s: float) -> Profile:
        return Profile("job", tuple(
            Layer(f"l{i}", nbytes, forward_s * t / backward, t)
            for i, (nbytes, t) in enumerate(zip(job.layer_bytes, job.layer_backward_s,
                                                strict=True))), job.batch_size)

    def step_s(run: Profile, config: Config) -> float:
        return simulate(run, config, workers=job.workers, arch=job.arch, servers=job.servers,
                        bandwidth=rate, overhead_s=overhead_s, block_cpu_s=cpu_s,
                        trace=False).iteration_s

    native = Config(scheduling=False)
    measured_s = job.workers * job.batch_size / native_speed
    run = profile(max(0.0, measured_s - step_s(profile(0.0), native)))
    native_s = step_s(run, native)
    return np.array([native_speed * native_s / step_s(run, native if p >= NATIVE_BYTES else
                                                      Config(partition_bytes=int(p),
                                                             credit_bytes=int(c)))
                     for p, c in zip(np.asarray(partitions).tolist(),
                                     np.asarray(credits).tolist(), strict=True)], np.float64)


def score(job: MetaInput, partitions: npt.ArrayLike, credits: npt.ArrayLike,
          predicted: npt.ArrayLike, native_speed: float | None) -> npt.NDArray[np.float64]:
    """What the tuner ranks by: the network's ``predicted`` speeds, and once native is measured
    (``native_speed``), those anchored to it (``anchor``) with native and the ``SHORTLIST`` best
    (within ``BLOCK_BUDGET``) mixed with the simulator's (``PRIOR_WEIGHT`` of the job's arch, in
    log terms).
    Unchanged without native among the candidates."""
    raw = np.asarray(predicted, np.float64)
    parts = np.asarray(partitions, np.int64)
    natives = np.flatnonzero(parts >= NATIVE_BYTES)
    if native_speed is None or not native_speed > 0 or not len(natives):
        return raw
    at = int(natives[0])
    out = anchor(raw, float(raw[at]), native_speed)
    total = sum(job.layer_bytes)
    budget = BLOCK_BUDGET - job.num_layers
    chosen = [at]
    for i in [int(i) for i in np.argsort(-out, kind="stable") if i != at][:SHORTLIST]:
        blocks = max(job.num_layers, -(-total // max(1, int(parts[i]))))
        if blocks <= budget:
            chosen.append(i)
            budget -= blocks
    prior = simulated_speeds(job, parts[chosen], np.asarray(credits, np.int64)[chosen],
                             native_speed)
    weight = PRIOR_WEIGHT[job.arch]
    out[chosen] = np.exp((1 - weight) * np.log(out[chosen]) + weight * np.log(prior))
    return out

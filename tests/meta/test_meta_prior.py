"""The simulator as a prior (numpy and the simulator only, no Keras): calibrated to native's
measurement, mixed into the network's best candidates only, and what the tuner ranks by."""

from __future__ import annotations

import dataclasses
import math
import types

import numpy as np
import pytest

from common.config import Config
from common.meta import MetaInput, MetaTuner
from common.meta._prior import (
    BLOCK_BUDGET,
    BLOCK_COST,
    LINK_SCALE,
    PRIOR_WEIGHT,
    SHORTLIST,
    score,
    simulated_speeds,
)
from common.sim import Layer, Profile, simulate
from common.testing.meta import FixedPredictor
from common.tuners import NATIVE_BYTES

JOB = MetaInput(layer_backward_s=(0.004, 0.012, 0.02, 0.03),
                layer_bytes=(1 << 20, 2 << 20, 3 << 20, 4 << 20), workers=2, arch="allreduce",
                bandwidth_down_bps=1e9, bandwidth_up_bps=1e9, batch_size=32)
PARTS = np.array([NATIVE_BYTES, 1 << 18, 1 << 20, 4 << 20])
CREDITS = np.array([NATIVE_BYTES, 1 << 20, 4 << 20, 16 << 20])
WEIGHT = PRIOR_WEIGHT[JOB.arch]


def test_the_simulator_runs_the_job_at_natives_measured_speed_and_ranks_overlap() -> None:
    """Native comes out at its measurement; the others keep the ratio to native the simulator
    gives them with the forward time that measurement leaves (overlapping a communication-bound
    step beats one pack sent after the backward pass)."""
    speeds = simulated_speeds(JOB, PARTS, CREDITS, 100.0)
    assert speeds[0] == pytest.approx(100.0)
    step_s = JOB.workers * JOB.batch_size / 100.0

    def sim(forward: float, config: Config) -> float:
        profile = Profile("job", tuple(
            Layer(f"l{i}", b, forward * t / sum(JOB.layer_backward_s), t)
            for i, (b, t) in enumerate(zip(JOB.layer_bytes, JOB.layer_backward_s,
                                           strict=True))), 32)
        overhead_s, cpu_s = BLOCK_COST["allreduce"]
        return simulate(profile, config, workers=2, bandwidth=LINK_SCALE["allreduce"] * 1e9,
                        overhead_s=overhead_s, block_cpu_s=cpu_s, trace=False).iteration_s

    forward = step_s - sim(0.0, Config(scheduling=False))
    assert forward > 0
    ratio = sim(forward, Config(scheduling=False)) / sim(
        forward, Config(partition_bytes=1 << 20, credit_bytes=4 << 20))
    assert speeds[2] == pytest.approx(100.0 * ratio)
    assert speeds[2] > speeds[0]
    # a dearer block costs the finest partition most, off the compute path or on it
    free = simulated_speeds(JOB, PARTS, CREDITS, 100.0, block_cost=(0.0, 0.0))
    for cost in ((0.02, 0.0), (0.0, 0.02)):
        dear = simulated_speeds(JOB, PARTS, CREDITS, 100.0, block_cost=cost)
        assert dear[1] / free[1] < dear[3] / free[3] <= 1.0, cost


def test_the_link_runs_at_the_measured_rate_times_the_scale() -> None:
    """The measured rate under-reads the wire (``LINK_SCALE``): a scale is the same as a job
    that measured that much more, and a slower link makes overlapping worth more."""
    default = simulated_speeds(JOB, PARTS, CREDITS, 100.0)
    assert np.array_equal(default, simulated_speeds(JOB, PARTS, CREDITS, 100.0,
                                                    link_scale=LINK_SCALE[JOB.arch]))
    faster = dataclasses.replace(JOB, bandwidth_down_bps=3e9, bandwidth_up_bps=3e9)
    assert np.allclose(simulated_speeds(JOB, PARTS, CREDITS, 100.0, link_scale=3.0),
                       simulated_speeds(faster, PARTS, CREDITS, 100.0, link_scale=1.0))
    slow = simulated_speeds(JOB, PARTS, CREDITS, 100.0, link_scale=0.5)
    assert slow[2] / slow[0] > default[2] / default[0] > 1.0


def test_without_natives_measurement_the_networks_speeds_stand() -> None:
    raw = np.array([300.0, 200.0, 250.0, 100.0])
    assert np.array_equal(score(JOB, PARTS, CREDITS, raw, None), raw)
    assert np.array_equal(score(JOB, PARTS[1:], CREDITS[1:], raw[1:], 150.0), raw[1:])


def test_the_shortlist_and_native_mix_with_the_simulator_the_rest_is_anchored() -> None:
    count = SHORTLIST + 4
    parts = np.array([NATIVE_BYTES] + [(1 << 16) << (i % 10) for i in range(count)])
    credits = np.array([NATIVE_BYTES] + [p * (1 + i % 3) for i, p in enumerate(parts[1:])])
    raw = np.array([400.0] + [200.0 + i for i in range(count)])  # the last ones rank first
    out = score(JOB, parts, credits, raw, 100.0)
    factor = math.sqrt(100.0 / 400.0)  # the anchor: halfway to native's measurement
    prior = simulated_speeds(JOB, parts, credits, 100.0)
    mixed = np.exp((1 - WEIGHT) * np.log(raw * factor) + WEIGHT * np.log(prior))
    best = np.argsort(-raw[1:])[:SHORTLIST] + 1
    rest = sorted(set(range(1, count + 1)) - set(best.tolist()))
    np.testing.assert_allclose(out[best], mixed[best])
    np.testing.assert_allclose(out[rest], raw[rest] * factor)
    assert out[0] == pytest.approx(math.exp((1 - WEIGHT) * math.log(200.0)
                                            + WEIGHT * math.log(100.0)))


def test_candidates_past_the_block_budget_keep_the_anchored_score() -> None:
    """The network's best is a partition that cuts the model into more blocks than the budget
    (the simulator's cost grows with blocks): it is passed over, the next ones are mixed."""
    parts = np.array([NATIVE_BYTES, 4096, 1 << 20, 4 << 20])
    credits = np.array([NATIVE_BYTES, 4096, 1 << 20, 4 << 20])
    assert sum(JOB.layer_bytes) // 4096 > BLOCK_BUDGET
    raw = np.array([100.0, 400.0, 300.0, 200.0])
    out = score(JOB, parts, credits, raw, 100.0)
    assert out[1] == pytest.approx(400.0)  # anchored by 1: native measured as predicted
    prior = simulated_speeds(JOB, parts[2:], credits[2:], 100.0)
    np.testing.assert_allclose(out[2:], raw[2:] ** (1 - WEIGHT) * prior ** WEIGHT)


def observation() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        window=3, layer_backward_s=(JOB.layer_backward_s,), layer_bytes=JOB.layer_bytes,
        num_workers=2, arch="allreduce", bandwidth_down=(1e9,), bandwidth_up=(1e9,), model="",
        speed=100.0, step_time_s=0.64)


def test_the_tuner_ranks_by_the_same_score_once_native_is_measured() -> None:
    """The network prefers 4 MiB blocks; the simulator, given native's measured 100 samples/s,
    sees what each block size overlaps: the tuner's scores are ``score``'s, its proposal their
    argmax, and native's windows (median) are what calibrates the prior."""
    network = FixedPredictor(lambda p, c: 150.0 if p >= NATIVE_BYTES else
                             200.0 - abs(math.log2(p) - 22) * 5)
    tuner = MetaTuner(predictor=network)
    tuner.observe_window(observation())
    before = tuner.scores().copy()
    for seen in (90.0, 100.0, 130.0):
        tuner.observe(Config(scheduling=False), seen)
    job = tuner.job
    assert job is not None
    parts, credits = tuner._encoded[:, 0], tuner._encoded[:, 1]
    expected = score(job, parts, credits, before, 100.0)
    np.testing.assert_allclose(tuner.scores(), expected)
    assert not np.allclose(expected, before)
    assert tuner.propose() == tuner.candidates()[int(np.argmax(expected))]

"""Feature encoding (numpy only, no Keras): shapes, padding and bucketing, normalisation,
the target's round trip, candidate features and the mapping from a stats Observation."""

from __future__ import annotations

import types

import numpy as np
import pytest

from common.errors import ConfigError
from common.meta import SEQ_LEN, JobTracker, MetaInput, encode_candidates, encode_job
from common.meta._features import (
    CANDIDATE_FEATURES,
    KNOWN_MODELS,
    SEQ_FEATURES,
    STATIC_FEATURES,
    reference_s,
    speed_from_target,
    target_from_speed,
)
from common.sim import get_profile
from common.tuners import NATIVE_BYTES


def job_of(name: str, **kw: object) -> MetaInput:
    p = get_profile(name)
    args: dict[str, object] = {
        "layer_backward_s": tuple(x.backward_s for x in p.layers),
        "layer_bytes": tuple(x.nbytes for x in p.layers), "workers": 8, "arch": "allreduce",
        "bandwidth_down_bps": 10e9, "bandwidth_up_bps": 10e9, "model": name}
    args.update(kw)
    return MetaInput(**args)  # type: ignore[arg-type]


def test_short_model_is_padded_with_a_masked_tail() -> None:
    job = job_of("alexnet")  # 8 layers
    enc = encode_job(job)
    assert enc.sequence.shape == (SEQ_LEN, SEQ_FEATURES)
    assert enc.static.shape == (STATIC_FEATURES,)
    assert np.all(enc.sequence[job.num_layers:] == 0)
    assert np.all(np.any(enc.sequence[:job.num_layers] != 0, axis=1))
    # cumulative time and byte fractions end at 1 on the last real step
    np.testing.assert_allclose(enc.sequence[job.num_layers - 1, 4:6], [1.0, 1.0], rtol=1e-6)
    # backward order: the first step is the output layer (AlexNet's last FC)
    fractions = enc.sequence[:job.num_layers, 1] / job.num_layers
    expected = np.array(job.layer_bytes[::-1]) / sum(job.layer_bytes)
    np.testing.assert_allclose(fractions, expected, rtol=1e-5)


def test_long_model_is_bucketed_keeping_totals() -> None:
    job = job_of("densenet121")
    assert job.num_layers > SEQ_LEN
    enc = encode_job(job)
    assert np.all(np.any(enc.sequence != 0, axis=1))  # every step is a real bucket
    np.testing.assert_allclose(enc.sequence[:, 1].sum() / SEQ_LEN, 1.0, rtol=1e-5)
    np.testing.assert_allclose(enc.sequence[:, 0].sum() / SEQ_LEN, 1.0, rtol=1e-5)
    counts = enc.sequence[:, 6] * job.num_layers / SEQ_LEN
    assert round(float(counts.sum())) == job.num_layers


def test_static_features_are_normalised_and_one_hot() -> None:
    for name in KNOWN_MODELS:
        enc = encode_job(job_of(name, workers=128, arch="ps", servers=4,
                                bandwidth_down_bps=0.1e9, bandwidth_up_bps=100e9))
        assert np.all(np.abs(enc.static) <= 3.5), name
        slots = enc.static[11:]
        assert slots.sum() == 1 and slots[KNOWN_MODELS.index(name)] == 1
    unseen = encode_job(job_of("vgg16", model="my-new-net"))
    assert unseen.static[-1] == 1  # unknown models share the last slot
    # a known model outside the training vocabulary is judged as unknown too
    assert encode_job(job_of("vgg16"), vocabulary=("resnet50",)).static[-1] == 1


def test_target_round_trip_and_reference() -> None:
    job = job_of("resnet50")
    ref, comm = reference_s(job)
    assert comm == pytest.approx(8 * sum(job.layer_bytes) * 2 * 7 / 8 / 10e9)
    assert ref == pytest.approx(1.5 * sum(job.layer_backward_s) + comm)
    speeds = np.array([10.0, 100.0, 1000.0])
    target = target_from_speed(speeds, 256, ref)
    np.testing.assert_allclose(speed_from_target(target, 256, ref), speeds, rtol=1e-5)


def test_candidate_features_follow_the_partition() -> None:
    enc = encode_job(job_of("vgg16"))
    parts = np.array([4096, 1 << 20, 1 << 30])
    feats = encode_candidates(enc, parts, parts * 4)
    assert feats.shape == (3, CANDIDATE_FEATURES)
    assert np.all(np.isfinite(feats))
    assert np.all(np.diff(feats[:, 0]) > 0)  # log partition rises
    assert np.all(np.diff(feats[:, 3]) < 0)  # fewer chunks
    assert feats[0, 6] == pytest.approx(1.0) and feats[2, 6] == 0  # share of bytes split
    np.testing.assert_allclose(feats[:, 1], (4 - 8.5) / 4.6)
    with pytest.raises(ConfigError, match="credits >= their partition"):
        encode_candidates(enc, parts, parts // 2)


def test_native_counts_the_blocks_its_framework_sends() -> None:
    """One pack in all-reduce; on a parameter server one key per layer with bytes, which is
    more blocks than the largest scheduled partition makes of the same model."""
    candidates = np.array([NATIVE_BYTES, 64 << 20]), np.array([NATIVE_BYTES, 64 << 20])
    job = job_of("resnet50")
    layers = sum(1 for b in job.layer_bytes if b)
    ring = encode_candidates(encode_job(job), *candidates)
    ps = encode_candidates(encode_job(job_of("resnet50", arch="ps")), *candidates)
    assert ring[0, 3] == 0 and ps[0, 3] == pytest.approx(np.log(layers) / 5)  # log(blocks) / 5
    assert ps[0, 3] > ps[1, 3] and ring[0, 3] <= ring[1, 3]
    np.testing.assert_array_equal(ring[:, [0, 1, 2, 6]], ps[:, [0, 1, 2, 6]])  # same sizes


@pytest.mark.parametrize("bad, match", [
    ({"workers": 0}, "workers must be an int >= 1"),
    ({"arch": "mesh"}, "arch must be one of"),
    ({"bandwidth_up_bps": -1.0}, "bandwidth_up_bps must be"),
    ({"layer_bytes": (1, 2)}, "of one length"),
])
def test_invalid_inputs_name_the_value(bad: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        job_of("alexnet", **bad)


def test_from_observation_averages_workers() -> None:
    obs = types.SimpleNamespace(
        layer_backward_s=((0.01, 0.03), (0.03, 0.05)), layer_bytes=(1000, 4000),
        num_workers=2, arch="ps", bandwidth_down=(1e9, 3e9), bandwidth_up=(2e9, 2e9),
        model="resnet50", speed=640.0, step_time_s=0.1)
    job = MetaInput.from_observation(obs)
    assert job.layer_backward_s == pytest.approx((0.02, 0.04))
    assert job.bandwidth_down_bps == pytest.approx(2e9)
    assert job.batch_size == 32  # 640 samples/s x 0.1 s / 2 workers
    # a worker that timed no step of the window measured no link and no layers
    obs.layer_backward_s, obs.bandwidth_down = ((0.01, 0.03), ()), (0.0, 3e9)
    job = MetaInput.from_observation(obs)
    assert job.layer_backward_s == pytest.approx((0.01, 0.03))
    assert job.bandwidth_down_bps == pytest.approx(3e9)
    obs.bandwidth_down = (0.0, 0.0)
    with pytest.raises(ConfigError, match="bandwidth_down_bps must be"):
        MetaInput.from_observation(obs)
    obs.layer_backward_s = ()
    with pytest.raises(ConfigError, match="per-layer backward times"):
        MetaInput.from_observation(obs)


def test_tracker_takes_the_best_recent_link_and_median_layer_times() -> None:
    def window(bandwidth: float, times: tuple[float, float], workers: int = 2) -> MetaInput:
        return MetaInput(layer_backward_s=times, layer_bytes=(1000, 4000), workers=workers,
                         arch="ps", bandwidth_down_bps=bandwidth,
                         bandwidth_up_bps=bandwidth / 2)

    tracker = JobTracker(history=3)
    first = window(100e6, (0.01, 0.02))
    assert tracker.update(first) == first  # one window: itself
    tracker.update(window(300e6, (0.05, 0.02)))  # a good configuration's window
    slow = tracker.update(window(50e6, (0.02, 0.08)))  # a slow one: the link is not slower
    assert slow.bandwidth_down_bps == 300e6 and slow.bandwidth_up_bps == 150e6
    assert slow.layer_backward_s == pytest.approx((0.02, 0.02))  # per-layer medians
    assert slow.workers == 2 and slow.layer_bytes == (1000, 4000)
    # the good window leaves the history after three more
    for _ in range(2):
        later = tracker.update(window(60e6, (0.02, 0.02)))
    assert later.bandwidth_down_bps == 60e6
    # another job (other workers) starts anew; keep_newest forgets all but the newest
    other = tracker.update(window(80e6, (0.03, 0.03), workers=4))
    assert other.bandwidth_down_bps == 80e6 and other.workers == 4
    tracker.update(window(400e6, (0.03, 0.03), workers=4))
    tracker.keep_newest()
    assert tracker.update(window(90e6, (0.03, 0.03), workers=4)).bandwidth_down_bps == 400e6
    tracker.keep_newest()
    assert tracker.update(window(70e6, (0.03, 0.03), workers=4)).bandwidth_down_bps == 90e6
    with pytest.raises(ConfigError, match="history must be an int >= 1 window, got history=0"):
        JobTracker(history=0)

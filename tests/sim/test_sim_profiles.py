"""Shipped profiles come from the real architectures; random profiles are valid and seeded."""

import math

import numpy as np
import pytest

from common.errors import ConfigError
from common.sim import (
    DEFAULT_DEVICE_FLOPS,
    MODELS,
    BandwidthSchedule,
    Layer,
    Profile,
    get_profile,
    random_profile,
)

# torchvision's published parameter counts; layer units are conv/FC with their BN
KNOWN = {
    "resnet50": (25_557_032, 54, 4.09e9),
    "vgg16": (138_357_544, 16, 15.47e9),
    "alexnet": (61_100_840, 8, 0.714e9),
    "densenet121": (7_978_856, 121, 2.83e9),
}


@pytest.mark.parametrize("model", MODELS)
def test_parameter_totals_match_the_real_architectures(model: str) -> None:
    params, layers, macs = KNOWN[model]
    profile = get_profile(model)
    assert profile.total_bytes == 4 * params
    assert len(profile.layers) == layers
    assert all(layer.nbytes > 0 and layer.nbytes % 4 == 0 for layer in profile.layers)
    # compute from FLOPs: 2 FLOPs per multiply-add, batch 32, default device speed
    flops = profile.forward_s * DEFAULT_DEVICE_FLOPS / profile.batch_size
    assert flops == pytest.approx(2 * macs, rel=0.02)
    assert profile.backward_s == pytest.approx(2 * profile.forward_s)


def test_layer_sizes_are_the_real_ones() -> None:
    vgg = {x.name: x.nbytes // 4 for x in get_profile("vgg16").layers}
    assert vgg["conv1"] == 3 * 3 * 3 * 64 + 64
    assert vgg["fc6"] == 25088 * 4096 + 4096
    resnet = get_profile("resnet50").layers
    assert resnet[0].name == "conv1" and resnet[0].nbytes // 4 == 7 * 7 * 3 * 64 + 2 * 64
    assert resnet[-1].name == "fc" and resnet[-1].nbytes // 4 == 2048 * 1000 + 1000
    dense = {x.name: x.nbytes // 4 for x in get_profile("densenet121").layers}
    # pre-activation: BN over the 64 + 5*32 = 224 input channels, then a 1x1 conv to 128
    assert dense["denseblock1.layer6.conv1"] == 2 * 224 + 224 * 128


def test_compute_scale_batch_and_device_speed() -> None:
    base = get_profile("resnet50")
    slow = get_profile("resnet50", compute_scale=2.0)
    assert slow.compute_s == pytest.approx(2 * base.compute_s)
    assert slow.total_bytes == base.total_bytes
    assert get_profile("resnet50", batch_size=64).compute_s == pytest.approx(2 * base.compute_s)
    fast = get_profile("resnet50", device_flops=2 * DEFAULT_DEVICE_FLOPS)
    assert fast.compute_s == pytest.approx(base.compute_s / 2)
    assert base.scaled(3.0).compute_s == pytest.approx(3 * base.compute_s)
    assert get_profile("ResNet-50").name == "resnet50"


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"name": "lenet"}, "model must be one of"),
    ({"name": "vgg16", "compute_scale": 0}, "compute_scale"),
    ({"name": "vgg16", "batch_size": 0}, "batch_size"),
    ({"name": "vgg16", "device_flops": -1.0}, "device_flops"),
])
def test_bad_profile_requests_name_the_value(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        get_profile(**kwargs)  # type: ignore[arg-type]


def test_layer_and_profile_validation() -> None:
    with pytest.raises(ConfigError, match="nbytes"):
        Layer("x", -4, 0.0, 0.0)
    with pytest.raises(ConfigError, match="backward_s"):
        Layer("x", 4, 0.0, math.nan)
    with pytest.raises(ConfigError, match="non-empty"):
        Profile(name="empty", layers=(), batch_size=1)
    with pytest.raises(ConfigError, match="bytes > 0"):
        Profile(name="nobytes", layers=(Layer("x", 0, 1.0, 1.0),), batch_size=1)
    p = get_profile("alexnet")
    assert Profile.from_dict(p.to_dict()) == p


def test_random_profile_is_seeded_and_within_ranges() -> None:
    a = random_profile(np.random.default_rng(7), layers=(5, 50), total_bytes=(1e6, 1e8),
                       compute_s=(0.01, 0.5))
    b = random_profile(np.random.default_rng(7), layers=(5, 50), total_bytes=(1e6, 1e8),
                       compute_s=(0.01, 0.5))
    c = random_profile(np.random.default_rng(8), layers=(5, 50), total_bytes=(1e6, 1e8),
                       compute_s=(0.01, 0.5))
    assert a == b and a != c
    for p in (a, c):
        assert 5 <= len(p.layers) <= 50
        assert 0.99e6 <= p.total_bytes <= 1.01e8
        assert 0.0099 <= p.compute_s <= 0.51
    with pytest.raises(ConfigError, match="layers"):
        random_profile(np.random.default_rng(0), layers=(0, 3))


def test_bandwidth_schedule_finish_time_crosses_segments() -> None:
    s = BandwidthSchedule([(1.0, 100.0), (1.0, 10.0)])  # 100 bit/s for 1 s, then 10 bit/s
    assert s.finish(0.0, 50) == pytest.approx(0.5)
    assert s.finish(0.5, 60) == pytest.approx(1.0 + 10 / 10)  # 50 bits, then 10 at 10 bit/s
    assert s.finish(1.5, 5) == pytest.approx(2.0)
    assert s.finish(1.5, 105) == pytest.approx(3.0)  # wraps into the next period
    assert s.finish(0.0, 3 * 110) == pytest.approx(6.0)  # whole periods
    assert s.rate_at(0.2) == 100.0 and s.rate_at(1.2) == 10.0 and s.rate_at(2.2) == 100.0
    assert s.mean_rate == pytest.approx(55.0) and s.peak_rate == 100.0
    assert BandwidthSchedule.parse("10gbit:20, 3gbit:20") == BandwidthSchedule(
        [(20, 10e9), (20, 3e9)])


@pytest.mark.parametrize("text", ["10gbit", "10gbit:0", "fast:3", "10gbit:x"])
def test_bad_bandwidth_schedules_are_rejected(text: str) -> None:
    with pytest.raises(ConfigError):
        BandwidthSchedule.parse(text)

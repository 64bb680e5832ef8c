"""The timeline: conservation, credit, order, bandwidth, bound, architectures, errors."""

import itertools
from collections import defaultdict

import numpy as np
import pytest

from common.config import Config
from common.errors import ConfigError
from common.plan import Send
from common.sim import (
    BandwidthSchedule,
    Layer,
    Profile,
    SimResult,
    get_profile,
    lower_bound,
    plan_order,
    random_profile,
    simulate,
)

KIB, MIB = 1024, 1024 * 1024


def cfg(partition: int, multiple: int = 1, **kw: object) -> Config:
    return Config(partition_bytes=partition, credit_bytes=partition * multiple,
                  **kw)  # type: ignore[arg-type]


def run(model: str = "resnet50", config: Config | None = None, **kw: object) -> SimResult:
    options: dict[str, object] = {"workers": 8, "arch": "allreduce", "bandwidth": "10gbit"}
    options.update(kw)
    return simulate(get_profile(model), config or cfg(MIB, 4), **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("arch", ["ps", "allreduce"])
def test_every_byte_is_sent_exactly_once_per_step(arch: str) -> None:
    profile = get_profile("densenet121")
    result = simulate(profile, cfg(256 * KIB, 3), workers=4, arch=arch, servers=2,
                      bandwidth="5gbit", steps=3)
    spans: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for send in result.trace:
        assert send.state == "done"
        assert send.t_ready is not None and send.t_start is not None
        assert send.t_done is not None
        assert send.t_ready <= send.t_start <= send.t_done
        for segment in send.block.segments:
            spans[send.step, segment.tensor].append((segment.start * 4, segment.stop * 4))
    steps = {step for step, _ in spans}
    assert len(steps) == 3
    tensors = [spec for spec in profile.layers if spec.nbytes]
    for step in steps:
        for t, spec in enumerate(tensors):
            got = sorted(spans[step, t])
            assert got[0][0] == 0 and got[-1][1] == spec.nbytes
            assert all(a[1] == b[0] for a, b in itertools.pairwise(got))
    assert sum(c.nbytes for c in result.trace) == 3 * profile.total_bytes


def inflight_peak(trace: tuple[Send, ...]) -> tuple[int, int]:
    """Largest bytes in flight at any instant and the largest single chunk."""
    events = sorted([(c.t_done, -c.nbytes) for c in trace] + [(c.t_start, c.nbytes)
                                                              for c in trace])
    level = peak = 0
    for _, delta in events:  # at equal times a completion (negative) comes first
        level += delta
        peak = max(peak, level)
    return peak, max(c.nbytes for c in trace)


@pytest.mark.parametrize(("partition", "multiple", "arch"), [
    (64 * KIB, 1, "allreduce"), (512 * KIB, 3, "allreduce"), (MIB, 16, "ps"), (4 * MIB, 2, "ps")])
def test_bytes_in_flight_never_exceed_the_credit(partition: int, multiple: int,
                                                 arch: str) -> None:
    result = run("vgg16", cfg(partition, multiple), arch=arch, servers=4)
    peak, biggest = inflight_peak(result.trace)
    assert peak <= max(partition * multiple, biggest)
    assert result.max_inflight_bytes == peak
    # the window is actually used: with a deep credit, several chunks are in flight together
    if multiple > 1:
        assert peak > partition


def test_front_layers_go_first_among_the_ready_chunks() -> None:
    result = run("resnet50", cfg(256 * KIB, 2))
    trace = result.trace
    jumps = 0
    for i, a in enumerate(trace):
        for b in trace[i + 1:]:
            assert b.t_ready is not None and a.t_start is not None
            if b.step == a.step and b.t_ready < a.t_start:  # b was waiting when a started
                assert a.block.index < b.block.index
            if b.step == a.step and b.block.index > a.block.index:
                jumps += 1
    assert jumps > 0  # some front block did jump ahead of a back tensor's later blocks


def test_plan_order_lets_ready_front_layers_jump_ahead() -> None:
    # a big back layer is ready first; two small front layers become ready while it is sent
    profile = Profile(name="toy", batch_size=1, layers=(
        Layer("front", 64 * KIB, 0.001, 0.001),
        Layer("mid", 64 * KIB, 0.001, 0.001),
        Layer("back", 1024 * KIB, 0.001, 0.001),
    ))
    order = plan_order(profile, cfg(64 * KIB, 1), workers=2, bandwidth="100mbit",
                       overhead_s=0.0, latency_s=0.0)
    assert order[0] == 2  # the back tensor (blocks 2..17) is ready first, whole
    assert order[1:3] == [0, 1]
    assert order[3:] == list(range(3, 18))
    assert plan_order(profile, cfg(64 * KIB, 1), workers=2, bandwidth=1e8, overhead_s=0.0,
                      latency_s=0.0) == order


def test_unscheduled_baseline_is_slower_than_scheduling() -> None:
    scheduled = run("resnet50", cfg(MIB, 4))
    fifo = run("resnet50", cfg(MIB, 4, scheduling=False))
    assert len(fifo.trace) == 1  # native all-reduce: one pack after the backward pass
    assert fifo.iteration_s > scheduled.iteration_s
    ps = run("resnet50", cfg(MIB, 4, scheduling=False), arch="ps")
    assert len(ps.trace) == sum(1 for x in get_profile("resnet50").layers if x.nbytes)


def test_bandwidth_and_its_changes_move_the_iteration_time() -> None:
    fast = run("vgg16", bandwidth="10gbit", steps=2).iteration_s
    slow = run("vgg16", bandwidth="3gbit", steps=2).iteration_s
    assert slow > 2.5 * fast
    schedule = BandwidthSchedule.parse("10gbit:0.5,3gbit:0.5")
    mixed = run("vgg16", bandwidth=schedule, steps=6)
    assert fast < mixed.iteration_s < slow
    assert len(set(round(s, 9) for s in mixed.step_s)) > 1  # steps see different rates
    # a schedule that never changes is the constant rate
    same = run("vgg16", bandwidth=BandwidthSchedule([(1.0, 10e9), (2.0, 10e9)]), steps=2)
    assert same.iteration_s == pytest.approx(fast)


def test_lower_bound_holds_and_is_tight_without_overheads() -> None:
    rng = np.random.default_rng(3)
    for i in range(12):
        profile = random_profile(rng, layers=(3, 40), total_bytes=(1e6, 2e8))
        arch = ("ps", "allreduce")[i % 2]
        config = cfg(int(rng.choice([16 * KIB, 256 * KIB, MIB, 8 * MIB])),
                     int(rng.integers(1, 17)))
        workers = int(rng.integers(1, 33))
        result = simulate(profile, config, workers=workers, arch=arch,
                          servers=int(rng.integers(1, 9)), bandwidth=float(rng.uniform(1e9, 2e10)))
        assert profile.compute_s <= result.lower_bound_s <= result.iteration_s * (1 + 1e-9)
    # fine partitions, no overhead or latency: the simulator reaches the bound
    tight = run("alexnet", cfg(64 * KIB, 1), overhead_s=0.0, latency_s=0.0)
    assert tight.iteration_s == pytest.approx(tight.lower_bound_s, rel=0.01)


def test_parameter_server_and_all_reduce_sanity() -> None:
    profile = get_profile("resnet50")
    config = cfg(MIB, 16)  # PS needs about n chunks in flight to fill a worker's link
    one = simulate(profile, config, workers=8, arch="ps", servers=1, bandwidth="10gbit")
    many = simulate(profile, config, workers=8, arch="ps", servers=8, bandwidth="10gbit")
    ring = simulate(profile, config, workers=8, arch="allreduce", bandwidth="10gbit")
    # one server carries all 8 workers' bytes: about 8x the traffic of a worker link
    assert one.iteration_s > 4 * many.iteration_s
    # ring all-reduce moves 2(n-1)/n of the bytes per direction, PS with n servers 1x
    assert many.iteration_s < ring.iteration_s
    # one worker alone with no overhead computes only
    alone = simulate(profile, config, workers=1, arch="allreduce", bandwidth="1gbit",
                     overhead_s=0.0)
    assert alone.iteration_s == pytest.approx(profile.compute_s)
    # more ring members: more bytes and more hops per chunk
    big = simulate(profile, config, workers=64, arch="allreduce", bandwidth="10gbit")
    assert big.iteration_s > ring.iteration_s
    assert ring.speed == pytest.approx(8 * profile.batch_size / ring.iteration_s)


def test_partition_and_credit_trade_off() -> None:
    tiny = run("resnet50", cfg(16 * KIB, 1)).iteration_s  # overhead and latency per chunk
    stop_and_wait = run("resnet50", cfg(MIB, 1)).iteration_s  # latency not hidden
    window = run("resnet50", cfg(MIB, 8)).iteration_s
    assert window < stop_and_wait < tiny


def test_results_are_deterministic() -> None:
    a = run("densenet121", cfg(128 * KIB, 5), arch="ps", servers=3)
    b = run("densenet121", cfg(128 * KIB, 5), arch="ps", servers=3)
    assert a.iteration_s == b.iteration_s
    assert [(c.block.index, c.t_done) for c in a.trace] == \
        [(c.block.index, c.t_done) for c in b.trace]


@pytest.mark.parametrize("arch", ["ps", "allreduce"])
def test_a_blocks_compute_cost_adds_to_the_step_whatever_the_link(arch: str) -> None:
    """``block_cpu_s`` is time nothing overlaps: each block of the step adds it once, so
    fine partitions pay most and native's one pack (all-reduce) pays once."""
    cost = 1e-3
    for config in (cfg(64 * KIB, 4), cfg(4 * MIB, 4), Config(scheduling=False)):
        for rate in ("1gbit", "100gbit"):
            free = run("resnet50", config, arch=arch, bandwidth=rate, trace=True)
            charged = run("resnet50", config, arch=arch, bandwidth=rate, block_cpu_s=cost)
            blocks = len({send.block.index for send in free.trace})
            assert charged.iteration_s == pytest.approx(free.iteration_s + cost * blocks)
            assert charged.lower_bound_s == free.lower_bound_s


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"workers": 0}, "workers must be an int between 1"),
    ({"workers": 2.5}, "workers"),
    ({"arch": "mesh"}, "arch must be one of"),
    ({"bandwidth": "fast"}, "bandwidth"),
    ({"bandwidth": -1.0}, "bandwidth"),
    ({"overhead_s": -1e-3}, "overhead_s"),
    ({"latency_s": float("inf")}, "latency_s"),
    ({"block_cpu_s": -1e-3}, "block_cpu_s"),
    ({"steps": 0}, "steps"),
    ({"servers": 0, "arch": "ps"}, "servers"),
])
def test_bad_arguments_name_the_value(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        run("alexnet", **kwargs)  # type: ignore[arg-type]


def test_lower_bound_is_exposed_for_planning() -> None:
    profile = get_profile("vgg16")
    bound = lower_bound(profile, workers=8, arch="allreduce", bandwidth=10e9)
    comm = 2 * 7 / 8 * profile.total_bytes * 8 / 10e9
    assert comm < bound < comm + profile.compute_s


def test_one_step_is_the_steady_state_at_a_constant_rate() -> None:
    # every step starts with the network idle (all chunks returned before the forward that
    # needs them), so with a constant bandwidth every iteration is the same
    result = run("resnet50", cfg(256 * KIB, 3), arch="ps", servers=4, steps=3)
    assert result.step_s[0] == pytest.approx(result.step_s[1]) == pytest.approx(result.step_s[2])
    assert result.iteration_s == pytest.approx(run("resnet50", cfg(256 * KIB, 3), arch="ps",
                                                   servers=4).iteration_s)


def test_plan_order_is_the_simulated_start_order() -> None:
    profile = get_profile("densenet121")
    config = cfg(128 * KIB, 4)
    order = plan_order(profile, config, workers=8, bandwidth="10gbit")
    trace = simulate(profile, config, workers=8, arch="allreduce", bandwidth="10gbit").trace
    assert order == [c.block.index for c in trace]
    # measured profiles often lack forward times: the plan needs only backward times
    measured = Profile(name="measured", batch_size=32, layers=tuple(
        Layer(x.name, x.nbytes, 0.0, x.backward_s) for x in profile.layers))
    assert plan_order(measured, config, workers=8, bandwidth="10gbit") == order

"""The shared plan: blocks (fused and split), order, credit, reconfiguration, on a fake
transport with a virtual clock."""

import itertools
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.config import Config
from common.errors import ConfigError, SchedulerError
from common.plan import (
    MAX_LANES,
    Layout,
    Scheduler,
    Send,
    TensorSpec,
    issue_order,
    lanes_for,
    make_layout,
)
from common.testing import FakeTransport

KIB = 1024


def config(partition: int = 4 * KIB, credit: int = 8 * KIB, **kw: object) -> Config:
    return Config(partition_bytes=partition, credit_bytes=credit, **kw)  # type: ignore[arg-type]


def specs(*sizes: int, itemsize: int = 4) -> list[TensorSpec]:
    return [TensorSpec(f"t{i}", n, itemsize) for i, n in enumerate(sizes)]


def assert_exact_cover(layout: Layout, *, ordered: bool = True) -> None:
    """Every element of every tensor in exactly one block, in element order (blocks of
    pinned elements interleave servers: then in any order)."""
    for i, tensor in enumerate(layout.tensors):
        spans = [(s.start, s.stop) for b in layout.blocks for s in b.segments if s.tensor == i]
        spans = spans if ordered else sorted(spans)
        assert spans[0][0] == 0 and spans[-1][1] == tensor.size
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(spans))
    for block in layout.blocks:
        assert block.nbytes == sum(s.size * layout.tensors[s.tensor].itemsize
                                   for s in block.segments)


def test_small_tensors_are_fused_into_one_block() -> None:
    layout = make_layout(specs(*[256] * 10), config(partition=4 * KIB))
    assert len(layout.blocks) == 1
    assert layout.blocks[0].tensors == tuple(range(10)) and layout.blocks[0].nbytes == 2560
    assert_exact_cover(layout)


def test_large_tensors_are_split_and_the_stream_is_cut_at_the_partition() -> None:
    layout = make_layout(specs(40, 8000, 100, 4, 8000), config(partition=4 * KIB))
    assert [b.nbytes for b in layout.blocks] == [4096, 4096, 4096, 3856]
    assert [b.tensors for b in layout.blocks] == [(0, 1), (1, 2, 3, 4), (4,), (4,)]
    assert [b.ready_tensor for b in layout.blocks] == [0, 1, 4, 4]
    assert_exact_cover(layout)


@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(1, 5000), min_size=1, max_size=30),
       itemsize=st.sampled_from([1, 2, 4, 8]), partition_kib=st.integers(4, 32))
def test_blocks_cover_the_stream_with_the_fewest_blocks(sizes: list[int], itemsize: int,
                                                        partition_kib: int) -> None:
    partition = partition_kib * KIB
    layout = make_layout(specs(*[n * itemsize for n in sizes], itemsize=itemsize),
                         config(partition=partition, credit=partition))
    assert_exact_cover(layout)
    total = sum(sizes) * itemsize
    assert all(b.nbytes <= partition for b in layout.blocks)
    assert len(layout.blocks) == -(-total // partition)  # partition is a multiple of itemsize
    assert [b.index for b in layout.blocks] == list(range(len(layout.blocks)))


def test_a_block_holds_one_dtype() -> None:
    tensors = [TensorSpec("a", 64), TensorSpec("b", 64, 2, "float16"), TensorSpec("c", 64)]
    layout = make_layout(tensors, config(partition=4 * KIB))
    assert [b.tensors for b in layout.blocks] == [(0,), (1,), (2,)]


def test_native_is_one_pack_for_allreduce_and_whole_tensors_for_ps() -> None:
    tensors = specs(40, 8000, 100)
    packed = make_layout(tensors, config(scheduling=False), arch="allreduce")
    assert packed.native and len(packed.blocks) == 1 and packed.blocks[0].nbytes == 8140
    assert packed.blocks[0].ready_tensor == 0  # sent once the whole backward pass is done
    whole = make_layout(tensors, config(scheduling=False), arch="ps")
    assert [b.nbytes for b in whole.blocks] == [40, 8000, 100]
    assert_exact_cover(packed)
    assert_exact_cover(whole)


def test_pinned_elements_are_cut_per_server_in_forward_order() -> None:
    """Tensors 0 and 2 on server 1, tensor 1 split over both, tensor 3 on server 0: every
    block holds one server's elements, at most max_items of them, and blocks are numbered by
    their first element in forward order, with or without scheduling."""
    tensors = specs(4000, 40000, 4000, 4000)  # 1000, 10000, 1000, 1000 elements
    pins = [[(0, 1000, 1)], [(0, 5000, 0), (5000, 10000, 1)], [(0, 1000, 1)], [(0, 1000, 0)]]
    for cfg in (config(partition=4 * KIB), config(partition=64 * KIB, credit=64 * KIB),
                config(scheduling=False)):
        layout = make_layout(tensors, cfg, arch="ps", pins=pins, max_items=3000)
        assert_exact_cover(layout, ordered=False)
        for block in layout.blocks:
            assert sum(s.size for s in block.segments) <= 3000
            for seg in block.segments:
                held = [srv for a, b, srv in pins[seg.tensor] if a <= seg.start < b]
                assert held == [block.server] and seg.stop <= next(
                    b for a, b, _ in pins[seg.tensor] if a <= seg.start < b)
        firsts = [(b.segments[0].tensor, b.segments[0].start) for b in layout.blocks]
        assert firsts == sorted(firsts) and [b.index for b in layout.blocks] == \
            list(range(len(layout.blocks)))
    fused = make_layout(tensors, config(partition=64 * KIB, credit=64 * KIB), arch="ps", pins=pins,
                        max_items=10**6)  # one block per server, fusing tensors apart
    assert [(b.server, b.tensors) for b in fused.blocks] == [(1, (0, 1, 2)), (0, (1, 3))]
    native = make_layout(tensors, config(scheduling=False), arch="ps", pins=pins)
    assert [(b.server, b.tensors, b.nbytes) for b in native.blocks] == [
        (1, (0,), 4000), (0, (1,), 20000), (1, (1,), 20000), (1, (2,), 4000), (0, (3,), 4000)]


def test_pins_must_cover_each_tensor_once() -> None:
    tensors = specs(40, 40)
    for bad in ([[(0, 10, 0)]], [[(0, 10, 0)], [(0, 5, 0)]],
                [[(0, 6, 0), (5, 10, 1)], [(0, 10, 0)]], [[(0, 10, -1)], [(0, 10, 0)]]):
        with pytest.raises(ConfigError, match="pins must"):
            make_layout(tensors, config(), arch="ps", pins=bad)
    with pytest.raises(ConfigError, match="arch='allreduce' has none"):
        make_layout(tensors, config(), pins=[[(0, 10, 0)], [(0, 10, 0)]])
    with pytest.raises(ConfigError, match="max_items=0"):
        make_layout(tensors, config(), arch="ps", max_items=0)


def test_issue_order_is_readiness_order_or_a_head_then_forward_order() -> None:
    layout = make_layout(specs(*[4 * KIB] * 6), config(partition=4 * KIB))
    assert issue_order(layout) == [5, 4, 3, 2, 1, 0]
    assert issue_order(layout, head_bytes=8 * KIB) == [5, 4, 0, 1, 2, 3]
    assert issue_order(layout, head_bytes=0) == [5, 0, 1, 2, 3, 4]  # at least one block


def test_lanes_hold_as_many_of_the_largest_block_as_the_credit() -> None:
    layout = make_layout(specs(64 * KIB), config(partition=4 * KIB))
    assert lanes_for(layout, config(partition=4 * KIB, credit=16 * KIB)) == 4
    assert lanes_for(layout, config(partition=4 * KIB, credit=6 * KIB)) == 1
    assert lanes_for(layout, config(partition=4 * KIB, credit=1024**3)) == MAX_LANES


def test_bad_input_is_refused_with_the_value() -> None:
    with pytest.raises(ConfigError, match="nbytes=10, itemsize=4"):
        TensorSpec("bad", 10, 4)
    with pytest.raises(ConfigError, match="at least one tensor"):
        make_layout([], config())
    with pytest.raises(ConfigError, match="arch='ring'"):
        make_layout(specs(4), config(), arch="ring")


def sends(layout: Layout, step: int = 1) -> list[Send]:
    return [Send(b, step) for b in layout.blocks]


def test_ready_blocks_start_front_first_within_credit() -> None:
    fake = FakeTransport(config(credit=4 * KIB))
    sched = fake.scheduler
    sched.begin_step(1)
    layout = make_layout(specs(4 * KIB, 8 * KIB, 16 * KIB), config(credit=4 * KIB))
    s = sends(layout)  # blocks 0 | 1 2 | 3 4 5 6
    # backward makes the back blocks ready first; while the first is on the wire the front
    # ones become ready and jump ahead of the rest of the back tensor.
    sched.ready(s[6])
    sched.ready(*s[3:6])
    sched.ready(s[1], s[2])
    sched.ready(s[0])
    fake.run()
    assert [x.block.index for x in fake.started] == [6, 0, 1, 2, 3, 4, 5]
    assert not fake.violations and sched.idle


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 300), min_size=1, max_size=25),
       partition_kib=st.integers(4, 64), multiple=st.integers(1, 16), seed=st.integers(0, 9))
def test_bytes_in_flight_never_exceed_credit_and_every_block_goes_once(
        sizes: list[int], partition_kib: int, multiple: int, seed: int) -> None:
    cfg = config(partition=partition_kib * KIB, credit=partition_kib * KIB * multiple)
    started: list[Send] = []
    sched = Scheduler(cfg, start=started.append)
    rng = random.Random(seed)
    sched.begin_step()
    pending = sends(make_layout(specs(*[n * KIB for n in sizes]), cfg), sched.step)
    rng.shuffle(pending)
    inflight: list[Send] = []
    while pending or started or inflight:
        if pending and rng.random() < 0.5:
            sched.ready(pending.pop())
        inflight.extend(started)
        started.clear()
        total = sum(x.nbytes for x in inflight)
        assert total <= cfg.credit_bytes or len(inflight) == 1  # checked at every instant
        if inflight and rng.random() < 0.6:  # completions in random order
            sched.done(inflight.pop(rng.randrange(len(inflight))))
    done = sched.drain_trace()
    assert sum(x.nbytes for x in done) == sum(sizes) * KIB
    assert len(done) == len({id(x) for x in done})
    assert sched.idle


def test_a_block_larger_than_the_credit_starts_when_nothing_is_in_flight() -> None:
    sched = Scheduler(config(partition=4 * KIB, credit=4 * KIB), start=lambda s: None)
    layout = make_layout([TensorSpec("t", 3 * 8192, 8192)], config(partition=4 * KIB))
    blocks = sends(layout)
    sched.ready(*blocks)
    assert [x.state for x in blocks] == ["started", "queued", "queued"]


def test_reconfigure_applies_at_the_next_step_without_touching_the_current_one() -> None:
    old, new = config(partition=4 * KIB, credit=4 * KIB), config(partition=8 * KIB,
                                                                   credit=16 * KIB)
    fake = FakeTransport(old)
    sched = fake.scheduler
    sched.begin_step(1)
    step1 = sends(make_layout(specs(16 * KIB), sched.config))
    sched.ready(*step1)
    sched.reconfigure(new)
    fake.run(until=1e-9)
    assert sched.config == old and sched.inflight_bytes == 4 * KIB  # old credit still holds
    fake.run()
    assert [x.nbytes for x in fake.started] == [4 * KIB] * 4
    assert sched.begin_step(2) == new
    step2 = sends(make_layout(specs(16 * KIB), sched.config), 2)
    sched.ready(*step2)
    assert sched.inflight_bytes == 16 * KIB  # both 8 KiB blocks at once under the new credit
    fake.run()
    assert len(fake.started) == 6 and not fake.violations


def test_a_larger_credit_at_a_step_boundary_admits_queued_blocks() -> None:
    started: list[Send] = []
    sched = Scheduler(config(credit=4 * KIB), start=started.append)
    sched.ready(*sends(make_layout(specs(12 * KIB), config(credit=4 * KIB)), 0))
    assert len(started) == 1
    sched.reconfigure(config(credit=12 * KIB))
    sched.begin_step()
    assert len(started) == 3


def test_native_sends_in_arrival_order_without_credit() -> None:
    fake = FakeTransport(config(scheduling=False))
    sched = fake.scheduler
    layout = make_layout(specs(64 * KIB, 32 * KIB), config(scheduling=False), arch="ps")
    s = sends(layout, 0)
    sched.ready(s[1])
    sched.ready(s[0])
    assert sched.inflight_bytes == 96 * KIB
    fake.run()
    assert [x.block.index for x in fake.started] == [1, 0]


def test_a_fixed_priority_overrides_forward_position() -> None:
    started: list[Send] = []
    sched = Scheduler(config(credit=4 * KIB), start=started.append)
    layout = make_layout(specs(4 * KIB, 4 * KIB, 4 * KIB), config())
    s = [Send(b, 0, priority=p) for b, p in zip(layout.blocks, (2, 0, 1), strict=True)]
    sched.ready(*s)
    for _ in range(3):
        sched.done(started[-1])
    assert [x.block.index for x in started] == [1, 2, 0]


def test_synchronous_transport_may_finish_inside_start() -> None:
    order: list[int] = []

    def start(send: Send) -> None:
        order.append(send.block.index)
        sched.done(send)  # reentrant: must not recurse into start or deadlock

    sched = Scheduler(config(credit=4 * KIB), start=start)
    layout = make_layout(specs(8 * KIB, 8 * KIB), config())
    s = sends(layout, 0)
    sched.ready(s[2], s[3])
    sched.ready(s[0], s[1])
    assert order == [2, 3, 0, 1]
    assert sched.idle


def test_threads_making_ready_and_completing_concurrently() -> None:
    cfg = config(partition=4 * KIB, credit=16 * KIB)
    lock = threading.Lock()
    inflight: list[Send] = []
    peak = [0]

    def start(send: Send) -> None:
        with lock:
            inflight.append(send)
            peak[0] = max(peak[0], sum(x.nbytes for x in inflight))

    sched = Scheduler(cfg, start=start)
    stop = threading.Event()

    def completer() -> None:
        while not stop.is_set() or inflight:
            with lock:
                send = inflight.pop(0) if inflight else None
            if send is not None:
                sched.done(send)

    layout = make_layout(specs(*[(1 + i % 9) * KIB for i in range(50)]), cfg)

    def producer(k: int) -> None:
        for send in sends(layout, k):
            sched.ready(send)

    workers = [threading.Thread(target=completer) for _ in range(2)]
    producers = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
    for t in workers + producers:
        t.start()
    for t in producers:
        t.join()
    stop.set()
    for t in workers:
        t.join(timeout=10)
    assert sched.idle
    assert peak[0] <= cfg.credit_bytes
    assert sum(x.nbytes for x in sched.drain_trace()) == 4 * sum(b.nbytes for b in layout.blocks)


def test_protocol_misuse_is_an_error() -> None:
    sched = Scheduler(config(), start=lambda s: None)
    (send,) = sends(make_layout(specs(4 * KIB), config()))
    with pytest.raises(SchedulerError, match="only a started block"):
        sched.done(send)
    sched.ready(send)
    with pytest.raises(SchedulerError, match="already started"):
        sched.ready(send)
    with pytest.raises(ConfigError, match="needs a Config"):
        sched.reconfigure({"partition_bytes": 1})  # type: ignore[arg-type]


def test_trace_times_come_from_the_clock() -> None:
    fake = FakeTransport(config(credit=4 * KIB), bytes_per_s=4 * KIB)  # 1 s per block
    fake.scheduler.ready(*sends(make_layout(specs(8 * KIB), config()), 0))
    fake.run()
    first, second = fake.scheduler.drain_trace()
    assert (first.t_start, first.t_done) == (0.0, 1.0)
    assert (second.t_ready, second.t_start, second.t_done) == (0.0, 1.0, 2.0)

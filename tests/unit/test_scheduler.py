"""The scheduler's policy, checked against a fake transport on a virtual clock."""

import itertools
import random
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.config import Config
from common.errors import ConfigError, SchedulerError
from common.scheduler import Chunk, Scheduler, Task, split_sizes
from common.testing import FakeTransport

KIB = 1024


def config(partition: int = 4 * KIB, credit: int = 8 * KIB, **kw: object) -> Config:
    return Config(partition_bytes=partition, credit_bytes=credit, **kw)  # type: ignore[arg-type]


def covered(chunks: list[Chunk]) -> list[tuple[int, int]]:
    return sorted((c.offset, c.offset + c.nbytes) for c in chunks)


def assert_exact_cover(task: Task, chunks: list[Chunk]) -> None:
    spans = covered(chunks)
    assert spans[0][0] == 0 and spans[-1][1] == task.nbytes
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))


def test_split_sizes_respects_items_and_partition() -> None:
    assert split_sizes(10, 4) == [4, 4, 2]
    assert split_sizes(4096 * 3, 4096, 4) == [4096] * 3
    assert split_sizes(40, 10, 4) == [8, 8, 8, 8, 8]  # never splits an element
    assert split_sizes(8, 2, 8) == [8]  # at least one element per chunk


def test_ready_chunks_start_front_layer_first_within_credit() -> None:
    fake = FakeTransport(config(credit=4 * KIB))
    sched = fake.scheduler
    sched.begin_step()
    # backward produces back layers first; while the first back chunk is on the wire,
    # front layers become ready and must jump ahead of the rest of the back layer.
    sched.submit(Task("fc", 3, 16 * KIB))
    sched.submit(Task("conv2", 1, 8 * KIB))
    sched.submit(Task("conv1", 0, 4 * KIB))
    fake.run()
    order = [(c.task.name, c.index) for c in fake.started]
    assert order == [("fc", 0), ("conv1", 0), ("conv2", 0), ("conv2", 1),
                     ("fc", 1), ("fc", 2), ("fc", 3)]
    assert not fake.violations and sched.idle


def test_credit_bound_and_oversized_chunk() -> None:
    fake = FakeTransport(config(partition=64 * KIB, credit=64 * KIB))
    sched = fake.scheduler
    sched.reconfigure(config(partition=64 * KIB, credit=64 * KIB))
    sched.begin_step()
    sched.submit(Task("a", 0, 8 * KIB))
    assert sched.inflight_bytes == 8 * KIB
    # a 64 KiB chunk does not fit beside 8 KiB in flight: it waits
    sched.submit(Task("b", 1, 64 * KIB))
    assert sched.inflight_bytes == 8 * KIB
    fake.run()
    assert [c.task.name for c in fake.started] == ["a", "b"]
    assert sched.max_inflight_bytes == 64 * KIB


def test_a_chunk_larger_than_the_credit_starts_when_nothing_is_in_flight() -> None:
    sched = Scheduler(config(partition=4 * KIB, credit=4 * KIB), start=lambda c: None)
    (big,) = sched.split(Task("big", 0, 8, itemsize=8))
    sched.ready(big)
    assert big.state == "started"
    # Chunks bigger than the credit only arise from itemsize rounding; they still go one by one
    sched2 = Scheduler(Config(partition_bytes=4096, credit_bytes=4096), start=lambda c: None)
    chunks = sched2.split(Task("t", 0, 3 * 8192, itemsize=8192))
    sched2.ready(*chunks)
    assert [c.state for c in chunks] == ["started", "queued", "queued"]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.tuples(st.integers(0, 20), st.integers(1, 300)), min_size=1,
                      max_size=25),
       partition_kib=st.integers(4, 64), multiple=st.integers(1, 16), seed=st.integers(0, 9))
def test_bytes_in_flight_never_exceed_credit_and_every_byte_goes_once(
        sizes: list[tuple[int, int]], partition_kib: int, multiple: int, seed: int) -> None:
    cfg = config(partition=partition_kib * KIB, credit=partition_kib * KIB * multiple)
    started: list[Chunk] = []
    sched = Scheduler(cfg, start=started.append)
    rng = random.Random(seed)
    sched.begin_step()
    tasks = [Task(f"t{i}", layer, n * KIB) for i, (layer, n) in enumerate(sizes)]
    pending = list(tasks)
    inflight: list[Chunk] = []
    while pending or started or inflight:
        if pending and rng.random() < 0.5:
            sched.submit(pending.pop(0))
        inflight.extend(started)
        started.clear()
        total = sum(c.nbytes for c in inflight)
        assert total <= cfg.credit_bytes or len(inflight) == 1
        if inflight and rng.random() < 0.6:  # completions in random order
            sched.done(inflight.pop(rng.randrange(len(inflight))))
    done = sched.drain_trace()
    for task in tasks:
        assert_exact_cover(task, [c for c in done if c.task is task])
    assert len(done) == len({id(c) for c in done})
    assert sched.idle


def test_reconfigure_applies_at_the_next_step_without_touching_the_current_one() -> None:
    fake = FakeTransport(config(partition=4 * KIB, credit=4 * KIB))
    sched = fake.scheduler
    sched.begin_step(1)
    first = sched.submit(Task("fc", 2, 16 * KIB))
    sched.reconfigure(config(partition=8 * KIB, credit=16 * KIB))
    # the rest of step 1 keeps the old layout and the old credit
    second = sched.submit(Task("conv", 0, 16 * KIB))
    assert [c.nbytes for c in second] == [4 * KIB] * 4
    fake.run(until=1e-9)
    assert sched.config.credit_bytes == 4 * KIB
    fake.run()
    step1 = [(c.task.name, c.index) for c in fake.started]
    assert step1[0] == ("fc", 0) and step1[1:5] == [("conv", i) for i in range(4)]
    assert_exact_cover(first[0].task, first)
    sched.begin_step(2)
    assert sched.config.partition_bytes == 8 * KIB
    third = sched.submit(Task("fc", 2, 16 * KIB))
    assert [c.nbytes for c in third] == [8 * KIB, 8 * KIB]
    fake.run()
    assert len(fake.started) == len(set(map(id, fake.started))) == 10
    assert not fake.violations


def test_a_larger_credit_at_a_step_boundary_admits_queued_chunks() -> None:
    started: list[Chunk] = []
    sched = Scheduler(config(credit=4 * KIB), start=started.append)
    sched.submit(Task("t", 0, 12 * KIB))
    assert len(started) == 1
    sched.reconfigure(config(credit=12 * KIB))
    sched.begin_step()
    assert len(started) == 3


def test_scheduling_off_sends_whole_tensors_in_arrival_order_without_credit() -> None:
    fake = FakeTransport(config(scheduling=False))
    sched = fake.scheduler
    sched.submit(Task("fc", 3, 64 * KIB))
    sched.submit(Task("conv1", 0, 32 * KIB))
    assert sched.inflight_bytes == 96 * KIB
    fake.run()
    assert [(c.task.name, c.count) for c in fake.started] == [("fc", 1), ("conv1", 1)]


def test_synchronous_transport_may_finish_inside_start() -> None:
    order: list[str] = []

    def start(chunk: Chunk) -> None:
        order.append(f"{chunk.task.name}{chunk.index}")
        sched.done(chunk)  # reentrant: must not recurse into start or deadlock

    sched = Scheduler(config(credit=4 * KIB), start=start)
    sched.submit(Task("b", 1, 8 * KIB))
    sched.submit(Task("a", 0, 8 * KIB))
    assert order == ["b0", "b1", "a0", "a1"]
    assert sched.idle


def test_threads_submitting_and_completing_concurrently() -> None:
    cfg = config(partition=4 * KIB, credit=16 * KIB)
    lock = threading.Lock()
    inflight: list[Chunk] = []
    peak = [0]

    def start(chunk: Chunk) -> None:
        with lock:
            inflight.append(chunk)
            peak[0] = max(peak[0], sum(c.nbytes for c in inflight))

    sched = Scheduler(cfg, start=start)
    stop = threading.Event()

    def completer() -> None:
        while not stop.is_set() or inflight:
            with lock:
                chunk = inflight.pop(0) if inflight else None
            if chunk is not None:
                sched.done(chunk)

    def producer(k: int) -> None:
        for i in range(50):
            sched.submit(Task(f"p{k}-{i}", i % 7, (1 + (i * 7 + k) % 9) * KIB))

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
    assert sum(c.nbytes for c in sched.drain_trace()) == sum(
        (1 + (i * 7 + k) % 9) * KIB for k in range(4) for i in range(50))


def test_protocol_misuse_is_an_error() -> None:
    sched = Scheduler(config(), start=lambda c: None)
    (chunk,) = sched.split(Task("t", 0, 4 * KIB))
    with pytest.raises(SchedulerError, match="only a started chunk"):
        sched.done(chunk)
    sched.ready(chunk)
    with pytest.raises(SchedulerError, match="already started"):
        sched.ready(chunk)
    with pytest.raises(SchedulerError, match="positive multiple of itemsize"):
        Task("bad", 0, 10, itemsize=4)
    with pytest.raises(SchedulerError, match="layer must be >= 0"):
        Task("bad", -1, 8)
    with pytest.raises(ConfigError, match="needs a Config"):
        sched.reconfigure({"partition_bytes": 1})  # type: ignore[arg-type]


def test_trace_times_come_from_the_clock() -> None:
    fake = FakeTransport(config(credit=4 * KIB), bytes_per_s=4 * KIB)  # 1 s per chunk
    fake.scheduler.submit(Task("t", 0, 8 * KIB))
    fake.run()
    first, second = fake.scheduler.drain_trace()
    assert (first.t_start, first.t_done) == (0.0, 1.0)
    assert (second.t_ready, second.t_start, second.t_done) == (0.0, 1.0, 2.0)

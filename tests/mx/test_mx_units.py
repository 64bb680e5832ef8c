"""Adapter parts without ps-lite: block buffers, control key encoding, the shared release
order, the kvstore on a fake native store, misuse errors."""

from __future__ import annotations

import itertools
import random
import threading
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import skip_without_mxnet

from common.config import Config
from common.errors import ConfigError, UnsupportedError
from common.plan import Scheduler, Send, issue_order
from common.stats import TrainingStats

skip_without_mxnet()

import mxnet as mx  # noqa: E402

from autobyte_mx import _engine  # noqa: E402
from autobyte_mx._layout import (  # noqa: E402
    WHOLE,
    Groups,
    Tensor,
    block_name,
    pins_for,
    same,
    server_of,
)
from autobyte_mx._sequencer import Round, Sequencer  # noqa: E402
from autobyte_mx._transport import Calls  # noqa: E402
from common.testing.mx import FakeCalls, FakeNative  # noqa: E402

# --- block buffers -------------------------------------------------------------------------


def _tensors(*shapes: tuple[int, ...]) -> list[Tensor]:
    return [Tensor(f"k{i}", f"net_l{i}", shape, np.float32, 4, layer=i)
            for i, shape in enumerate(shapes)]


def _zeros(size: int, dtype: Any) -> Any:
    return mx.nd.zeros((size,), dtype=dtype)


def _group(tensors: list[Tensor], partition: int = 4096) -> Any:
    return Groups(zeros=_zeros, init=list).get(
        Config(partition_bytes=partition, credit_bytes=partition), tensors)


SHAPES = [(3, 700), (10,), (5,), (2, 2000), (7,)]  # 8400 B, 40 B, 20 B, 16000 B, 28 B


@pytest.mark.parametrize("partition", [4096, 1 << 20])
def test_group_maps_each_segment_to_a_slice_of_its_block_buffer(partition: int) -> None:
    tensors = _tensors(*SHAPES)
    made: list[Any] = []
    groups = Groups(zeros=_zeros, init=made.extend)
    config = Config(partition_bytes=partition, credit_bytes=partition)
    group = groups.get(config, tensors)
    assert made == [group] and groups.get(config, tensors) is group and len(made) == 1
    total = sum(t.nbytes for t in tensors)
    assert [b.array.shape[0] * 4 for b in group.buffers] == [b.nbytes for b in
                                                            group.layout.blocks]
    assert sum(b.nbytes for b in group.layout.blocks) == total
    assert group.keys == list(range(1, 1 + len(group.buffers)))  # key 0: control
    if partition == 4096:  # the stream cut every 4 KiB: splits and fusions
        assert len(group.buffers) == -(-total // 4096)
        assert group.blocks_of[0] == (0, 1, 2) and group.blocks_of[3][0] == 2
        assert group.names[2] == "net_l0+3"  # l0's tail, l1, l2 and l3's head
    else:  # one block holds everything
        assert len(group.buffers) == 1 and group.names == ["net_l0+4"]
    values = [mx.nd.array(np.random.RandomState(i).rand(*t.shape)) for i, t in
              enumerate(tensors)]
    for member, value in enumerate(values):
        group.copy_in(member, value)
    stream = np.concatenate([b.array.asnumpy() for b in group.buffers])
    want = np.concatenate([v.asnumpy().ravel() for v in values])
    assert np.array_equal(stream, want)
    for member, value in enumerate(values):
        out = mx.nd.zeros(value.shape)
        group.copy_out(member, [out], mx.nd.concat)
        assert np.array_equal(out.asnumpy(), value.asnumpy())
    # another layout takes the next keys; the native one has one whole key per tensor
    other = groups.whole(tensors[0])
    assert other.layout_id == WHOLE and other.keys == [group.keys[-1] + 1]
    assert other.slots[0][0].view is other.buffers[0].array


def test_pins_balance_whole_tensors_and_spread_large_ones_as_ps_lite() -> None:
    load = [0, 0]
    assert pins_for(700, 2, 1000, load) == ((0, 700, 0),)
    assert pins_for(300, 2, 1000, load) == ((0, 300, 1),)
    assert pins_for(200, 2, 1000, load) == ((0, 200, 1),)  # the server with fewer elements
    assert pins_for(1001, 2, 1000, load) == ((0, 501, 0), (501, 1001, 1))  # 500.5 rounds up
    assert load == [1201, 1000]
    assert pins_for(7, 3, 2, [0, 0, 0]) == ((0, 2, 0), (2, 5, 1), (5, 7, 2))


def test_pinned_groups_put_each_block_on_a_key_of_its_server() -> None:
    """With the optimizer on two servers: every layout of the same tensors keeps each element
    on one server, each block's key is one the native store sends to that server, below the
    size it would spread, and no key is handed out twice."""
    groups = Groups(zeros=_zeros, init=list)
    groups.pin(2, 3000)
    tensors = _tensors(*SHAPES)  # 2100, 10, 5, 4000, 7 elements
    layouts = [groups.whole(t) for t in tensors]
    layouts += [groups.get(Config(partition_bytes=p, credit_bytes=p), tensors)
                for p in (4096, 1 << 20)]
    assert tensors[3].pins == ((0, 2000, 0), (2000, 4000, 1))
    where: dict[tuple[Any, int], int] = {}
    keys = [k for g in layouts for k in g.keys]
    assert len(keys) == len(set(keys)) and 0 not in keys
    for group in layouts:
        for buffer in group.buffers:
            assert server_of(buffer.key, 2) == buffer.block.server
            assert buffer.array.shape[0] <= 3000
            for seg in buffer.block.segments:
                tensor = group.tensors[seg.tensor]
                for element in (seg.start, seg.stop - 1):
                    held = where.setdefault((tensor.key, element), buffer.block.server)
                    assert held == buffer.block.server
    values = [mx.nd.array(np.random.RandomState(i).rand(*t.shape)) for i, t in
              enumerate(tensors)]
    for group in layouts:  # a tensor's pieces come back in element order from every layout
        for member, tensor in enumerate(group.tensors):
            value = values[tensors.index(tensor)]
            group.copy_in(member, value)
            out = mx.nd.zeros(value.shape)
            group.copy_out(member, [out], mx.nd.concat)
            assert np.array_equal(out.asnumpy(), value.asnumpy())
    with pytest.raises(ValueError, match="before the first group"):
        groups.pin(2, 3000)


def test_block_name_counts_the_fused_members() -> None:
    group = _group(_tensors((3000,), (2,)))
    assert [block_name(["a", "b"], b) for b in group.layout.blocks] == ["a", "a", "a+1"]


# --- rounds and the shared release order ---------------------------------------------------


def _release(fire: list[int], group: Any, order: list[int], credit: int) -> list[int]:
    """Issue every member, fire the blocks' gates in ``fire`` order, finish blocks one by one;
    returns the blocks in the order the scheduler started them."""
    started: list[int] = []
    inflight: list[Send] = []

    def start(send: Send) -> None:
        started.append(send.block.index)
        inflight.append(send)
        send.tag.open_gate(send.block.index)

    sched = Scheduler(Config(partition_bytes=4096, credit_bytes=credit), start=start)
    seq = Sequencer(sched)
    sched.begin_step(1)
    rnd = seq.new_round(group, 1, order)
    closed = [b for m in sorted(range(len(group.tensors)), key=str) for b in rnd.issue(m, [])]
    assert sorted(closed) == list(range(len(group.buffers)))
    for block in fire:
        seq.gate_fired(rnd, block, lambda: None)
        if inflight and random.Random(block).random() < 0.5:
            sched.done(inflight.pop(0))
    while inflight:
        sched.done(inflight.pop(0))
    return started


def test_blocks_are_admitted_in_one_sequence_whatever_the_ready_timing() -> None:
    group = _group(_tensors(*SHAPES))
    order = issue_order(group.layout, head_bytes=8000)
    assert order == [5, 4, 0, 1, 2, 3]  # a head in backward order, then forward order
    backward = list(reversed(range(len(group.buffers))))
    reference = _release(backward, group, order, 8192)
    assert reference == order
    for seed in range(5):
        jittered = backward[:]
        random.Random(seed).shuffle(jittered)
        assert _release(jittered, group, order, 8192) == reference


def test_a_round_closes_a_block_once_all_its_members_are_issued() -> None:
    group = _group(_tensors(*SHAPES))
    seq = Sequencer(Scheduler(Config(), start=lambda send: None))
    rnd = seq.new_round(group, 1, list(range(len(group.buffers))))
    assert rnd.issue(1, ["out1"]) == []  # block 2 waits for l0, l2, l3
    assert rnd.issue(0, []) == [0, 1]
    assert rnd.finished_members([0, 1]) == []  # l0 also lives in block 2, still open
    assert rnd.missing(2) == [2, 3] and rnd.open
    with pytest.raises(ValueError, match="already issued"):
        rnd.issue(0, [])
    assert rnd.flush() == [2, 3, 4, 5] and not rnd.open
    assert rnd.finished_members([2]) == [0, 1]
    assert rnd.targets[1] == ["out1"]
    with pytest.raises(ValueError, match="permutation"):
        Round(group, 1, 0, [0, 0, 1])


# --- the kvstore on a fake native store, in one process ------------------------------------


def test_host_view_writes_while_the_cpu_worker_is_busy() -> None:
    """The control key's per-step write must not wait for the compute queued before it (an
    NDArray write would: it queues an op behind that compute and waits for it)."""
    control = mx.nd.zeros((2, 3))
    control.wait_to_read()  # the zeros are written: nothing else touches it from here
    view = _engine.host_view(control)
    assert view.shape == (2, 3) and view.dtype == np.float32
    release, written = threading.Event(), threading.Event()
    busy = mx.nd.zeros((1,))
    _engine.push_sync(lambda: release.wait(30), mutable=[busy])  # holds MXNet's CPU worker

    def write() -> None:
        view[:] = np.arange(6).reshape(2, 3)
        written.set()
    threading.Thread(target=write, daemon=True).start()
    try:
        assert written.wait(10), "the write waited for the engine"
    finally:
        release.set()
    assert control.asnumpy().tolist() == [[0, 1, 2], [3, 4, 5]]
    with pytest.raises(ValueError, match="allocated"):
        _engine.host_view(mx.nd.empty((0,)))


def test_same_arrays_are_the_very_objects_device_by_device() -> None:
    """What the per-step caches (checked gradients, views, prepared calls) are keyed on: the
    same array objects in the same order, not equal values."""
    a, b = mx.nd.zeros((2,)), mx.nd.zeros((2,))
    assert same((a,), [a]) and same([a, b], (a, b))
    assert not same((a,), [b])  # equal values, another array
    assert not same([a, b], [a, a]) and not same([a, b], [b, a])
    assert not same([a], [a, b]) and not same([a, b], [a])
    assert same((), [])


def test_prepared_pushpull_sums_like_the_store_and_follows_new_arrays() -> None:
    """``_transport.Calls`` on MXNet's real local store: the same results as its pushpull,
    in place and into another array, and new arrays under the same key get a new call."""
    kv = mx.kv.create("local")
    kv.init([5, 6], [mx.nd.zeros((4,)), mx.nd.zeros((2, 3))])
    calls = Calls(kv)
    a, b = mx.nd.arange(4), mx.nd.ones((2, 3))
    out = mx.nd.zeros((2, 3))
    calls.pushpull([5, 6], [a, b], [a, out], 0)
    assert a.asnumpy().tolist() == [0, 1, 2, 3] and (out.asnumpy() == 1).all()
    c = mx.nd.full((4,), 7.0)
    calls.pushpull([5], [c], [c], 3)  # other keys: a call of its own
    calls.pushpull([5, 6], [a * 2, b * 3], [a, out], 0)  # new sources under the same keys
    assert a.asnumpy().tolist() == [0, 2, 4, 6] and (out.asnumpy() == 3).all()
    assert (c.asnumpy() == 7).all()
    # two devices: the store sums them and writes the result into each device's output
    d0, d1, o0, o1 = mx.nd.ones((2, 3)), mx.nd.full((2, 3), 2.0), mx.nd.zeros((2, 3)), \
        mx.nd.zeros((2, 3))
    e0, e1, p0, p1 = mx.nd.ones((4,)), mx.nd.ones((4,)), mx.nd.zeros((4,)), mx.nd.zeros((4,))
    calls.pushpull([6, 5], [d0, e0, d1, e1], [o0, p0, o1, p1], 0)
    assert all((o.asnumpy() == 3).all() for o in (o0, o1))
    assert all((p.asnumpy() == 2).all() for p in (p0, p1))
    with pytest.raises(ValueError, match="2 keys need as many"):
        calls.pushpull([7, 8], [a], [a], 0)
    calls.close()
    with pytest.raises(RuntimeError, match="closed"):
        calls.pushpull([9], [a], [a], 0)


WINDOW_STEPS = 2  # the tests' stores agree and time per tensor every other step


@pytest.fixture
def fake_store(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    import autobyte_mx
    import autobyte_mx._transport
    import autobyte_mx.kvstore

    fake = FakeNative()
    monkeypatch.setattr(mx.kv, "create", lambda name: fake)
    monkeypatch.setattr(autobyte_mx._transport, "Calls", FakeCalls)
    monkeypatch.setattr(autobyte_mx.kvstore, "check_environment", lambda: None)
    stores: list[Any] = []

    def make(**options: Any) -> Any:
        options.setdefault("window_steps", WINDOW_STEPS)
        options.setdefault("sample_every", WINDOW_STEPS)
        store = autobyte_mx.AutoByte(tuner="none", **options)
        stores.append(store)
        return store, fake

    yield make
    for store in stores:
        store.close()


def _train(store: Any, steps: list[Config | None], rng: np.random.RandomState) -> None:
    """Trainer-like steps (all keys, name order); checks every output is the workers' sum."""
    for new in steps:
        grads = [mx.nd.array(rng.rand(*shape).astype(np.float32)) for shape in SHAPES]
        want = [g.asnumpy() * 3 for g in grads]
        for key in sorted(range(len(SHAPES)), key=str):
            store.pushpull(key, grads[key])
        for key, (grad, expect) in enumerate(zip(grads, want, strict=True)):
            assert np.array_equal(grad.asnumpy(), expect), f"key {key} at {store.config}"
        if new is not None:
            store.reconfigure(new)


def test_kvstore_fuses_splits_and_switches_with_exact_sums(fake_store) -> None:  # type: ignore[no-untyped-def]
    store, fake = fake_store(partition_bytes="4KiB", credit_bytes="8KiB")
    names = [f"net_l{i}" for i in range(len(SHAPES))]
    store.attach_trainer(names=names, forward=names, active=range(len(SHAPES)))
    params = [mx.nd.ones(shape) for shape in SHAPES]
    for key, param in enumerate(params):
        store.broadcast(key, param, out=param)
    big = Config(partition_bytes="1MiB", credit_bytes="4MiB")
    native = Config(scheduling=False)
    small = Config(partition_bytes="4KiB", credit_bytes="8KiB")
    _train(store, [big, None, native, None, None, small, None, None, None],  # after steps 1, 3, 6
           np.random.RandomState(0))
    mx.nd.waitall()
    stats = store.step_stats()
    seen = {}
    assert fake.controls == 1 + 5  # the handshake, then the last step of each window (1, 3, .., 9)
    switched = [b.step for a, b in itertools.pairwise(stats) if b.config != a.config]
    assert switched == [4, 6, 8]  # a request rides the next window's last step, lands at its end
    for s in stats:
        blocks = sorted(c.tensor for c in s.chunks)
        kind = s.config.partition_bytes if s.config.scheduling else "native"
        seen[kind] = True
        sampled = s.step % WINDOW_STEPS == WINDOW_STEPS - 1
        if kind == 4096:  # split and fused
            assert len(blocks) == 6 and "net_l0+3" in blocks, blocks
        elif kind == 1 << 20:  # one block
            assert blocks == ["net_l0+4"]
        elif sampled:  # each tensor whole
            assert blocks == sorted(names)
        else:  # an unsampled native step is timed as a whole
            assert blocks == [] and s.bytes_up == 0 and s.comm_s == 0.0 and s.duration_s > 0
        assert len(s.grad_ready_s) == (len(SHAPES) if sampled else 0)
    assert len(seen) == 3
    assert all(s.comm_s > 0 and s.bytes_up == 24488 for s in stats if s.chunks)
    # native: one whole key per tensor
    whole_keys = {k for keys in fake.pushed for k in keys if len(keys) == 1}
    assert len(whole_keys) >= len(SHAPES)


def test_kvstore_pull_flushes_an_open_block_and_reads_the_last_sum(fake_store) -> None:  # type: ignore[no-untyped-def]
    store, _ = fake_store(partition_bytes="1MiB", credit_bytes="1MiB")
    store.attach_trainer(names=["a", "b"], forward=["a", "b"], active=[0, 1])
    for key in (0, 1):
        store.init(key, mx.nd.zeros((4,)))
    a, b = mx.nd.ones((4,)), mx.nd.ones((4,)) * 2
    store.pushpull(0, a)
    store.pushpull(1, b)  # step 1: both keys, one block
    got = mx.nd.zeros((4,))
    store.pull(1, out=got)
    assert got.asnumpy().tolist() == [6.0] * 4
    store.pushpull(0, mx.nd.ones((4,)) * 5)  # step 2: "b" is not pushed
    out = mx.nd.zeros((4,))
    store.pull(0, out=out)  # the block holding "a" and "b" is sent now
    assert out.asnumpy().tolist() == [15.0] * 4
    store.pull(1, out=got)  # "b" travelled with it but keeps its last sum
    assert got.asnumpy().tolist() == [6.0] * 4
    store.reconfigure(Config(partition_bytes="4KiB", credit_bytes="4KiB"))
    for _ in range(3):  # still step 2, then steps 3 and 4: the request lands at step 4
        store.push(1, mx.nd.ones((4,)))
    store.pull(0, out=out)  # a pull before a's next push sees its last sum
    assert out.asnumpy().tolist() == [15.0] * 4
    store.pull(1, out=got)
    assert got.asnumpy().tolist() == [3.0] * 4
    assert store.config.partition_bytes == 4096


# --- the MXNet side, in one process (no ps-lite) ------------------------------------------


@pytest.fixture
def mx_env(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    import autobyte_mx

    for name in ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER",
                 "DMLC_NUM_WORKER"):
        monkeypatch.delenv(name, raising=False)
    return autobyte_mx


def test_kvstore_needs_a_parameter_server_job(mx_env) -> None:  # type: ignore[no-untyped-def]
    import mxnet as mx

    with pytest.raises(ConfigError, match="DMLC_ROLE"):
        mx.kv.create("autobyte")


def test_kvstore_rejects_unknown_options_and_async(mx_env) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="unknown option"):
        mx_env.AutoByte(partition_size=4096)
    with pytest.raises(UnsupportedError, match="dist_sync"):
        mx_env.AutoByte(base="dist_async")
    with pytest.raises(ConfigError, match="partition_bytes must be positive, between"):
        mx_env.AutoByte(partition_bytes=-1)


def _attached(store: Any) -> Any:
    """``store`` as a Trainer leaves it: its keys named in forward order, every one active and
    initialised to ones."""
    names = [f"net_l{i}" for i in range(len(SHAPES))]
    store.attach_trainer(names=names, forward=names, active=range(len(SHAPES)))
    for key, shape in enumerate(SHAPES):
        param = mx.nd.ones(shape)
        store.broadcast(key, param, out=param)
    return store


def test_native_steps_leave_nothing_outstanding_once_done(fake_store) -> None:  # type: ignore[no-untyped-def]
    """Sampled or not, a native step counts as done once its transfers finish, and as in
    flight for the watchdog only until then: a job that pauses training (evaluation) must
    not read as stalled."""
    store = _attached(fake_store(scheduling=False)[0])
    rng = np.random.RandomState(1)
    for _ in range(2):  # step 1 is sampled, step 2 is not
        _train(store, [None], rng)
        mx.nd.waitall()
        assert store._watchdog._outstanding == 0, f"after {store.step} steps"
        assert store._progress.idle, f"step {store.step} never counted as done"
    assert not store.config.scheduling


def test_expect_steps_counts_from_the_step_in_force(fake_store) -> None:  # type: ignore[no-untyped-def]
    """The job's end reaches the tuner's windows as a step: counted from the steps run so
    far; 0 says it is unknown again, and a bad count is refused with its value."""
    store = _attached(fake_store(scheduling=False)[0])
    store.expect_steps(10)
    assert store.tuning.end_step == 10
    _train(store, [None] * 4, np.random.RandomState(1))
    store.expect_steps(5)
    assert (store.step, store.tuning.end_step) == (4, 9)
    stats = store.statistics()  # the type TensorFlow's strategy returns too
    assert isinstance(stats, TrainingStats) and stats.config == store.config
    assert stats.steps >= 3 and stats.warmup_steps == 1  # the last step ends at the next
    assert stats.window == stats.steps - 1 and stats.samples_per_s > 0
    store.expect_steps(0)
    assert store.tuning.end_step == 0
    for bad in (-1, 2.5, "10", True):
        with pytest.raises(ConfigError, match=f"steps={bad!r}"):
            store.expect_steps(bad)


def test_trainer_honours_autobyte_with_one_device(mx_env) -> None:  # type: ignore[no-untyped-def]
    """Without the hook MXNet would silently create no kvstore for 'autobyte' on one device."""
    import mxnet as mx
    from mxnet import autograd, gluon

    net = gluon.nn.Dense(2)
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            kvstore="autobyte")
    with autograd.record():
        loss = net(mx.nd.ones((1, 3))).sum()
    loss.backward()
    with pytest.raises(ConfigError, match="parameter server"):
        trainer.step(1)


def test_overlap_warnings(mx_env, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    from mxnet import gluon

    from autobyte_mx._checks import check_environment

    for name in ("DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT", "DMLC_NUM_SERVER",
                 "DMLC_NUM_WORKER"):
        monkeypatch.setenv(name, "1")
    monkeypatch.delenv("MXNET_EXEC_BULK_EXEC_TRAIN", raising=False)
    with pytest.warns(mx_env.OverlapWarning, match="MXNET_EXEC_BULK_EXEC_TRAIN"):
        check_environment()
    monkeypatch.setenv("MXNET_EXEC_BULK_EXEC_TRAIN", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_environment()
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(2), gluon.nn.Dense(2))
    with pytest.warns(mx_env.OverlapWarning, match="static_alloc"):
        net.hybridize()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net.hybridize(static_alloc=True, static_shape=True)


# --- the scheduler's and servers' peer watch --------------------------------------------


def test_peer_watch_fires_only_after_a_peer_is_gone_the_grace_period() -> None:
    from autobyte_mx._watchdog import PeerWatch

    now = [0.0]
    peers = [{("10.0.0.1", 9000), ("10.0.0.2", 9001)}]
    watch = PeerWatch(5.0, role="server", scheduler=("10.0.0.1", 9000),
                      peers=lambda: peers[0], clock=lambda: now[0])
    assert watch.check() is None
    peers[0] = {("10.0.0.1", 9000)}  # the worker at .2 is gone
    now[0] = 4.0
    assert watch.check() is None
    peers[0] = {("10.0.0.1", 9000), ("10.0.0.2", 9001)}  # ... and back (ps-lite reconnects)
    now[0] = 8.0
    assert watch.check() is None
    peers[0] = {("10.0.0.1", 9000)}
    now[0] = 13.5
    message = watch.check()
    assert message is not None
    assert "a worker or server at 10.0.0.2:9001 for 6 s" in message, message
    peers[0] = {("10.0.0.2", 9001)}
    now[0] = 20.0
    message = watch.check()
    assert message is not None and "the scheduler at 10.0.0.1:9000" in message, message


def test_established_peers_reads_this_processs_outgoing_connections() -> None:
    """Against the kernel's tables: a connection this process opened counts (by the address
    it went to), the accepted end of it does not (it is this process's own listening port)."""
    import socket

    from autobyte_mx._watchdog import established_peers

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert ("127.0.0.1", port) not in established_peers()
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                peers = established_peers()
                assert ("127.0.0.1", port) in peers
                assert ("127.0.0.1", client.getsockname()[1]) not in peers
        assert ("127.0.0.1", port) not in established_peers()


# --- the optimizer on the server -----------------------------------------------------------


def _on_server(message: Any) -> Any:
    """What the server does with a message: unpickle it and make MXNet's Updater of it."""
    import pickle

    return mx.optimizer.get_updater(pickle.loads(pickle.dumps(message, 0)))


def test_the_server_updates_blocks_as_whole_tensors_across_layouts() -> None:
    """Adam on two tensors (5 and 7 elements), laid out as two blocks that split the second
    tensor, then whole, then split again: the weights equal Adam on whole tensors bitwise, so
    state and update counts (bias correction) follow the tensors, not the keys."""
    from autobyte_mx._server import ServerOptimizer

    sizes = {"a": 5, "b": 7}
    split = {1: (0, (("a", 5, 0, 5), ("b", 7, 0, 2))), 2: (0, (("b", 7, 2, 7),))}
    whole = {3: (1, (("a", 5, 0, 5),)), 4: (1, (("b", 7, 0, 7),))}
    adam = mx.optimizer.Adam(learning_rate=0.1, wd=0.01)
    reference = mx.optimizer.get_updater(mx.optimizer.Adam(learning_rate=0.1, wd=0.01))
    token = "job-units"
    updater = _on_server(ServerOptimizer(adam, token, blocks=split))
    _on_server(ServerOptimizer(adam, token, blocks=whole))  # a later message: same job
    rng = np.random.RandomState(0)
    want = {t: mx.nd.array(rng.randn(n)) for t, n in sizes.items()}
    stored = {1: mx.nd.concat(want["a"], want["b"][:2], dim=0), 2: want["b"][2:].copy()}
    for step, layout in enumerate([split, split, whole, split]):
        current = {t: w.copy() for t, w in want.items()}  # the weights the step starts from
        grads = {t: mx.nd.array(rng.randn(n)) for t, n in sizes.items()}
        for t in sizes:
            reference(t, grads[t], want[t])
        if layout is whole:  # fresh keys: made from the current weights
            stored[3], stored[4] = current["a"], current["b"]
        if step == 3:  # back to a layout used before: the workers refresh its keys first
            updater = _on_server(ServerOptimizer(adam, token, refresh=[1, 2]))
            updater(1, mx.nd.concat(current["a"], current["b"][:2], dim=0), stored[1])
            updater(2, current["b"][2:], stored[2])
        for key, (_, pieces) in layout.items():
            grad = mx.nd.concat(*[grads[t][start:stop] for t, _, start, stop in pieces], dim=0)
            updater(key, grad, stored[key])
        got = {"a": stored[1][:5], "b": mx.nd.concat(stored[1][5:], stored[2], dim=0)} \
            if layout is split else {"a": stored[3], "b": stored[4]}
        for t in sizes:
            assert np.array_equal(got[t].asnumpy(), want[t].asnumpy()), (step, t)


def test_the_server_exports_restores_and_loads_the_state_of_its_keys() -> None:
    """Adam's mean and var of a tensor split over two keys come out one component at a time
    through the keys' stored arrays, whose weights come back afterwards; a state loaded
    replaces the tensor's state whole."""
    from autobyte_mx._server import ServerOptimizer
    from autobyte_mx._states import wire

    adam = mx.optimizer.Adam(learning_rate=0.1)
    blocks = {1: (0, (("a", 5, 0, 3),)), 2: (0, (("a", 5, 3, 5),))}
    token = "job-states"
    updater = _on_server(ServerOptimizer(adam, token, blocks=blocks))
    reference = mx.optimizer.get_updater(mx.optimizer.Adam(learning_rate=0.1))
    rng = np.random.RandomState(1)
    want = mx.nd.array(rng.randn(5))
    stored = {1: want[:3].copy(), 2: want[3:].copy()}
    for _ in range(2):
        grad = mx.nd.array(rng.randn(5))
        reference("a", grad, want)
        updater(1, grad[:3], stored[1])
        updater(2, grad[3:], stored[2])
    weights = np.concatenate([stored[1].asnumpy(), stored[2].asnumpy()])
    assert np.array_equal(weights, want.asnumpy())
    for component in range(2):  # key 3 is on another server
        _on_server(ServerOptimizer(adam, token, export=(component, [1, 2, 3])))
        got = np.concatenate([stored[1].asnumpy(), stored[2].asnumpy()])
        assert np.array_equal(got, reference.states["a"][component].asnumpy())
    _on_server(ServerOptimizer(adam, token, restore=[3, 1, 2]))
    assert np.array_equal(np.concatenate([stored[1].asnumpy(), stored[2].asnumpy()]), weights)
    halved = {"a": tuple(p * 0.5 for p in reference.states["a"])}
    _on_server(ServerOptimizer(adam, token, load=wire(halved, {"a": 5})))
    _on_server(ServerOptimizer(adam, token, export=(1, [1, 2])))
    got = np.concatenate([stored[1].asnumpy(), stored[2].asnumpy()])
    assert np.array_equal(got, halved["a"][1].asnumpy())
    from autobyte_mx._server import _JOBS

    _on_server(ServerOptimizer(adam, "job-loaded", blocks=blocks, drop=token))
    assert "job-loaded" in _JOBS and token not in _JOBS  # the job it replaces is gone
    with pytest.raises(ConfigError, match="key 'a' holds \\[5, 5\\] elements, its weight 6"):
        wire(halved, {"a": 6})


def test_saved_update_counts_are_the_pushes_from_the_optimizer_start(tmp_path: Path) -> None:
    from autobyte_mx._states import counted, read, write

    sgd = mx.optimizer.SGD(learning_rate=0.1, begin_num_update=10)
    made = counted(sgd, {0: 3, 1: 5, 2: 0})
    assert made._index_update_count == {0: 13, 1: 15} and made.num_update == 15
    made._set_current_context(0)  # what the server does before each update
    assert made._index_update_count == {0: 13, 1: 15}
    assert sgd._index_update_count == {} and sgd.num_update == 10  # the original untouched
    assert sgd._all_index_update_counts == {0: {}}
    path = str(tmp_path / "states")  # the Updater's file: states, with the optimizer or not
    write(path, {0: None}, made)
    states, optimizer = read(path)
    assert states == {0: None} and optimizer._index_update_count == {0: 13, 1: 15}
    write(path, {0: None})
    assert read(path) == ({0: None}, None)


def test_the_server_sums_its_own_keys_and_names_unknown_ones() -> None:
    from autobyte_mx._server import ServerOptimizer

    updater = _on_server(ServerOptimizer(mx.optimizer.SGD(learning_rate=0.1), "job-sums",
                                         sums=[0]))
    stored = mx.nd.zeros((3,))
    updater(0, mx.nd.array([1.0, 2.0, 3.0]), stored)
    assert stored.asnumpy().tolist() == [1.0, 2.0, 3.0]  # the control key: a plain sum
    with pytest.raises(RuntimeError, match="key 9 has no layout"):
        updater(9, mx.nd.ones((3,)), stored)


@pytest.mark.parametrize(("optimizer", "why"), [
    (lambda: mx.optimizer.LAMB(), "LAMB is not one of MXNet's element-wise optimizers"),
    (lambda: mx.optimizer.DCASGD(), "DCASGD is not one of"),
    (lambda: mx.optimizer.SGD(multi_precision=True), "multi_precision"),
])
def test_optimizers_that_cannot_run_on_blocks_are_named(optimizer: Any, why: str) -> None:
    from autobyte_mx._server import check_element_wise

    assert why in (check_element_wise(optimizer()) or "")
    assert check_element_wise(mx.optimizer.Adam()) is None


# --- 2-bit gradient compression ------------------------------------------------------------


def _two_bit(grad: np.ndarray, residual: np.ndarray, t: np.float32) -> np.ndarray:
    """MXNet's 2-bit quantization of one whole tensor (its quantize_2bit kernel, in order)."""
    out = np.zeros_like(grad)
    for i in range(grad.size):
        residual[i] += grad[i]
        if residual[i] >= t:
            out[i] = t
            residual[i] -= t
        elif residual[i] <= -t:
            out[i] = -t
            residual[i] -= -t
    return out


def test_two_bit_blocks_keep_each_elements_residual_across_layouts() -> None:
    """Blocks of 4 KiB (splits and fusions), then one fused block, then 4 KiB again: what each
    element sends equals MXNet's quantization of the whole tensor, bitwise, every step."""
    from autobyte_mx._compression import Compression

    tensors = _tensors(*SHAPES)
    groups = Groups(zeros=_zeros, init=list)
    layouts = [groups.get(Config(partition_bytes=p, credit_bytes=p), tensors)
               for p in (4096, 1 << 20, 4096)]
    t = np.float32(0.3)
    compression = Compression(0.3)
    residuals = [np.zeros(int(np.prod(s)), np.float32) for s in SHAPES]
    rng = np.random.RandomState(0)
    for step in range(6):
        group = layouts[step // 2]
        grads = [rng.randn(*s).astype(np.float32) * 0.2 for s in SHAPES]
        for member, grad in enumerate(grads):
            group.copy_in(member, mx.nd.array(grad))
        for block in range(len(group.buffers)):
            compression.quantize(group, block)
        for member, grad in enumerate(grads):
            out = mx.nd.zeros(SHAPES[member])
            group.copy_out(member, [out], mx.nd.concat)
            want = _two_bit(grad.ravel(), residuals[member], t)
            assert np.array_equal(out.asnumpy().ravel(), want), (step, member)


def test_two_bit_leaves_members_not_issued_alone() -> None:
    from autobyte_mx._compression import Compression

    group = _group(_tensors((10,), (5,)), partition=1 << 20)
    group.copy_in(0, mx.nd.ones((10,)))
    group.copy_in(1, mx.nd.ones((5,)) * 0.1)
    Compression(0.5).quantize(group, 0, skip=[1])
    data = group.buffers[0].array.asnumpy()
    assert np.array_equal(data[:10], np.full(10, 0.5, np.float32))
    assert np.array_equal(data[10:], np.full(5, 0.1, np.float32))


@pytest.mark.parametrize("threshold", [0.5, 0.01, 3.0])
def test_control_values_cross_two_bit_compression_exactly(threshold: float) -> None:
    from autobyte_mx._compression import unwire, wire
    from common.agreement import Agreement

    config = Config(partition_bytes="64KiB", credit_bytes="1MiB")
    workers = [Agreement(rank=r, workers=3, config=config) for r in range(3)]
    workers[0].request(Config(partition_bytes="4MiB", credit_bytes="16MiB"))
    vectors = [w.vector(4095, due_at=4096, payload=[2**36 - 1] if w.rank == 0 else None,
                        payload_len=1) for w in workers]
    summed = np.sum([wire(v, threshold) for v in vectors], axis=0, dtype=np.float32)
    assert set(np.unique(wire(vectors[0], threshold))) <= {0.0, np.float32(threshold)}
    assert unwire(summed, threshold) == [float(sum(c)) for c in zip(*vectors, strict=True)]
    agreed = workers[1].take(unwire(summed, threshold))
    assert agreed.config is not None
    assert (agreed.config.partition_bytes, agreed.config.credit_bytes) == (4 << 20, 16 << 20)
    assert agreed.payload == (2**36 - 1,)


def test_compression_params_are_checked() -> None:
    from autobyte_mx._compression import parse_compression

    assert parse_compression({"type": "2bit", "threshold": 0.25}) == 0.25
    with pytest.raises(UnsupportedError, match="'1bit'"):
        parse_compression({"type": "1bit"})
    with pytest.raises(ConfigError, match="threshold > 0"):
        parse_compression({"type": "2bit", "threshold": -1})
    with pytest.raises(ConfigError, match="unknown keys"):
        parse_compression({"type": "2bit", "thresold": 1})

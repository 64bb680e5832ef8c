"""Adapter parts without ps-lite: plan, control key encoding, sequencer order, misuse errors."""

from __future__ import annotations

import random
import warnings
from collections.abc import Hashable, Sequence

import pytest
from conftest import skip_without_mxnet

from common.config import Config
from common.errors import ConfigError, UnsupportedError
from common.scheduler import Chunk, Scheduler

skip_without_mxnet()

from autobyte_mx._control import decode, encode, fingerprint  # noqa: E402
from autobyte_mx._plan import PlanItem, plan_order  # noqa: E402
from autobyte_mx._sequencer import Entry, Sequencer  # noqa: E402

# --- plan ----------------------------------------------------------------------------------


def test_plan_head_in_backward_order_then_forward_order() -> None:
    items = [PlanItem(f"l{i}", i, 100) for i in range(6)]
    assert plan_order(items, head_bytes=250) == ["l5", "l4", "l3", "l0", "l1", "l2"]
    assert plan_order(items, head_bytes=0) == ["l0", "l1", "l2", "l3", "l4", "l5"]
    assert plan_order(items, head_bytes=10**9) == ["l5", "l4", "l3", "l2", "l1", "l0"]


def test_plan_ignores_issue_order() -> None:
    items = [PlanItem(f"l{i}", i, 100) for i in range(6)]
    shuffled = items[:]
    random.Random(3).shuffle(shuffled)
    assert plan_order(shuffled, head_bytes=150) == plan_order(items, head_bytes=150)


# --- control key ---------------------------------------------------------------------------


def _sum(vectors: Sequence[list[float]]) -> list[float]:
    return [sum(col) for col in zip(*vectors, strict=True)]


def test_control_carries_rank0_proposal_exactly() -> None:
    cfg = Config(partition_bytes="1MiB", credit_bytes="4MiB")
    new = Config(partition_bytes=123_457, credit_bytes=3 * 1024**3, scheduling=False)
    vecs = [encode(rank=r, config=cfg, step=9, proposal=new if r == 0 else None)
            for r in range(3)]
    msg = decode(_sum(vecs), num_workers=3, rank=1, config=cfg)
    assert msg.apply_to(cfg) == cfg.replace(partition_bytes=123_457,
                                            credit_bytes=3 * 1024**3, scheduling=False)
    assert decode(_sum([encode(rank=r, config=cfg, step=9, proposal=None) for r in range(3)]),
                  num_workers=3, rank=0, config=cfg).apply_to(cfg) is None


def test_control_detects_disagreement_and_step_skew() -> None:
    a, b = Config(partition_bytes="64KiB"), Config(partition_bytes="8KiB")
    assert fingerprint(a) != fingerprint(b)
    vecs = [encode(rank=0, config=a, step=1, proposal=None),
            encode(rank=1, config=b, step=1, proposal=None)]
    with pytest.raises(ConfigError, match="workers disagree"):
        decode(_sum(vecs), num_workers=2, rank=1, config=b)
    vecs = [encode(rank=0, config=a, step=1, proposal=None),
            encode(rank=1, config=a, step=2, proposal=None)]
    with pytest.raises(ConfigError, match="different steps"):
        decode(_sum(vecs), num_workers=2, rank=0, config=a)


# --- sequencer -----------------------------------------------------------------------------


def _run(fire_order: list[int], config: Config, sizes: list[int]) -> list[tuple[str, int]]:
    """Issue keys in name order, fire gates in ``fire_order``, finish chunks one by one."""
    inflight: list[Chunk] = []
    started: list[tuple[str, int]] = []

    def start(chunk: Chunk) -> None:
        started.append((chunk.task.name, chunk.index))
        inflight.append(chunk)

    sched = Scheduler(config, start=start)

    def plan(entries: Sequence[Entry]) -> list[Hashable]:
        return plan_order([PlanItem(e.key, e.layer, e.nbytes) for e in entries],
                          head_bytes=config.credit_bytes)

    seq = Sequencer(sched, plan=plan, idle_s=60)
    sched.begin_step(1)
    seq.begin_step(1, frozenset(range(len(sizes))))
    entries = []
    for key in sorted(range(len(sizes)), key=str):  # Trainer order: by name, not by layer
        pieces = len(sched.split(_task(key, sizes[key])))
        entries.append(seq.issue(Entry(key, f"l{key}", key, sizes[key], 4, pieces)))
    by_key = {e.key: e for e in entries}
    for key in fire_order:
        for piece in range(by_key[key].pieces):
            seq.gate_fired(by_key[key], piece, lambda: None)
        if inflight and random.Random(key).random() < 0.5:
            sched.done(inflight.pop(0))
    while inflight:
        sched.done(inflight.pop(0))
    return started


def _task(key: int, nbytes: int):  # type: ignore[no-untyped-def]
    from common.scheduler import Task

    return Task(f"l{key}", key, nbytes)


def test_sequencer_admits_the_same_sequence_whatever_the_ready_timing() -> None:
    config = Config(partition_bytes=4096, credit_bytes=8192)
    sizes = [12288, 4096, 8192, 20000, 4096, 16384]
    backward = list(reversed(range(6)))
    reference = _run(backward, config, sizes)
    assert len(reference) == sum(-(-s // 4096) for s in sizes)
    for seed in range(5):
        jittered = backward[:]
        random.Random(seed).shuffle(jittered)
        assert _run(jittered, config, sizes) == reference
    # head (credit 8 KiB) in backward order, then forward order from layer 0
    assert reference[:2] == [("l5", 0), ("l5", 1)]
    assert reference[len(reference) - sum(-(-s // 4096) for s in sizes[:5]):][:3] == [
        ("l0", 0), ("l0", 1), ("l0", 2)]


def test_sequencer_groups_are_cut_at_program_points_only() -> None:
    """With an expected set, no timer closes a group: an idle pause on one worker must not cut
    its group differently from the others'. A key outside the set gets a group of its own."""
    started: list[str] = []
    sched = Scheduler(Config(), start=lambda c: started.append(c.task.name))
    seq = Sequencer(sched, plan=lambda es: [e.key for e in reversed(es)], idle_s=0.001)
    sched.begin_step(1)
    seq.begin_step(1, frozenset({"a", "b"}))
    a = seq.issue(Entry("a", "a", 0, 4, 4, 1))
    seq.gate_fired(a, 0, lambda: None)
    import time

    time.sleep(0.05)
    assert started == []  # still open: "b" is expected
    b = seq.issue(Entry("b", "b", 1, 4, 4, 1))
    assert started == []  # closed, plan is b then a, b's gate has not fired
    seq.gate_fired(b, 0, lambda: None)
    assert started == ["b", "a"]
    x = seq.issue(Entry("x", "x", 2, 4, 4, 1))
    seq.gate_fired(x, 0, lambda: None)
    assert started == ["b", "a", "x"]
    seq.stop()


def test_sequencer_closes_a_group_that_is_never_completed() -> None:
    started: list[str] = []
    sched = Scheduler(Config(), start=lambda c: started.append(c.task.name))
    seq = Sequencer(sched, plan=lambda es: [e.key for e in es], idle_s=0.01)
    sched.begin_step(1)
    seq.begin_step(1, None)  # plain kvstore use, first step: no expected set yet
    entry = seq.issue(Entry("a", "a", 0, 4, 4, 1))
    seq.gate_fired(entry, 0, lambda: None)
    import time

    deadline = time.monotonic() + 5
    while not started and time.monotonic() < deadline:
        time.sleep(0.01)
    seq.stop()
    assert started == ["a"]


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
    with pytest.raises(ConfigError, match="partition_bytes must be between"):
        mx_env.AutoByte(partition_bytes=-1)


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

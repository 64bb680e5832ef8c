"""The step agreement's codec and its checks, summed as the adapters' channels sum it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from common.agreement import HEADER, Agreement, fingerprint, vector_length
from common.config import Config
from common.errors import ConfigError


def _sum(vectors: Sequence[list[float]]) -> list[float]:
    return [sum(col) for col in zip(*vectors, strict=True)]


def _workers(config: Config, n: int, due: object = None) -> list[Agreement]:
    return [Agreement(rank=r, workers=n, config=config, due=due) for r in range(n)]  # type: ignore[arg-type]


def test_every_worker_takes_rank0s_proposal_exactly_and_no_other() -> None:
    cfg = Config(partition_bytes="1MiB", credit_bytes="4MiB")
    new = Config(partition_bytes=123_457, credit_bytes=3 * 1024**3, scheduling=False)
    workers = _workers(cfg, 3)
    workers[0].request(new)
    workers[1].request(Config(partition_bytes="8KiB", credit_bytes="8KiB"))  # not rank 0: unsent
    summed = _sum([w.vector(9, due_at=10) for w in workers])
    expected = cfg.replace(partition_bytes=123_457, credit_bytes=3 * 1024**3, scheduling=False)
    for w in workers:
        assert w.take(summed).config == expected and w.config == expected
    again = _sum([w.vector(10, due_at=11) for w in workers])  # the request was sent once
    assert [w.take(again).config for w in workers] == [None, None, None]
    assert all(w.config == expected for w in workers)


def test_only_rank0s_sample_request_is_taken_with_or_without_a_switch() -> None:
    cfg = Config()
    workers = _workers(cfg, 3)
    asked = _sum([w.vector(5, due_at=10, sample=w.rank == 0) for w in workers])
    assert [w.take(asked).sample for w in workers] == [True] * 3
    others = _sum([w.vector(15, due_at=20, sample=w.rank > 0) for w in workers])
    assert [w.take(others).sample for w in workers] == [False] * 3
    workers[0].request(partition_bytes="8KiB")
    both = [w.take(_sum([v.vector(25, due_at=30, sample=True) for v in workers]))
            for w in workers[:1]]
    assert both[0].sample and both[0].config is not None


def test_every_value_is_exact_in_float32() -> None:
    """Each slot's sum stays below 2**24, where float32 holds every integer."""
    cfg = Config()
    workers = _workers(cfg, 200)
    workers[0].request(Config(partition_bytes=(1 << 30) - 1, credit_bytes=(16 << 30) - 1))
    vectors = [w.vector(4095, due_at=0, payload=[2**36 - 1, 7] if w.rank == 0 else None,
                        payload_len=2) for w in workers]
    summed = _sum(vectors)
    assert max(summed) < 2**24 and len(summed) == vector_length(2)
    assert all(float(f) == f for f in summed)
    agreed = workers[1].take(summed)
    assert agreed.payload == (2**36 - 1, 7)
    assert agreed.config is not None and agreed.config.credit_bytes == (16 << 30) - 1


def test_a_user_request_wins_over_a_due_decision_and_every_rank_asks() -> None:
    asked: list[int] = []
    fast = Config(partition_bytes="256KiB", credit_bytes="1MiB")
    decisions = {20: fast, 30: fast}

    def due(step: int) -> Config | None:
        asked.append(step)
        return decisions.pop(step, None)

    cfg = Config()
    rank0, rank1 = Agreement(rank=0, workers=2, config=cfg, due=due), \
        Agreement(rank=1, workers=2, config=cfg, due=due)

    def agree(step: int) -> Config | None:
        summed = _sum([rank0.vector(step - 1, due_at=step), rank1.vector(step - 1, due_at=step)])
        (a, b) = rank0.take(summed).config, rank1.take(summed).config
        assert a == b
        return a

    assert agree(19) is None
    assert agree(20) == fast
    mine = Config(partition_bytes="8KiB", credit_bytes="8KiB")
    rank0.request(mine)
    assert agree(30) == mine  # the decision was taken from the inbox anyway
    assert 30 not in decisions
    assert asked == [19, 19, 20, 20, 30, 30]


def test_disagreement_step_skew_and_a_missing_worker_are_errors_that_say_so() -> None:
    a, b = Config(partition_bytes="64KiB"), Config(partition_bytes="8KiB")
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a) != fingerprint(a.replace(window_steps=5))  # they agree per window
    (ra, _), (_, rb) = _workers(a, 2), _workers(b, 2)
    with pytest.raises(ConfigError, match="workers disagree"):
        rb.take(_sum([ra.vector(1, due_at=2), rb.vector(1, due_at=2)]))
    r0, r1 = _workers(a, 2)
    with pytest.raises(ConfigError, match="different steps"):
        r0.take(_sum([r0.vector(1, due_at=2), r1.vector(2, due_at=3)]))
    with pytest.raises(ConfigError, match="summed 1 workers, expected 2"):
        r1.take(r0.vector(1, due_at=2))
    with pytest.raises(ConfigError, match="reconfigure needs a Config"):
        r0.request({"partition_bytes": 4096})  # type: ignore[arg-type]


def test_a_payload_must_fit_its_slots_and_a_vector_must_be_whole() -> None:
    (r0,) = _workers(Config(), 1)
    with pytest.raises(ValueError, match="payload of 3 values, the vector holds 2"):
        r0.vector(1, due_at=2, payload=[1, 2, 3], payload_len=2)
    with pytest.raises(ValueError, match=f"{HEADER} \\+ 2n values, got {HEADER + 1}"):
        r0.take([0.0] * (HEADER + 1))
    assert r0.take(r0.vector(1, due_at=2, payload_len=4)).payload is None


def test_a_request_may_change_the_configuration_in_force() -> None:
    cfg = Config(partition_bytes="1MiB", credit_bytes="4MiB")
    (r0,) = _workers(cfg, 1)
    r0.request(credit_bytes="8MiB")
    assert r0.take(r0.vector(1, due_at=2)).config == cfg.replace(credit_bytes="8MiB")
    before = r0.config
    r0.request(Config(partition_bytes="64KiB", credit_bytes="64KiB"), window_steps=4)
    agreed = r0.take(r0.vector(2, due_at=3)).config  # the knobs the agreement carries
    assert agreed == before.replace(partition_bytes="64KiB", credit_bytes="64KiB")
    assert agreed is not None and agreed.window_steps == before.window_steps
    with pytest.raises(ConfigError, match="partition_bytes"):
        r0.request(partition_bytes="1B")


def test_a_check_alone_proposes_nothing_and_keeps_the_request() -> None:
    asked: list[int] = []
    cfg = Config()
    r0 = Agreement(rank=0, workers=1, config=cfg, due=lambda s: asked.append(s) or None)
    r0.request(partition_bytes="64KiB")
    assert r0.take(r0.vector(0, due_at=None)).config is None and asked == []
    assert r0.take(r0.vector(1, due_at=2)).config == cfg.replace(partition_bytes="64KiB")
    assert asked == [2]

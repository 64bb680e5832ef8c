"""The issue order and lanes (no TensorFlow needed)."""

from __future__ import annotations

import pytest

from autobyte_tf.planning import MAX_LANES, TensorInfo, lanes_for, make_plan
from common.config import Config
from common.errors import ConfigError

KIB = 1024


def tensors(*sizes_kib: int) -> list[TensorInfo]:
    return [TensorInfo(name=f"t{i}", nbytes=s * KIB, itemsize=4) for i, s in enumerate(sizes_kib)]


def config(partition_kib: int, credit_kib: int) -> Config:
    return Config(partition_bytes=partition_kib * KIB, credit_bytes=credit_kib * KIB)


def test_chunks_cover_every_tensor_exactly_once_in_element_order() -> None:
    plan = make_plan(tensors(10, 4, 9), config(4, 8), workers=2, bandwidth="1gbit")
    for i, t in enumerate(tensors(10, 4, 9)):
        chunks = plan.chunks_of(i)
        assert [c.index for c in chunks] == list(range(len(chunks)))
        assert sum(c.size for c in chunks) * 4 == t.nbytes
        assert all(c.size * 4 <= 4 * KIB for c in chunks)
        assert [c.offset for c in chunks] == [sum(x.size for x in chunks[:k])
                                              for k in range(len(chunks))]


def test_default_order_follows_gradient_readiness_last_tensor_first() -> None:
    plan = make_plan(tensors(8, 8, 8), config(4, 4), workers=2, bandwidth="1gbit")
    assert [(c.tensor, c.index) for c in plan.chunks] == [(2, 0), (2, 1), (1, 0), (1, 1),
                                                          (0, 0), (0, 1)]
    assert not plan.measured


def test_lanes_are_credit_over_partition_assigned_round_robin() -> None:
    plan = make_plan(tensors(64), config(4, 16), workers=2, bandwidth="1gbit")
    assert plan.lanes == 4
    assert [c.lane for c in plan.chunks] == [j % 4 for j in range(16)]
    assert lanes_for(config(4, 4)) == 1
    assert lanes_for(Config(partition_bytes=4 * KIB, credit_bytes=1024**3)) == MAX_LANES


def test_measured_plan_lets_front_layers_jump_ahead_when_ready_together() -> None:
    # Backward of the big last tensor takes long; the front tensors become ready right after
    # it, so with a narrow window the front layer's chunks overtake the last layer's tail.
    infos = tensors(4, 4, 256)
    plan = make_plan(infos, config(4, 4), workers=2, bandwidth="100mbit",
                     backward_s=[1e-4, 1e-4, 5e-3])
    order = [(c.tensor, c.index) for c in plan.chunks]
    assert plan.measured
    assert sorted(order) == sorted((t, i) for t in range(3)
                                   for i in range(len(plan.chunks_of(t))))
    assert order.index((0, 0)) < order.index((2, 63)), order[:8]
    assert order[0][0] == 2  # nothing else is ready when the first chunk goes


def test_plans_are_deterministic_for_identical_inputs() -> None:
    args = dict(workers=3, bandwidth="1gbit", backward_s=[1e-3, 2e-4, 4e-3])
    a = make_plan(tensors(40, 8, 100), config(8, 32), **args)  # type: ignore[arg-type]
    b = make_plan(tensors(40, 8, 100), config(8, 32), **args)  # type: ignore[arg-type]
    assert a == b


def test_bad_inputs_are_refused_with_the_value() -> None:
    with pytest.raises(ConfigError, match="at least one tensor"):
        make_plan([], config(4, 4), workers=2, bandwidth="1gbit")
    with pytest.raises(ConfigError, match="one time per tensor"):
        make_plan(tensors(4, 4), config(4, 4), workers=2, bandwidth="1gbit", backward_s=[1.0])
    with pytest.raises(ConfigError, match="nbytes=6"):
        make_plan([TensorInfo("odd", 6, 4)], config(4, 4), workers=2, bandwidth="1gbit")
    with pytest.raises(ConfigError, match="bandwidth"):
        make_plan(tensors(4), config(4, 4), workers=2, bandwidth="fast",
                  backward_s=[1.0])

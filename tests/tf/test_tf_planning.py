"""The issue order and lanes of TensorFlow's blocks (no TensorFlow needed)."""

from __future__ import annotations

import pytest

from autobyte_tf._sequencer import TensorInfo, make_plan
from common.config import Config
from common.errors import ConfigError

KIB = 1024


def tensors(*sizes_kib: int) -> list[TensorInfo]:
    return [TensorInfo(name=f"t{i}", nbytes=s * KIB, itemsize=4) for i, s in enumerate(sizes_kib)]


def config(partition_kib: int, credit_kib: int) -> Config:
    return Config(partition_bytes=partition_kib * KIB, credit_bytes=credit_kib * KIB)


def test_every_block_is_issued_once_and_the_layout_is_the_shared_plans() -> None:
    plan = make_plan(tensors(10, 1, 1, 9), config(4, 8), workers=2, bandwidth="1gbit")
    assert sorted(plan.order) == list(range(len(plan.layout.blocks)))
    assert [b.nbytes for b in plan.layout.blocks] == [4 * KIB] * 5 + [1 * KIB]
    assert plan.layout.blocks[2].tensors == (0, 1, 2)  # the tail of t0 fused with t1 and t2


def test_default_order_follows_gradient_readiness_last_block_first() -> None:
    plan = make_plan(tensors(8, 8, 8), config(4, 4), workers=2, bandwidth="1gbit")
    assert plan.order == (5, 4, 3, 2, 1, 0)
    assert not plan.measured


def test_lanes_hold_as_many_blocks_as_the_credit() -> None:
    assert make_plan(tensors(64), config(4, 16), workers=2, bandwidth="1gbit").lanes == 4
    assert make_plan(tensors(64), config(4, 4), workers=2, bandwidth="1gbit").lanes == 1


def test_measured_plan_lets_front_blocks_jump_ahead_when_ready_together() -> None:
    # Backward of the big last tensor takes long; the front tensors become ready right after
    # it, so with a narrow window the front block overtakes the last tensor's tail.
    infos = tensors(4, 4, 256)
    plan = make_plan(infos, config(4, 4), workers=2, bandwidth="100mbit",
                     backward_s=[1e-4, 1e-4, 5e-3])
    last = len(plan.layout.blocks) - 1
    assert plan.measured
    assert sorted(plan.order) == list(range(last + 1))
    assert plan.order.index(0) < plan.order.index(last), plan.order[:8]
    assert plan.layout.blocks[plan.order[0]].ready_tensor == 2  # nothing else is ready first


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

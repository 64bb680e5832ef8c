"""The step agreement rides in the gradients' all-reduce, exactly (one process, no cluster)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

tf = pytest.importorskip("tensorflow", reason="needs tensorflow==2.21 (pip install 'autobyte[tf]')")

from autobyte_tf.strategy import _Agreement  # noqa: E402

pytestmark = pytest.mark.framework

# [have_config, partition, credit (16 GiB - 1: beyond float32's integers), scheduling,
#  have_times, two layer times]
VECTOR = np.array([1.0, 4194303.0, 16 * 2**30 - 1, 1.0, 1.0, 0.0123456789, 3.2e-7])


def agreement() -> tuple[_Agreement, list[NDArray[Any]]]:
    alone: list[NDArray[Any]] = []

    def fallback(vector: NDArray[Any]) -> Callable[[], NDArray[Any]]:
        alone.append(vector)
        return lambda: vector
    return _Agreement("/cpu:0", 2, fallback=fallback), alone


def step_of(a: _Agreement, dtype: Any) -> Callable[[], None]:
    """A traced step whose all-reduce is the identity (the other worker sends zeros)."""
    @tf.function
    def step() -> None:
        riding = a.ride(len(VECTOR), dtype)
        assert riding is not None
        tensor, take = riding
        take(tensor + tf.zeros_like(tensor))
    return step


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_vector_rides_exactly_once_a_traced_step_carries_it(dtype: str) -> None:
    a, alone = agreement()
    np.testing.assert_array_equal(a(VECTOR)(), VECTOR)  # before any trace: a collective alone
    assert alone and (a.rode, a.went_alone) == (0, 1)
    step = step_of(a, getattr(tf, dtype))
    step()
    wait = a(VECTOR)
    step()
    got = wait()
    np.testing.assert_array_equal(got[:5], VECTOR[:5])  # integers exact beyond 2**24
    np.testing.assert_allclose(got[5:], VECTOR[5:], rtol=1e-12)
    assert (a.rode, a.went_alone) == (1, 1)
    zeros = np.zeros_like(VECTOR)  # the next send (nothing to say) clears rank 0's part
    wait = a(zeros)
    step()
    np.testing.assert_array_equal(wait(), zeros)


def test_gradients_that_cannot_carry_it_leave_the_agreement_to_its_own_collective() -> None:
    a, alone = agreement()
    assert a.ride(len(VECTOR), tf.float16) is None
    step_of(a, tf.float32)  # not traced: nothing made
    assert a.ride(len(VECTOR), tf.float32) is None  # that length never rides again
    np.testing.assert_array_equal(a(VECTOR)(), VECTOR)
    assert (a.rode, a.went_alone) == (0, 1) and len(alone) == 1


def test_one_worker_has_nothing_to_carry() -> None:
    assert _Agreement("/cpu:0", 1, fallback=lambda v: lambda: v).ride(7, tf.float32) is None

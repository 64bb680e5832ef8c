"""The layers and backward times both adapters report (``common.stats._layers``)."""

from __future__ import annotations

import pytest

from common.stats import backward_times, layers_by_block, layers_by_rank, per_layer, ring_bytes


def test_tensorflow_backward_times_from_the_steps_start_solve_the_output_layer() -> None:
    # forward F = B/2: last ready = F + b_last; gaps give the others
    b = [0.002, 0.001, 0.003]
    forward = sum(b) / 2
    ready = [forward + b[2] + b[1] + b[0], forward + b[2] + b[1], forward + b[2]]
    assert backward_times(ready, from_start=True) == pytest.approx(b)
    assert backward_times([0.5, 0.7], from_start=True) == pytest.approx([0.0, 0.7 * 2 / 3])
    assert ring_bytes(1000, 1) == 0 and ring_bytes(1000, 4) == 1500


def test_mxnet_backward_times_give_the_first_ready_layer_the_smallest_gap() -> None:
    # layer ready times in forward order: layer 2 (the head) first, layer 0 last
    times = backward_times([10.012, 10.005, 10.001], from_start=False)
    assert times == pytest.approx([0.007, 0.004, 0.004])
    assert backward_times([1.0, 1.5, 1.2], from_start=False) == pytest.approx([0.0, 0.3, 0.3])
    assert backward_times([2.0], from_start=False) == [0.0]
    assert backward_times([], from_start=False) == [] == backward_times([], from_start=True)


def test_a_bias_joins_the_layer_of_the_kernel_before_it() -> None:
    # conv kernel, its bias, a batch-norm's scale and offset, dense kernel, bias, a lone kernel
    layers = layers_by_rank([4, 1, 1, 1, 2, 1, 2])
    assert layers == [0, 0, 0, 0, 1, 1, 2]
    assert per_layer([1.0, 0.5, 0.25, 0.25, 2.0, 1.0, 3.0], layers) == [2.0, 3.0, 3.0]
    assert layers_by_rank([1, 2]) == [0, 1] and per_layer([], []) == []


def test_a_blocks_adjacent_parameters_form_one_layer() -> None:
    names = ["net_dense0_weight", "net_dense0_bias", "net_dense1_weight", "net_dense1_bias",
             "net_dense2_weight"]
    assert layers_by_block(names) == [0, 0, 1, 1, 2]
    # the same block name further on is another layer (e.g. a shared block used twice)
    assert layers_by_block(["a_weight", "b_weight", "a_bias"]) == [0, 1, 2]
    assert layers_by_block([]) == []


@pytest.mark.parametrize("from_start", [True, False])
def test_stamps_that_overtake_each_other_add_up_to_their_span_not_more(from_start: bool) -> None:
    # forward order; the output (last) ready first, but the middle entries finish out of order,
    # as a layer's kernel and its normalisation's scale do; raw gaps, clamped at 0, would make
    # 0.004 + 0.004 + 0.001 = 0.009 s of backward of a span of 0.006 s
    ready = [1.006, 1.002, 1.005, 1.001, 1.000]
    times = backward_times(ready, from_start=from_start)
    assert times[:-1] == pytest.approx([0.001, 0.0, 0.004, 0.001])
    assert sum(times[:-1]) == pytest.approx(max(ready) - ready[-1])
    # in order, nothing changes: each share is the gap to the next
    ordered = backward_times([1.006, 1.005, 1.002, 1.001, 1.000], from_start=from_start)
    assert ordered[:-1] == pytest.approx([0.001, 0.003, 0.001, 0.001])

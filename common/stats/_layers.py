"""How both adapters turn their gradients into the layers and times the tuner sees.

A layer is what one backward operator produces: a kernel and its bias, a normalisation's scale
and offset. TensorFlow's gradients come without names an adapter can trust, so a tensor of rank
<= 1 joins the layer before it (``layers_by_rank``); MXNet's parameters are named
``<block>_<name>``, so adjacent parameters of one block form a layer (``layers_by_block``). Both
agree with the simulator and the meta-network's data on every demo model.

A layer's backward time is the gap between its gradient and the next layer's being ready
(``backward_times``): backward runs from the last layer to the first. The first gradient ready
(the output layer's) needs the moment backward began, which TensorFlow's stamped step start
gives and MXNet's asynchronous engine does not.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

__all__ = ["backward_times", "layers_by_block", "layers_by_rank", "per_layer", "ring_bytes"]


def ring_bytes(nbytes: int, workers: int) -> int:
    """Bytes one worker sends in a ring all-reduce of ``nbytes`` (``comm_factor``'s ring)."""
    return 0 if workers < 2 else 2 * (workers - 1) * nbytes // workers


def layers_by_rank(ranks: Sequence[int]) -> list[int]:
    """The layer of each gradient tensor (forward order) from the tensors' ranks."""
    layers: list[int] = []
    for i, rank in enumerate(ranks):
        layers.append(layers[-1] if i and rank <= 1 else (layers[-1] + 1 if i else 0))
    return layers


def layers_by_block(names: Sequence[str]) -> list[int]:
    """The layer of each parameter (forward order) from its name: the same block name up to
    the last ``_`` as the parameter before it is the same layer (a block used twice, further
    on, is another)."""
    layers: list[int] = []
    previous = None
    for name in names:
        block = name.rsplit("_", 1)[0]
        if layers and block == previous:
            layers.append(layers[-1])
        else:
            layers.append(layers[-1] + 1 if layers else 0)
        previous = block
    return layers


def per_layer(values: Sequence[float], layers: Sequence[int]) -> list[float]:
    """Sum per-tensor ``values`` into their layers."""
    out = [0.0] * (layers[-1] + 1 if layers else 0)
    for value, layer in zip(values, layers, strict=True):
        out[layer] += value
    return out


def backward_times(ready: Sequence[float], *, from_start: bool) -> list[float]:
    """Backward seconds per entry (forward order) from the times each was ready.

    Backward reaches entry i only once every entry behind it (nearer the output) is done, so
    entry i is done at the latest ready time of entries i and on, and its share is the gap
    to the same for entry i+1. The shares then add up to the span of the stamps, however they
    interleave (a layer's gradients, or parallel branches', finish in either order); gaps
    between the raw stamps would count every overtaking again. The last entry, the first
    ready: with ``from_start`` its ready time is seconds from the step's start and also holds
    the forward pass, which the simulator takes as half the backward pass, solved here;
    without, it gets the smallest positive gap, since the output layer is in practice a small
    head (never zero, and unlike a mean not inflated by a few heavy convolutions).
    """
    n = len(ready)
    if not n:
        return []
    done = list(itertools.accumulate(reversed(ready), max))[::-1]
    gaps = [done[i] - done[i + 1] for i in range(n - 1)]
    if from_start:
        return [*gaps, max(0.0, (2.0 * ready[-1] - math.fsum(gaps)) / 3.0)]
    positive = [g for g in gaps if g > 0.0]
    return [*gaps, min(positive) if positive else 0.0]

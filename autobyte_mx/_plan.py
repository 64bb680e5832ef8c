"""The one order in which every worker hands a step's tensors to the scheduler.

Why a planned order: under ``dist_sync`` a push completes only when *every* worker has pushed
that key, and a chunk holds credit until it completes. If two workers admit different chunks
(their gradients became ready at slightly different moments, so their ready sets differ when
credit frees), each holds credit for a chunk the other has not sent: a deadlock. Admitting in
one shared sequence is deadlock-free: the earliest unfinished chunk is either in flight
everywhere or next in line on a worker whose earlier chunks have all finished.

The plan follows ByteScheduler's policy as it plays out when communication is the bottleneck:
while backward runs, the tensors that become ready first (the output side, in backward order)
fill the credit window (``head_bytes``, the credit size); everything after goes in forward
layer order, so the next forward pass gets its first layers' parameters first. Every worker
computes the plan from the same inputs (forward order, sizes, configuration).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

__all__ = ["PlanItem", "plan_order"]


@dataclass(frozen=True, slots=True)
class PlanItem:
    key: Hashable
    layer: int  # forward order, 0 = nearest the input
    nbytes: int


def plan_order(items: Sequence[PlanItem], *, head_bytes: int) -> list[Hashable]:
    """Keys in issue order: a backward-order head of about ``head_bytes``, then forward order.

    The head takes whole tensors while the bytes taken so far are below ``head_bytes`` (so at
    least one tensor when ``head_bytes`` > 0). Ties in ``layer`` keep the given order.
    """
    position = {item.key: i for i, item in enumerate(items)}
    backward = sorted(items, key=lambda it: (-it.layer, position[it.key]))
    head: list[PlanItem] = []
    taken = 0
    for item in backward:
        if taken >= head_bytes:
            break
        head.append(item)
        taken += item.nbytes
    in_head = {item.key for item in head}
    rest = sorted((it for it in items if it.key not in in_head),
                  key=lambda it: (it.layer, position[it.key]))
    return [item.key for item in head] + [item.key for item in rest]

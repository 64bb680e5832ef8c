"""A stand-in for the other workers of a step agreement."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from common.agreement import SUMMED

__all__ = ["peers_agree"]

Vector = NDArray[np.float64]


def peers_agree(workers: int) -> Callable[[Vector], Callable[[], Vector]]:
    """A broadcast for rank 0 alone in a test of a ``workers``-worker job: the others agree
    with it (same configuration, same step) and propose nothing."""
    def broadcast(vector: Vector) -> Callable[[], Vector]:
        summed = np.array(vector, dtype=np.float64)
        summed[list(SUMMED)] *= workers
        return lambda: summed
    return broadcast

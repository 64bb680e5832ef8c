"""A fixed-output predictor, so code above the meta-network is tested without Keras."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from common.meta._features import MetaInput

__all__ = ["FixedPredictor"]


class FixedPredictor:
    """Predicts ``speed(partition, credit)`` for every job; records each call's size."""

    def __init__(self, speed: Callable[[int, int], float]) -> None:
        self.speed = speed
        self.calls: list[int] = []

    def predict(self, job: MetaInput, partitions: npt.ArrayLike,
                credits: npt.ArrayLike) -> npt.NDArray[np.float64]:
        p = np.asarray(partitions).reshape(-1)
        c = np.asarray(credits).reshape(-1)
        self.calls.append(len(p))
        return np.array([self.speed(int(a), int(b)) for a, b in zip(p, c, strict=True)],
                        dtype=np.float64)

"""Bayesian optimisation, as ByteScheduler tuned its knobs: a Gaussian process over the
(log2 partition, credit multiple) plane and expected improvement over the discrete space.

The first ``initial`` proposals are seeded random points of the space (spread over it); then
each proposal is the unobserved point with the highest expected improvement over the best mean
speed so far. The process models log(speed): configurations differ by factors, and a log keeps
the many poor points (tiny partitions) from dominating the fit. Deterministic for a seed.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from common.config import Config
from common.errors import ConfigError
from common.tuners._base import Tuner
from common.tuners._space import SearchSpace

__all__ = ["BayesianTuner"]


class BayesianTuner(Tuner):
    name = "bayesian"

    def __init__(self, *, space: SearchSpace | None = None, seed: int = 0,
                 base: Config | None = None, initial: int = 4, xi: float = 0.01,
                 restarts: int = 0) -> None:
        super().__init__(space=space, seed=seed, base=base)
        if isinstance(initial, bool) or not isinstance(initial, int) or initial < 1:
            raise ConfigError(f"initial must be an int >= 1, got initial={initial!r}")
        if not (isinstance(xi, int | float) and math.isfinite(xi) and xi >= 0):
            raise ConfigError(f"xi must be a finite number >= 0, got xi={xi!r}")
        if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
            raise ConfigError(f"restarts must be an int >= 0, got restarts={restarts!r}")
        self.xi = float(xi)
        self.restarts = restarts
        self._candidates = self.space.configs(self.base)
        self._x = np.array([self.space.features(c) for c in self._candidates])
        rng = np.random.default_rng(seed)
        self._initial = [int(i) for i in _spread(self._x, min(initial, len(self._candidates)),
                                                 rng)]

    def propose(self) -> Config:
        unobserved = [i for i, c in enumerate(self._candidates) if not self.observed(c)]
        if not unobserved:
            best = self.best
            return best[0] if best is not None else self._candidates[0]
        for i in self._initial:
            if not self.observed(self._candidates[i]):
                return self._candidates[i]
        return self._candidates[unobserved[int(np.argmax(self._expected_improvement(
            unobserved)))]]

    def _expected_improvement(self, indices: list[int]) -> np.ndarray[Any, Any]:
        from scipy.stats import norm
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

        observations = self.observations
        floor = min((s for _, s in observations if s > 0), default=1.0) / 2
        x = np.array([self.space.features(c) for c, _ in observations])
        y = np.log([max(s, floor) for _, s in observations])
        kernel = (ConstantKernel(1.0, (1e-3, 1e3))
                  * Matern(length_scale=[0.3, 0.3], length_scale_bounds=(0.05, 10.0), nu=2.5)
                  + WhiteKernel(1e-4, (1e-8, 1e-1)))
        gp = GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=self.restarts,
                                      random_state=self.seed)
        # a few dozen points: BLAS threads only contend (4x slower on a busy 2-core host)
        with warnings.catch_warnings(), threadpool_limits(1):
            warnings.simplefilter("ignore")  # convergence chatter on a handful of points
            gp.fit(x, y)
            mean, std = gp.predict(self._x[indices], return_std=True)
        improvement = mean - y.max() - self.xi
        std = np.maximum(std, 1e-12)
        z = improvement / std
        ei: np.ndarray[Any, Any] = improvement * norm.cdf(z) + std * norm.pdf(z)
        return ei


def _spread(x: np.ndarray[Any, Any], count: int, rng: np.random.Generator) -> list[int]:
    """``count`` indices of ``x`` far apart: a random first point, then farthest-point picks
    among a random half (so the start covers the space yet differs between seeds)."""
    order = rng.permutation(len(x))
    chosen = [int(order[0])]
    pool = order[: max(count, len(x) // 2)]
    while len(chosen) < count:
        dist = np.min(np.linalg.norm(x[pool][:, None, :] - x[chosen][None, :, :], axis=2),
                      axis=1)
        chosen.append(int(pool[int(np.argmax(dist))]))
    return chosen

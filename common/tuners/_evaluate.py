"""Run a tuner against an objective, and the simulator as that objective.

Used by the tests and ``benchmarks/sim_bench.py`` to hold the search tuners to their bar: with
the simulator as the objective, Bayesian optimisation reaches a configuration within 5% of the
grid-search optimum in at most 15 evaluations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.config import Config
from common.errors import ConfigError
from common.tuners._base import Knobs, Tuner, knobs_of

__all__ = ["SearchRun", "SimObjective", "run_search"]


class SimObjective:
    """Speed (samples/s) of a config under ``common.sim.simulate``, memoised by knobs, so a
    grid search and a tuner on the same job pay for each configuration once."""

    def __init__(self, profile: Any, **sim_options: Any) -> None:
        from common.sim import simulate

        self._simulate = simulate
        self.profile = profile
        self.options = {"trace": False, **sim_options}
        self._cache: dict[Knobs, float] = {}

    def __call__(self, config: Config) -> float:
        key = knobs_of(config)
        if key not in self._cache:
            self._cache[key] = self._simulate(self.profile, config, **self.options).speed
        return self._cache[key]


@dataclass(frozen=True)
class SearchRun:
    """The configurations a tuner proposed, in order, with their speeds."""

    history: tuple[tuple[Config, float], ...]

    @property
    def best(self) -> tuple[Config, float]:
        return max(self.history, key=lambda cs: cs[1])

    def evaluations_to(self, target: float) -> int | None:
        """How many evaluations it took to first reach ``target`` speed, None if never."""
        for i, (_, speed) in enumerate(self.history, start=1):
            if speed >= target:
                return i
        return None


def run_search(tuner: Tuner, objective: Callable[[Config], float], *, budget: int) -> SearchRun:
    """``budget`` rounds of propose -> evaluate -> observe."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ConfigError(f"budget must be an int >= 1, got budget={budget!r}")
    history = []
    for _ in range(budget):
        config = tuner.propose()
        speed = objective(config)
        tuner.observe(config, speed)
        history.append((config, speed))
    return SearchRun(tuple(history))

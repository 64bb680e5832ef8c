"""Issue 2's bar: with the simulator as the objective, Bayesian optimisation reaches a
configuration within 5% of the grid-search optimum in at most 15 evaluations, on each of the
four shipped profiles (8 workers at 10 Gbit/s, parameter server with 8 servers and ring
all-reduce; the default search space of 176 configurations). Seed 0, deterministic."""

import pytest

from common.sim import MODELS, get_profile
from common.tuners import BayesianTuner, SearchSpace, SimObjective, run_search

SETTINGS = {
    "ps": {"workers": 8, "arch": "ps", "servers": 8, "bandwidth": "10gbit"},
    "allreduce": {"workers": 8, "arch": "allreduce", "bandwidth": "10gbit"},
}
BUDGET, TOLERANCE = 15, 0.05


@pytest.mark.parametrize("arch", list(SETTINGS))
@pytest.mark.parametrize("model", MODELS)
def test_bayesian_gets_within_5_percent_of_grid_in_15_evaluations(model: str,
                                                                     arch: str) -> None:
    space = SearchSpace()
    objective = SimObjective(get_profile(model), **SETTINGS[arch])
    grid_best = max(objective(config) for config in space.configs())
    run = run_search(BayesianTuner(space=space, seed=0), objective, budget=BUDGET)
    used = run.evaluations_to((1 - TOLERANCE) * grid_best)
    assert used is not None and used <= BUDGET, (
        f"{model} {arch}: BO best {run.best[1]:.1f} vs grid {grid_best:.1f} samples/s")

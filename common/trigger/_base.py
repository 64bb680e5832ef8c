"""The optimization trigger's contract: given what was observed and what is predicted, decide.

Separate deciding from doing: the tuner proposes candidates (with predicted speeds when it has
a model), the trigger decides whether switching is worth it, the adapters apply. A trigger is
called once per window measured under the configuration in force, and keeps its own memory
(cooldown, recently left configurations), so it is one object per job.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import Literal

from common.config import Config

__all__ = ["Action", "Candidate", "Trigger", "Verdict", "knobs"]

Action = Literal["stay", "switch", "explore"]


def knobs(config: Config) -> tuple[int, int, bool]:
    """What makes two configurations different to the network: (S_p, S_c, scheduling); every
    native configuration (scheduling off) is the same one, whatever its S_p and S_c."""
    if not config.scheduling:
        return (0, 0, False)
    return (config.partition_bytes, config.credit_bytes, config.scheduling)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A configuration the tuner offers; ``predicted`` speed in samples/s, None if unknown.

    ``measured``: the prediction is this job's past measurement of the configuration, which
    goes stale when the environment changes (the trigger ignores it when it asks to adapt).
    """

    config: Config
    predicted: float | None = None
    source: str = "tuner"
    measured: bool = False


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the trigger decided, and why (the decision log records every Verdict).

    action: stay (keep ``config``), switch (a measured or predicted better one) or explore
        (a candidate nobody can predict yet, tried for one window).
    gain: predicted relative gain of the best candidate over the current configuration.
    error: relative error |predicted - observed| / observed for the configuration in force.
    adapt: the predictor should adapt online (its error stayed above adapt_threshold).
    """

    action: Action
    config: Config
    reason: str
    gain: float | None = None
    error: float | None = None
    adapt: bool = False


class Trigger(abc.ABC):
    """Decides once per window; implementations are small, one file per policy."""

    @abc.abstractmethod
    def decide(self, *, current: Config, observed: float, predicted_current: float | None,
               candidates: Sequence[Candidate], switch_cost_s: float = 0.0,
               horizon_s: float | None = None) -> Verdict:
        """One window of ``current`` ran at ``observed`` samples/s; switch to a candidate?

        ``switch_cost_s``: what a switch has cost this job (seconds lost to the first steps
        on a new configuration, e.g. a retrace), 0 when not measured yet; ``horizon_s``: how
        much longer the job is expected to train, None when unknown."""

    def exploring(self) -> bool:
        """Would an unmeasured, unpredicted proposal be tried now? When not, the loop does not
        ask a search tuner for one (a Bayesian proposal costs a Gaussian-process fit)."""
        return True

    def reset(self) -> None:  # noqa: B027 - optional hook; stateless policies need nothing
        """Forget the past (e.g. after the environment changed and the tuner restarted)."""

    def withdraw(self) -> None:  # noqa: B027 - optional hook; stateless policies need nothing
        """The switch last decided was not made (the coordinator's guard overruled it): it
        must not start a cooldown or count as leaving the configuration in force."""

"""Apply every new proposal at once: online grid search (each configuration for one window)
and ablations. No threshold and no hysteresis, so it is never the default."""

from __future__ import annotations

from collections.abc import Sequence

from common.config import Config
from common.trigger._base import Candidate, Trigger, Verdict, knobs

__all__ = ["AlwaysTrigger"]


class AlwaysTrigger(Trigger):
    def decide(self, *, current: Config, observed: float, predicted_current: float | None,
               candidates: Sequence[Candidate], switch_cost_s: float = 0.0,
               horizon_s: float | None = None) -> Verdict:
        for candidate in candidates:
            if knobs(candidate.config) != knobs(current):
                return Verdict("switch", candidate.config,
                               f"trigger 'always': take the {candidate.source}'s proposal")
        return Verdict("stay", current, "no candidate differs from the configuration in force")

"""Never reconfigure: tuning off (``tuner="none"``) or observe-only runs and baselines."""

from __future__ import annotations

from collections.abc import Sequence

from common.config import Config
from common.trigger._base import Candidate, Trigger, Verdict

__all__ = ["NeverTrigger"]


class NeverTrigger(Trigger):
    def exploring(self) -> bool:
        return False

    def decide(self, *, current: Config, observed: float, predicted_current: float | None,
               candidates: Sequence[Candidate], switch_cost_s: float = 0.0,
               horizon_s: float | None = None) -> Verdict:
        return Verdict("stay", current, "trigger 'never': configuration is fixed")

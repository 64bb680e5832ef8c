"""Grid search: every point of the space once (native first, then partition-major in
ascending order), then the best observed. Exhaustive and costly (177 windows for the default
space); the reference optimum the other tuners are measured against."""

from __future__ import annotations

from common.config import Config
from common.tuners._base import Tuner

__all__ = ["GridTuner"]


class GridTuner(Tuner):
    name = "grid"

    def propose(self) -> Config:
        for config in self.space.configs(self.base):
            if not self.observed(config):
                return config
        best = self.best  # every point was observed
        return best[0] if best is not None else self.space.configs(self.base)[0]

"""Test fakes for the control plane, shipped so tests (ours and adapters') need no real tuner.

``ScriptedTuner`` proposes configurations from a list in turn (then keeps proposing the best
it observed) and, when given ``predictions``, acts as a model-based tuner with ``predict``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from common.config import Config
from common.trigger import knobs

__all__ = ["PredictingTuner", "ScriptedTuner"]


class ScriptedTuner:
    def __init__(self, proposals: Sequence[Config]) -> None:
        self.proposals = list(proposals)
        self.observed: list[tuple[Config, float]] = []
        self.resets = 0

    def propose(self) -> Config:
        if self.proposals:
            return self.proposals.pop(0)
        best = self.best
        if best is None:
            raise RuntimeError("ScriptedTuner has nothing to propose and observed nothing")
        return best[0]

    def observe(self, config: Config, speed: float) -> None:
        self.observed.append((config, speed))

    @property
    def best(self) -> tuple[Config, float] | None:
        return max(self.observed, key=lambda cs: cs[1], default=None)

    def reset(self) -> None:
        self.resets += 1
        self.observed.clear()


class PredictingTuner(ScriptedTuner):
    """Proposes the config with the highest prediction; ``predict`` looks speeds up by knobs
    in ``predictions`` (a mapping or a callable), like a fixed-output meta-network."""

    def __init__(self, predictions: Mapping[tuple[int, int, bool], float]
                 | Callable[[Config], float], candidates: Sequence[Config]) -> None:
        super().__init__([])
        self._predictions = predictions
        self.candidates = list(candidates)
        self.adapted = 0

    def predict(self, configs: Sequence[Config]) -> list[float]:
        if callable(self._predictions):
            return [self._predictions(c) for c in configs]
        return [self._predictions[knobs(c)] for c in configs]

    def propose(self) -> Config:
        speeds = self.predict(self.candidates)
        return self.candidates[max(range(len(speeds)), key=speeds.__getitem__)]

    def adapt(self, observations: Sequence[object]) -> None:
        self.adapted += 1

"""The tuner contract: propose a configuration, observe its speed, report the best so far.

The tuner only proposes; the trigger decides whether to switch and the adapters apply it
(DESIGN.md §3). Proposals are stable: calling ``propose`` again before anything new is observed
returns the same configuration, so a trigger that declines a proposal sees it again.
Observations of one configuration are averaged (real windows are noisy).
"""

from __future__ import annotations

import abc
import math
from typing import ClassVar

from common.config import Config
from common.errors import ConfigError
from common.tuners._space import SearchSpace

__all__ = ["Knobs", "Tuner", "knobs_of"]

Knobs = tuple[int, int, bool]


def knobs_of(config: Config) -> Knobs:
    """(S_p, S_c, scheduling); every native configuration is the same one."""
    if not config.scheduling:
        return 0, 0, False
    return config.partition_bytes, config.credit_bytes, config.scheduling


class Tuner(abc.ABC):
    """Base of every tuner. ``space`` bounds the search; ``seed`` makes it deterministic;
    ``base`` supplies the Config fields a tuner does not tune."""

    name: ClassVar[str] = ""

    def __init__(self, *, space: SearchSpace | None = None, seed: int = 0,
                 base: Config | None = None) -> None:
        if space is not None and not isinstance(space, SearchSpace):
            raise ConfigError(f"space must be a SearchSpace, got space={space!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed must be an int >= 0, got seed={seed!r}")
        if base is not None and not isinstance(base, Config):
            raise ConfigError(f"base must be a Config, got base={base!r}")
        self.space = space or SearchSpace()
        self.seed = seed
        self.base = base or Config()
        self._speeds: dict[Knobs, list[float]] = {}
        self._configs: dict[Knobs, Config] = {}

    @abc.abstractmethod
    def propose(self) -> Config:
        """The configuration to try (or keep) next."""

    def observe(self, config: Config, speed: float) -> None:
        """``config`` ran at ``speed`` samples/s (a window's mean)."""
        if not isinstance(config, Config):
            raise ConfigError(f"observe needs a Config, got config={config!r}")
        if isinstance(speed, bool) or not isinstance(speed, int | float) \
                or not math.isfinite(speed) or speed < 0:
            raise ConfigError(f"speed must be a finite number >= 0 samples/s, got "
                              f"speed={speed!r}")
        key = knobs_of(config)
        self._configs.setdefault(key, config)
        self._speeds.setdefault(key, []).append(float(speed))

    @property
    def best(self) -> tuple[Config, float] | None:
        """The observed configuration with the highest mean speed, or None."""
        if not self._speeds:
            return None
        key = max(self._speeds, key=lambda k: math.fsum(self._speeds[k]) / len(self._speeds[k]))
        speeds = self._speeds[key]
        return self._configs[key], math.fsum(speeds) / len(speeds)

    @property
    def observations(self) -> list[tuple[Config, float]]:
        """Each observed configuration with its mean speed, in first-observed order."""
        return [(self._configs[k], math.fsum(v) / len(v)) for k, v in self._speeds.items()]

    def observed(self, config: Config) -> bool:
        return knobs_of(config) in self._speeds

    def reset(self) -> None:
        """Forget every observation (conditions changed: old speeds are stale)."""
        self._speeds.clear()
        self._configs.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(space={self.space!r}, seed={self.seed})"

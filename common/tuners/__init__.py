"""Tuners: propose (partition, credit) configurations from the speeds observed so far.

    from common.tuners import SearchSpace, create
    tuner = create("bayesian", space=SearchSpace(), seed=0)
    config = tuner.propose(); tuner.observe(config, speed); tuner.best

Baselines (one small file each, one base class): ``default`` (P3: 160 KB, 1x), ``grid`` and
``bayesian`` (ByteScheduler's GP + expected improvement). ``meta`` (the meta-network) is
registered by ``common.meta`` with ``register("meta", factory)``; until then ``create("meta")``
says so.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable
from typing import Any

from common.errors import ConfigError
from common.tuners._base import Tuner
from common.tuners._bayesian import BayesianTuner
from common.tuners._default import P3_PARTITION_BYTES, DefaultTuner
from common.tuners._evaluate import SearchRun, SimObjective, run_search
from common.tuners._grid import GridTuner
from common.tuners._space import (
    DEFAULT_CREDIT_MULTIPLES,
    DEFAULT_PARTITIONS,
    MAX_CREDIT_MULTIPLE,
    NATIVE_BYTES,
    SearchSpace,
)

__all__ = [
    "DEFAULT_CREDIT_MULTIPLES",
    "DEFAULT_PARTITIONS",
    "MAX_CREDIT_MULTIPLE",
    "NATIVE_BYTES",
    "P3_PARTITION_BYTES",
    "BayesianTuner",
    "DefaultTuner",
    "GridTuner",
    "SearchRun",
    "SearchSpace",
    "SimObjective",
    "Tuner",
    "available",
    "create",
    "register",
    "run_search",
]

TunerFactory = Callable[..., Tuner]

_FACTORIES: dict[str, TunerFactory] = {
    "default": DefaultTuner,
    "grid": GridTuner,
    "bayesian": BayesianTuner,
}
# names whose implementation lives in a module that registers it when imported
_PROVIDERS = {"meta": "common.meta"}


def register(name: str, factory: TunerFactory) -> None:
    """Make ``create(name, ...)`` build tuners with ``factory(space=..., seed=..., **kw)``."""
    if not callable(factory):
        raise ConfigError(f"tuner factory for {name!r} must be callable, got {factory!r}")
    _FACTORIES[str(name).strip().lower()] = factory


def available() -> list[str]:
    return sorted(_FACTORIES)


def create(name: str, *, space: SearchSpace | None = None, seed: int = 0,
           **options: Any) -> Tuner:
    """A tuner by name: default, grid, bayesian (and meta once common.meta provides it)."""
    key = str(name).strip().lower()
    if key not in _FACTORIES and key in _PROVIDERS:
        with contextlib.suppress(ImportError):
            importlib.import_module(_PROVIDERS[key])
        if key not in _FACTORIES:
            raise ConfigError(
                f"tuner {name!r} needs the meta-network ({_PROVIDERS[key]}), which is not "
                f"available yet; use one of {available()}")
    if key not in _FACTORIES:
        raise ConfigError(f"tuner must be one of {sorted(set(_FACTORIES) | set(_PROVIDERS))}, "
                          f"but got tuner={name!r}")
    return _FACTORIES[key](space=space, seed=seed, **options)

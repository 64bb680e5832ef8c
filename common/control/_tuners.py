"""Build the job's tuner by name from ``common.tuners`` (imported lazily: the coordinator is
the only place that needs one, and a standalone worker never does)."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from common.config import Config
from common.control._loop import TunerLike
from common.errors import ConfigError, ControlError

__all__ = ["make_tuner"]

log = logging.getLogger(__name__)


def make_tuner(name: str, *, seed: int = 0, space: Any = None,
               base: Config | None = None) -> TunerLike | None:
    """``common.tuners.create(name, space=..., seed=..., base=...)``; None for "none" and for
    "observe" (the coordinator runs and logs every window, and never changes anything).

    ``base`` is the job's Config: proposals keep its fields other than the two knobs. When the
    meta-network cannot be built, Bayesian optimisation takes its place, with a warning.
    """
    if name in ("none", "observe"):
        return None
    try:
        tuners: Any = importlib.import_module("common.tuners")
        create = tuners.create
    except (ImportError, AttributeError) as exc:
        raise ControlError(f"tuner {name!r} is unavailable: common.tuners cannot be used "
                           f"({exc})") from None
    if space is None:
        space = tuners.SearchSpace()
    try:
        tuner: TunerLike = create(name, space=space, seed=seed, base=base)
    except ConfigError as exc:
        if name != "meta":
            raise ControlError(str(exc)) from None
        log.warning("%s; falling back to Bayesian optimisation", exc)
        tuner = create("bayesian", space=space, seed=seed, base=base)
    return tuner

"""Build the job's tuner by name from ``common.tuners`` (imported lazily: the coordinator is
the only place that needs one, and a standalone worker never does)."""

from __future__ import annotations

import importlib
from typing import Any

from common.control._loop import TunerLike
from common.errors import ControlError

__all__ = ["make_tuner"]


def make_tuner(name: str, *, seed: int = 0, space: Any = None) -> TunerLike | None:
    """``common.tuners.create(name, space=..., seed=...)``; None for "none"."""
    if name == "none":
        return None
    try:
        tuners: Any = importlib.import_module("common.tuners")
        create = tuners.create
    except (ImportError, AttributeError) as exc:
        raise ControlError(f"tuner {name!r} is unavailable: common.tuners cannot be used "
                           f"({exc})") from None
    if space is None:
        space = tuners.SearchSpace()
    tuner: TunerLike = create(name, space=space, seed=seed)
    return tuner

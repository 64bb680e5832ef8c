"""The optimization trigger: decides whether a proposed configuration is worth switching to.

``create(name, config=...)`` builds a policy: "threshold" (the paper's, the default: gain
threshold, adaptation requests, hysteresis, cooldown), "always" (take every proposal: online
grid search, ablations) or "never" (tuning off).
"""

from __future__ import annotations

from typing import Any

from common.config import Config
from common.errors import ConfigError
from common.trigger._always import AlwaysTrigger
from common.trigger._base import Action, Candidate, Trigger, Verdict, knobs
from common.trigger._never import NeverTrigger
from common.trigger._threshold import ThresholdTrigger

__all__ = [
    "TRIGGERS",
    "Action",
    "AlwaysTrigger",
    "Candidate",
    "NeverTrigger",
    "ThresholdTrigger",
    "Trigger",
    "Verdict",
    "create",
    "knobs",
]

TRIGGERS = ("threshold", "always", "never")


def create(name: str = "threshold", *, config: Config | None = None, **options: Any) -> Trigger:
    """A trigger by name; "threshold" takes its thresholds from ``config`` unless overridden."""
    if name == "threshold":
        cfg = config or Config()
        options.setdefault("gain_threshold", cfg.gain_threshold)
        options.setdefault("adapt_threshold", cfg.adapt_threshold)
        return ThresholdTrigger(**options)
    if options:
        raise ConfigError(f"trigger {name!r} takes no options, got {sorted(options)}")
    if name == "always":
        return AlwaysTrigger()
    if name == "never":
        return NeverTrigger()
    raise ConfigError(f"trigger must be one of {list(TRIGGERS)}, got trigger={name!r}")

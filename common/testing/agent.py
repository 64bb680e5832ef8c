"""A stand-in for ``common.control.TuningAgent`` that records what an adapter's feed calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common.config import Config

__all__ = ["RecordingAgent"]


class RecordingAgent:
    """Records every call as ``(kind, arguments)``; ``due`` hands out ``decisions[step]``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.decisions: dict[int, Config] = {}

    def set_layer_bytes(self, layer_bytes: Sequence[int]) -> None:
        self.calls.append(("layers", list(layer_bytes)))

    def record_step(self, step: int, samples: int, step_time_s: float, **kw: Any) -> None:
        self.calls.append(("step", (step, samples, step_time_s, kw)))

    def set_config(self, config: Config, *, step: int) -> None:
        self.calls.append(("config", (config, step)))

    def due(self, step: int) -> Config | None:
        self.calls.append(("due", step))
        return self.decisions.pop(step, None)

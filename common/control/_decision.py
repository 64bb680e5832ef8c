"""A decision: switch to ``config`` at step ``step``. Carried on the wire and in poll()."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from common.config import Config
from common.errors import ControlError

__all__ = ["Decision"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Decision:
    """Apply ``config`` from step ``step`` on (before that step runs), on every worker.

    ``id`` increases per coordinator ``session``; the adapters agree on (id, step) through
    their own channel too, so a worker that heard it late still switches at the same step.
    """

    id: int
    step: int
    config: Config
    session: str = ""
    reason: str = ""
    window: int = -1

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "step": self.step, "config": self.config.to_dict(),
                "session": self.session, "reason": self.reason, "window": self.window}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        try:
            id_, step = data["id"], data["step"]
            if any(isinstance(v, bool) or not isinstance(v, int) for v in (id_, step)):
                raise ControlError(f"decision id and step must be integers, got {id_!r}, {step!r}")
            if id_ < 1 or step < 0:
                raise ControlError(f"decision id must be >= 1 and step >= 0, got {id_}, {step}")
            return cls(id=id_, step=step, config=Config.from_dict(data["config"]),
                       session=str(data.get("session", "")), reason=str(data.get("reason", "")),
                       window=int(data.get("window", -1)))
        except ControlError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise ControlError(f"malformed decision: {exc!r}") from None

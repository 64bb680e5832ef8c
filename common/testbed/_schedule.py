"""Time-varying bandwidth: a schedule such as ``"10gbit:20,3gbit:20"`` applied in a thread.

Each step is ``RATE:SECONDS`` (same rate up and down) or ``UP/DOWN:SECONDS``. The runner
applies a step, waits its duration on an Event (so ``stop()`` returns at once), and repeats the
whole list until stopped when ``repeat`` is true.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Sequence

from common.errors import ConfigError, TestbedError
from common.units import format_rate, parse_rate

__all__ = ["RateStep", "ScheduleRunner", "parse_schedule"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class RateStep:
    """Hold ``up``/``down`` bit/s for ``seconds``."""

    up: float
    down: float
    seconds: float

    def __str__(self) -> str:
        rate = (format_rate(self.up) if self.up == self.down
                else f"{format_rate(self.up)}/{format_rate(self.down)}")
        return f"{rate}:{self.seconds:g}"


def parse_schedule(text: str) -> tuple[RateStep, ...]:
    """``"10gbit:20,3gbit:20"`` or ``"1gbit/100mbit:5, 100mbit:5"`` -> steps."""
    steps = []
    for item in (part.strip() for part in str(text).split(",")):
        if not item:
            continue
        rate_text, sep, secs_text = item.rpartition(":")
        if not sep:
            raise ConfigError("schedule step must be RATE:SECONDS (e.g. '10gbit:20'), got "
                              f"{item!r} in schedule={text!r}")
        up_text, _, down_text = rate_text.partition("/")
        try:
            seconds = float(secs_text)
        except ValueError:
            raise ConfigError(f"schedule step duration must be seconds, got {secs_text!r} in "
                              f"schedule={text!r}") from None
        if not seconds > 0:
            raise ConfigError(f"schedule step duration must be > 0 s, got {item!r}")
        up = parse_rate(up_text, "schedule rate")
        down = parse_rate(down_text, "schedule rate") if down_text else up
        steps.append(RateStep(up=up, down=down, seconds=seconds))
    if not steps:
        raise ConfigError(f"schedule must have at least one RATE:SECONDS step, got {text!r}")
    return tuple(steps)


class ScheduleRunner:
    """Applies ``steps`` through ``apply`` in a daemon thread until the end or ``stop()``."""

    def __init__(self, *, apply: Callable[[RateStep], None], steps: Sequence[RateStep],
                 repeat: bool = True) -> None:
        if not steps:
            raise ConfigError("steps must not be empty")
        self._apply = apply
        self._steps = tuple(steps)
        self._repeat = repeat
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autobyte-rate-schedule",
                                        daemon=True)
        self.error: BaseException | None = None
        self.applied = 0

    def start(self) -> ScheduleRunner:
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a non-repeating schedule to finish; True when it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for step in self._steps:
                    if self._stop.is_set():
                        return
                    log.info("rate schedule: %s", step)
                    self._apply(step)
                    self.applied += 1
                    if self._stop.wait(step.seconds):
                        return
                if not self._repeat:
                    return
        except (TestbedError, OSError) as exc:
            self.error = exc
            log.error("rate schedule stopped: %s", exc)

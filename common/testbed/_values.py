"""Validated values of the testbed: names, addresses, durations, rates."""

from __future__ import annotations

from common.config import TESTBED_PREFIX_ENV, environment
from common.errors import ConfigError
from common.units import parse_rate

__all__ = ["DEFAULT_BASE", "default_base", "host_address", "parse_seconds", "rate_or_none"]

DEFAULT_BASE = "abt"


def default_base() -> str:
    """Namespace name base: AUTOBYTE_TESTBED_PREFIX (e.g. one per engineer or CI job) or abt."""
    base: str = environment(TESTBED_PREFIX_ENV) or DEFAULT_BASE
    return base


def host_address(subnet: str, index: int) -> str:
    """Host i is ``<subnet>.<250 - i>``: three-digit last octets counting down.

    ps-lite ranks nodes by address in descending string order; counting down makes that the
    host order, so MXNet worker i placed on host i+1 also gets kv.rank i.
    """
    return f"{subnet}.{250 - index}"


def parse_seconds(value: float | str | None, name: str) -> float | None:
    """``0.005``, ``"5ms"``, ``"200us"``, ``"1s"`` -> seconds (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a duration, got {name}={value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        for unit, scale in (("us", 1e-6), ("ms", 1e-3), ("s", 1.0), ("", 1.0)):
            if text.endswith(unit):
                try:
                    seconds = float(text[: len(text) - len(unit)]) * scale
                except ValueError:
                    continue
                break
        else:
            raise ConfigError(f"{name} must be a duration like '5ms', got {name}={value!r}")
    if not 0 <= seconds <= 10:
        raise ConfigError(f"{name} must be between 0 and 10 s, got {name}={value!r}")
    return seconds


def rate_or_none(value: float | str | None, name: str) -> float | None:
    return None if value is None else parse_rate(value, name)

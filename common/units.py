"""Sizes in bytes and link rates in bits per second: parsing and formatting.

Everything inside AutoByte counts bytes (sizes) and bits per second (rates); strings are
converted only at the boundary (CLI flags, keyword arguments, AUTOBYTE_* variables).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from common.errors import ConfigError

__all__ = ["format_bytes", "format_rate", "parse_bytes", "parse_rate"]

_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kib": 1024, "kb": 1000,
    "m": 1024**2, "mib": 1024**2, "mb": 1000**2,
    "g": 1024**3, "gib": 1024**3, "gb": 1000**3,
}
_RATE_UNITS = {
    "": 1, "bit": 1, "bps": 1,
    "k": 1e3, "kbit": 1e3, "kbps": 1e3,
    "m": 1e6, "mbit": 1e6, "mbps": 1e6,
    "g": 1e9, "gbit": 1e9, "gbps": 1e9,
}
_NUMBER_UNIT = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def _split(text: str, name: str, units: Mapping[str, float], example: str) -> tuple[float, float]:
    match = _NUMBER_UNIT.match(text)
    if match is None or match.group(2).lower() not in units:
        allowed = ", ".join(sorted(u for u in units if u))
        raise ConfigError(
            f"{name} must be a number with an optional unit ({allowed}), e.g. {example!r}, "
            f"but got {name}={text!r}"
        )
    return float(match.group(1)), units[match.group(2).lower()]


def parse_bytes(value: int | float | str, name: str = "size") -> int:
    """``4096``, ``"4MB"`` (10^6), ``"512KiB"`` or ``"4M"`` (2^20) -> bytes as an int.

    Bare K/M/G are binary, as in tc and dd; KB/MB/GB are decimal, KiB/MiB/GiB binary. A sign
    is kept ("-4MB" is -4000000), as for an int, so the caller's range check can name it.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a size in bytes, but got {name}={value!r}")
    if isinstance(value, int | float):
        number, scale = float(value), 1.0
    elif isinstance(value, str):
        number, scale = _split(value, name, _SIZE_UNITS, "4MiB")
    else:
        raise ConfigError(f"{name} must be an int or a string like '4MiB', got {name}={value!r}")
    size = number * scale
    if size != int(size):
        raise ConfigError(f"{name} must be a whole number of bytes, but got {name}={value!r}")
    return int(size)


def parse_rate(value: int | float | str, name: str = "bandwidth") -> float:
    """``"10gbit"``, ``"100mbit"``, ``"2.5Gbps"`` or a number of bits/s -> bits per second."""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a rate, but got {name}={value!r}")
    if isinstance(value, int | float):
        rate = float(value)
    elif isinstance(value, str):
        number, scale = _split(value, name, _RATE_UNITS, "10gbit")
        rate = number * scale
    else:
        raise ConfigError(f"{name} must be a number or a string like '10gbit', got {value!r}")
    if not rate > 0:
        raise ConfigError(f"{name} must be > 0 bit/s, but got {name}={value!r}")
    return rate


def format_bytes(size: float) -> str:
    """Binary units, 3 significant digits: 4194304 -> '4MiB', 163840 -> '160KiB'."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(size) >= scale:
            return f"{size / scale:.3g}{unit}"
    return f"{int(size)}B"


def format_rate(bits_per_second: float) -> str:
    """Decimal units as tc writes them: 1e10 -> '10gbit'."""
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits_per_second >= scale:
            return f"{bits_per_second / scale:.3g}{unit}"
    return f"{bits_per_second:.3g}bit"

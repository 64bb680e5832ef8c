"""Link bandwidth that changes over time: a repeating piecewise-constant schedule.

``BandwidthSchedule([(20, 10e9), (20, 3e9)])`` is 10 Gbit/s for 20 s, then 3 Gbit/s for 20 s,
then again from the start (the paper's "switch between 3 and 10 Gbps every 20 iterations").
The simulator asks one question of it: a transfer of ``bits`` starting at ``t`` ends when?
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable

from common.errors import ConfigError
from common.units import format_rate, parse_rate

__all__ = ["BandwidthSchedule"]


class BandwidthSchedule:
    """Repeating segments of (duration in seconds, bits per second), starting at t = 0."""

    __slots__ = ("_cum_bits", "_ends", "_period", "_period_bits", "_rates", "segments")

    def __init__(self, segments: Iterable[tuple[float, float]]) -> None:
        items = [(float(d), float(r)) for d, r in segments]
        if not items:
            raise ConfigError("a bandwidth schedule needs at least one (duration_s, bits/s) "
                              "segment, got none")
        for duration, rate in items:
            if not (math.isfinite(duration) and duration > 0):
                raise ConfigError(f"bandwidth schedule durations must be finite and > 0 s, "
                                  f"got duration_s={duration!r}")
            if not (math.isfinite(rate) and rate > 0):
                raise ConfigError(f"bandwidth schedule rates must be finite and > 0 bit/s, "
                                  f"got rate={rate!r}")
        self.segments: tuple[tuple[float, float], ...] = tuple(items)
        self._rates = [r for _, r in items]
        self._ends: list[float] = []
        self._cum_bits: list[float] = []  # bits sendable from the period start to each end
        t = bits = 0.0
        for duration, rate in items:
            t += duration
            bits += duration * rate
            self._ends.append(t)
            self._cum_bits.append(bits)
        self._period, self._period_bits = t, bits

    @classmethod
    def constant(cls, rate: float) -> BandwidthSchedule:
        return cls([(1.0, rate)])

    @classmethod
    def parse(cls, text: str) -> BandwidthSchedule:
        """``"10gbit:20,3gbit:20"``: rate:seconds pairs, repeating."""
        segments = []
        for part in str(text).split(","):
            rate_text, sep, duration_text = part.strip().partition(":")
            try:
                duration = float(duration_text)
            except ValueError:
                duration = -1.0
            if not sep or duration <= 0:
                raise ConfigError(f"bandwidth schedule must be comma-separated RATE:SECONDS "
                                  f"pairs, e.g. '10gbit:20,3gbit:20', but got {text!r}")
            segments.append((duration, parse_rate(rate_text, "bandwidth schedule rate")))
        return cls(segments)

    @property
    def is_constant(self) -> bool:
        return len(set(self._rates)) == 1

    @property
    def period_s(self) -> float:
        return self._period

    @property
    def peak_rate(self) -> float:
        return max(self._rates)

    @property
    def mean_rate(self) -> float:
        """Time-weighted mean over one period (the long-run rate)."""
        return self._period_bits / self._period

    def rate_at(self, t: float) -> float:
        phase = t % self._period
        return self._rates[min(bisect.bisect_right(self._ends, phase), len(self._rates) - 1)]

    def finish(self, t: float, bits: float) -> float:
        """When a transfer of ``bits`` that has the link to itself from ``t`` ends."""
        if bits <= 0:
            return t
        if len(self._rates) == 1:
            return t + bits / self._rates[0]
        cycles, phase = divmod(t, self._period)
        base = cycles * self._period
        i = min(bisect.bisect_right(self._ends, phase), len(self._rates) - 1)
        start_bits = (self._cum_bits[i] - (self._ends[i] - phase) * self._rates[i])
        target = start_bits + bits
        whole, target = divmod(target, self._period_bits)
        base += whole * self._period
        j = min(bisect.bisect_left(self._cum_bits, target), len(self._rates) - 1)
        return base + self._ends[j] - (self._cum_bits[j] - target) / self._rates[j]

    def __repr__(self) -> str:
        inner = ",".join(f"{format_rate(r)}:{d:g}" for d, r in self.segments)
        return f"BandwidthSchedule({inner!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BandwidthSchedule) and self.segments == other.segments

    def __hash__(self) -> int:
        return hash(self.segments)

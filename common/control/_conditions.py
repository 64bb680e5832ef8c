"""What a job measured under conditions it has left, kept for when they come back.

A link that alternates (a neighbour's job starting and stopping, a shared uplink's busy hours)
brings the same conditions back again and again. The loop clears its measurements when the
speed in force moves ``CHANGED``-fold, since they describe another job; clearing them for
good would make it measure native and probe again every time the link comes back, and spend
each phase finding what it found in the last one. So the measurements it clears are kept here,
and when a window matches conditions seen before, those measurements come back and the job
goes straight to the best of them. Conditions are told apart by the link rate the windows
measured (over the link's busy time, whatever the configuration) and by the speed of the
configuration in force, each where it is known.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import statistics

__all__ = ["RATES", "Conditions", "Memory"]

_Knobs = tuple[int, int, bool]
MATCH = 1.7  # within this factor of what was measured: the same conditions (a change is 3x)
KEEP = 4  # sets of conditions remembered (the oldest goes first)
RATES = 10  # link rates kept per set: the recent windows'


@dataclasses.dataclass
class Conditions:
    """The loop's per-conditions state: speeds measured, what the guard left and tried (a new
    set is empty)."""

    history: dict[_Knobs, collections.deque[float]] = dataclasses.field(default_factory=dict)
    vetoed: dict[_Knobs, int] = dataclasses.field(default_factory=dict)
    probed: bool = False
    climbed: set[_Knobs] = dataclasses.field(default_factory=set)
    climb_s: float = 0.0
    misses: int = 0
    overrated: float = 1.0
    lasted_s: float = 0.0  # how long they held the last time
    total_s: float = 0.0  # and in all, every time they held
    rates: tuple[float, ...] = ()  # the link rates their windows measured (bits/s)

    @property
    def rate(self) -> float | None:
        return statistics.median(self.rates) if self.rates else None

    def speed(self, key: _Knobs) -> float | None:
        speeds = self.history.get(key)
        return statistics.fmean(speeds) if speeds else None


class Memory:
    """Conditions left, most recent last; ``recall`` takes back the set that matches."""

    def __init__(self, keep: int = KEEP) -> None:
        self._left: collections.deque[Conditions] = collections.deque(maxlen=keep)

    def __len__(self) -> int:
        return len(self._left)

    def leave(self, conditions: Conditions) -> None:
        """Keep ``conditions``; merged into a remembered set whose link rate matches theirs,
        as do the speeds of the configurations both measured (a stretch whose first window
        was not recognised is more of the same conditions), newer measurements first."""
        if not conditions.history:
            return
        same = next((c for c in self._left if _alike(c, conditions)), None)
        if same is not None:
            self._left.remove(same)
            conditions = Conditions(
                history={**same.history, **conditions.history},
                vetoed={**same.vetoed, **conditions.vetoed},
                probed=same.probed or conditions.probed,
                climbed=same.climbed | conditions.climbed,
                climb_s=same.climb_s + conditions.climb_s,
                misses=conditions.misses, overrated=min(same.overrated, conditions.overrated),
                lasted_s=conditions.lasted_s, total_s=same.total_s + conditions.total_s,
                rates=(*same.rates, *conditions.rates)[-RATES:])
        self._left.append(conditions)

    def recall(self, key: _Knobs, speed: float, rate: float | None) -> Conditions | None:
        """The remembered conditions whose link rate is within ``MATCH`` of ``rate`` and under
        which ``key`` ran within ``MATCH`` of ``speed``, each where both are known (the closest
        such set); removed from memory, since they are the job's again. None if none is."""
        best, closest = None, math.inf
        for conditions in self._left:
            distances = [d for a, b in ((rate, conditions.rate), (speed, conditions.speed(key)))
                         if (d := _distance(a, b)) is not None]
            if distances and max(distances) <= math.log(MATCH) and sum(distances) < closest:
                best, closest = conditions, sum(distances)
        if best is not None:
            self._left.remove(best)
        return best


def _distance(a: float | None, b: float | None) -> float | None:
    """|log(a / b)|, None unless both are known and positive."""
    return abs(math.log(a / b)) if a and b and a > 0 and b > 0 else None


def _alike(a: Conditions, b: Conditions) -> bool:
    """The same link rate within ``MATCH``, and every configuration both measured within it."""
    near = [_distance(a.rate, b.rate)] + [_distance(a.speed(k), b.speed(k))
                                          for k in a.history.keys() & b.history.keys()]
    return all(d is not None and d <= math.log(MATCH) for d in near)

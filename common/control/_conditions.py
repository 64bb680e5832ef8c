"""What a job measured under conditions it has left, kept for when they come back.

A link that alternates (a neighbour's job starting and stopping, a shared uplink's busy hours)
brings the same conditions back again and again. The loop clears its measurements when the
speed in force moves ``CHANGED``-fold, since they describe another job; clearing them for
good would make it measure native and probe again every time the link comes back, and spend
each phase finding what it found in the last one. So the measurements it clears are kept here,
and when the speed of the configuration in force matches what it measured under conditions
seen before, those measurements come back and the job goes straight to the best of them.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import statistics

__all__ = ["Conditions", "Memory"]

_Knobs = tuple[int, int, bool]
MATCH = 1.5  # a speed within this factor of what a configuration ran at: the same conditions
KEEP = 4  # sets of conditions remembered (the oldest goes first)


@dataclasses.dataclass
class Conditions:
    """The loop's per-conditions state: speeds measured, what the guard left and tried."""

    history: dict[_Knobs, collections.deque[float]]
    vetoed: dict[_Knobs, int]
    probed: bool
    climbed: set[_Knobs]
    climb_s: float
    misses: int
    overrated: float
    lasted_s: float  # how long they held the last time

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
        if conditions.history:
            self._left.append(conditions)

    def recall(self, key: _Knobs, speed: float) -> Conditions | None:
        """The remembered conditions under which ``key`` ran closest to ``speed``, within
        ``MATCH`` (removed from memory: they are the job's again), or None."""
        best, distance = None, math.log(MATCH)
        for conditions in self._left:
            past = conditions.speed(key)
            if past and past > 0 and speed > 0 and abs(math.log(speed / past)) <= distance:
                best, distance = conditions, abs(math.log(speed / past))
        if best is not None:
            self._left.remove(best)
        return best

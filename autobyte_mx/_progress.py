"""Which steps still have blocks on the wire, for the waits that keep Python near the engine.

Python only queues work for MXNet's engine; a loop that never waits on a result would queue
steps without bound (and hear every tuning decision tens of steps late), and a layout switch
with the optimizer on the servers must let earlier rounds land first. Completion callbacks
count blocks down per step; ``wait`` blocks until a step and all before it are done.
"""

from __future__ import annotations

import threading

from autobyte_mx._watchdog import Watchdog

__all__ = ["Progress"]


class Progress:
    def __init__(self, watchdog: Watchdog) -> None:
        self._watchdog = watchdog
        self._unfinished: dict[int, int] = {}  # step -> blocks issued and not yet finished
        self._lock = threading.Condition(threading.Lock())

    @property
    def idle(self) -> bool:
        """Nothing issued is unfinished."""
        with self._lock:
            return not self._unfinished

    def issued(self, step: int, blocks: int) -> None:
        with self._lock:
            self._unfinished[step] = self._unfinished.get(step, 0) + blocks

    def done(self, step: int, blocks: int = 1) -> None:
        with self._lock:
            left = self._unfinished.get(step, 0) - blocks
            if left > 0:
                self._unfinished[step] = left
            else:
                self._unfinished.pop(step, None)
                self._lock.notify_all()

    def wait(self, step: int) -> None:
        """Block until every block issued in ``step`` or before has finished."""
        with self._lock:
            if not any(s <= step for s in self._unfinished):
                return
        with self._watchdog.blocking(f"step {step}'s communication"), self._lock:
            self._lock.wait_for(lambda: not any(s <= step for s in self._unfinished))

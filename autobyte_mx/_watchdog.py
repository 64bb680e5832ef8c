"""Turns a silent hang into a clear failure when a server or a peer worker stops answering.

ps-lite waits forever for a server that died or froze, and under ``dist_sync`` for a peer
worker that never pushes. The training thread is then blocked inside C, where no Python
exception can reach it, so the watchdog reports the stall and ends the process with
``EXIT_CODE`` once communication has made no progress for ``timeout_s`` while some was due.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["EXIT_CODE", "Watchdog"]

log = logging.getLogger(__name__)

EXIT_CODE = 75


class Watchdog:
    """Counts network operations in flight and blocking calls; fires after ``timeout_s``."""

    def __init__(self, timeout_s: float, *, describe: Callable[[], str],
                 on_timeout: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = timeout_s
        self._describe = describe
        self._on_timeout = on_timeout or _die
        self._clock = clock
        self._lock = threading.Lock()
        self._outstanding = 0
        self._blocking: str | None = None
        self._last = clock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autobyte-watchdog", daemon=True)
        self._thread.start()

    def started(self, n: int = 1) -> None:
        with self._lock:
            if not self._outstanding and self._blocking is None:
                self._last = self._clock()
            self._outstanding += n

    def finished(self, n: int = 1) -> None:
        with self._lock:
            self._outstanding -= n
            self._last = self._clock()

    @contextlib.contextmanager
    def blocking(self, what: str) -> Iterator[None]:
        with self._lock:
            self._blocking, self._last = what, self._clock()
        try:
            yield
        finally:
            with self._lock:
                self._blocking, self._last = None, self._clock()

    def close(self) -> None:
        self._stop.set()

    def check(self) -> str | None:
        """The stall message if the timeout has passed, else None."""
        with self._lock:
            waiting = self._outstanding > 0 or self._blocking is not None
            idle = self._clock() - self._last
            what = self._blocking or f"{self._outstanding} network operation(s)"
        if waiting and idle > self.timeout_s:
            return (f"AutoByte: no communication progress for {idle:.0f} s while waiting for "
                    f"{what} ({self._describe()}); a parameter server or a peer worker is gone "
                    f"or frozen. Stopping this worker (grace {self.timeout_s:g} s, set "
                    "AUTOBYTE_GRACE_S or AutoByte(grace_s=...) to change it).")
        return None

    def _run(self) -> None:
        period = min(1.0, max(0.05, self.timeout_s / 10))
        while not self._stop.wait(period):
            message = self.check()
            if message is not None:
                self._on_timeout(message)
                return


def _die(message: str) -> None:
    log.critical(message)
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(EXIT_CODE)

"""Turns a silent hang into a clear failure when a server or a peer worker stops answering.

ps-lite waits forever for a server that died or froze, and under ``dist_sync`` for a peer
worker that never pushes. The training thread is then blocked inside C, where no Python
exception can reach it, so the watchdog reports the stall and ends the process with
``EXIT_CODE`` once communication has made no progress for ``timeout_s`` while some was due.

The scheduler and the servers run inside ``import mxnet`` and have no training thread to
watch: ``PeerWatch`` ends them once a peer's listening address has had no TCP connection from
this process for the grace period (ps-lite connects every node to every node of another role,
and its reconnects go to that same address, so only a peer that is gone loses it; a link that
is down keeps its connections).
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import math
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from common.errors import ConfigError

__all__ = ["EXIT_CODE", "PeerWatch", "Watchdog", "established_peers", "watch_peers"]

log = logging.getLogger(__name__)

EXIT_CODE = 75


class Watchdog:
    """Counts network operations in flight and blocking calls; fires after ``timeout_s``."""

    def __init__(self, timeout_s: float, *, describe: Callable[[], str],
                 on_timeout: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s = _seconds(timeout_s)
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
        _poll(self.check, self._on_timeout, self.timeout_s, self._stop)


Address = tuple[str, int]


class PeerWatch:
    """Fires once an address that this process was connected to has been gone ``grace_s``."""

    def __init__(self, grace_s: float, *, role: str, scheduler: Address | None = None,
                 peers: Callable[[], set[Address]] | None = None,
                 on_lost: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_s, self.role, self.scheduler = grace_s, role, scheduler
        self._peers = peers or established_peers
        self._on_lost = on_lost or _die
        self._clock = clock
        self._seen: dict[Address, float] = {}

    def check(self) -> str | None:
        """The message naming the lost peer once one has been gone the grace period."""
        now = self._clock()
        for address in self._peers():
            self._seen[address] = now
        lost = [(last, a) for a, last in self._seen.items() if now - last > self.grace_s]
        if not lost:
            return None
        last, (host, port) = min(lost)
        who = "the scheduler" if (host, port) == self.scheduler else "a worker or server"
        return (f"AutoByte: this {self.role} has had no connection to {who} at {host}:{port} "
                f"for {now - last:.0f} s: that process is gone. Stopping the {self.role} "
                f"(grace {self.grace_s:g} s, set AUTOBYTE_GRACE_S to change it).")

    def run(self, stop: threading.Event | None = None) -> None:
        _poll(self.check, self._on_lost, self.grace_s, stop or threading.Event())


def watch_peers(role: str, grace_s: float, scheduler: Address | None) -> None:
    """Start a ``PeerWatch`` for this scheduler or server process on a daemon thread."""
    watch = PeerWatch(grace_s, role=role, scheduler=scheduler)
    threading.Thread(target=watch.run, name="autobyte-peers", daemon=True).start()


def established_peers(proc: str = "/proc/self") -> set[Address]:
    """The listening addresses this process has an established outgoing TCP connection to
    (from the kernel's socket tables: ps-lite gives no view of its peers)."""
    inodes = set()
    for fd in os.listdir(f"{proc}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"{proc}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    rows = []
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"{proc}/net/{table}", encoding="ascii") as f:
            rows += [line.split() for line in f.readlines()[1:]]
    mine = [r for r in rows if len(r) > 9 and r[9] in inodes]
    listening = {_address(r[1])[1] for r in mine if r[3] == "0A"}
    return {_address(r[2]) for r in mine
            if r[3] == "01" and _address(r[1])[1] not in listening}  # outgoing, established


def _address(text: str) -> Address:
    """``0100007F:1F90`` (or the IPv6 form) of /proc/net/tcp as ('127.0.0.1', 8080)."""
    host, port = text.split(":")
    raw = bytes.fromhex(host)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))  # each 32-bit word LE
    if len(words) == 16 and words[:12] == b"\0" * 10 + b"\xff" * 2:
        words = words[12:]  # IPv4-mapped
    return str(ipaddress.ip_address(words)), int(port, 16)


def _poll(check: Callable[[], str | None], fire: Callable[[str], None], timeout_s: float,
          stop: threading.Event) -> None:
    """``check`` about ten times per ``timeout_s`` (at most once a second) until it returns a
    message, which goes to ``fire``, or ``stop`` is set."""
    period = min(1.0, max(0.05, timeout_s / 10))
    while not stop.wait(period):
        message = check()
        if message is not None:
            fire(message)
            return


def _die(message: str) -> None:
    log.critical(message)
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(EXIT_CODE)


def _seconds(timeout: Any) -> float:
    try:
        value = float(timeout)
    except (TypeError, ValueError):
        value = math.nan
    if not value > 0:
        raise ConfigError(f"timeout must be a number of seconds > 0, got timeout={timeout!r}")
    return value

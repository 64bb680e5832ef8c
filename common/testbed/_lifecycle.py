"""Tear testbeds down however the process ends: normal exit, exception, Ctrl-C or SIGTERM.

Context managers cover exceptions and Ctrl-C (KeyboardInterrupt). SIGTERM would kill Python
without running ``finally`` blocks, so while a testbed is open (and nobody else installed a
handler) SIGTERM and SIGHUP raise SystemExit instead; ``atexit`` closes what is still open.
SIGKILL cannot be caught: the next testbed sweeps those leftovers (see ``_registry.sweep``).
"""

from __future__ import annotations

import atexit
import logging
import signal
import threading
from types import FrameType
from typing import Protocol

__all__ = ["register", "unregister"]

log = logging.getLogger(__name__)

_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class _Closable(Protocol):
    persistent: bool

    def close(self) -> None: ...


_live: list[_Closable] = []
_lock = threading.Lock()
_installed: dict[int, object] = {}


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _install() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in _SIGNALS:
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _raise_exit)
            _installed[sig] = signal.SIG_DFL


def _restore() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, previous in list(_installed.items()):
        if signal.getsignal(sig) is _raise_exit:
            signal.signal(sig, previous)  # type: ignore[arg-type]
        del _installed[sig]


def register(testbed: _Closable) -> None:
    if testbed.persistent:
        return
    with _lock:
        _live.append(testbed)
    _install()


def unregister(testbed: _Closable) -> None:
    with _lock:
        if testbed in _live:
            _live.remove(testbed)
        empty = not _live
    if empty:
        _restore()


@atexit.register
def _close_all() -> None:
    for testbed in list(reversed(_live)):
        try:
            testbed.close()
        except Exception as exc:
            log.error("testbed cleanup at exit failed: %s", exc)

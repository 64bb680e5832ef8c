"""A worker's connection to the coordinator: one DEALER socket owned by one daemon thread.

The training thread never touches the socket: it appends to ``outbox`` (a deque; appends are
atomic), which the thread sends at its next tick, every ``TICK_S``; decisions come back through
``on_decision``. The training thread does not wake it: a wake hands the GIL to this thread in
the middle of a step (MXNet's cnn at 3gbit, observing: 0.983x native with a wake a window,
1.001x without, median of 3 rounds); the tick bounds how late a window arrives instead.
``stop`` wakes it (a byte into a pipe it polls with the socket). Each tick it sends what is
queued without blocking (a full queue while the coordinator is away drops the message:
statistics are only useful fresh), verifies what arrives, and watches heartbeats: when the
coordinator has been silent for ``dead_after_s`` it says once that training goes on with the
last configuration, and once more if it comes back.
Every ``heartbeat_s`` it tells the coordinator this worker is alive and at which step (the
thread runs while training is blocked in a collective), and it keeps what the coordinator's
heartbeats say of workers it stopped hearing (``silent``).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from common.control._decision import Decision
from common.control._wire import MAX_MESSAGE_BYTES, Message, Signer, Verifier
from common.errors import ControlError

__all__ = ["Link"]

log = logging.getLogger(__name__)

TICK_S = 0.05  # a window's report waits at most this long: a few steps, less than a window


class Link(threading.Thread):
    def __init__(self, *, ctx: zmq.Context[Any], endpoint: str, signer: Signer,
                 verifier: Verifier, hello: dict[str, Any], heartbeat_s: float,
                 dead_after_s: float, on_decision: Callable[[Decision], None],
                 describe_config: Callable[[], str],
                 progress: Callable[[], int] = lambda: -1) -> None:
        super().__init__(name=f"autobyte-link-{signer.sender}", daemon=True)
        self.endpoint = endpoint
        self.outbox: collections.deque[tuple[str, dict[str, Any]]] = collections.deque()
        self.stop_event = threading.Event()
        self.alive = False
        self.received = 0
        self._ctx = ctx
        self._signer = signer
        self._verifier = verifier
        self._hello = hello
        self._heartbeat_s = heartbeat_s
        self._dead_after_s = dead_after_s
        self._on_decision = on_decision
        self._describe = describe_config
        self._progress = progress
        self.silent: dict[str, Any] = {}  # the coordinator's word on workers it stopped hearing
        self.last_heard = time.monotonic()
        self._said_lost = False
        self._forged = False  # a message failed the signature check (another secret)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._fd_lock = threading.Lock()

    def wake(self) -> None:
        """Have the thread look at ``outbox`` now (any thread; never blocks)."""
        with self._fd_lock:
            if self._wake_w < 0:
                return
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"\0")

    def stop(self) -> None:
        self.stop_event.set()
        self.wake()

    def run(self) -> None:
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, 100)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES + 4096)
        try:
            sock.connect(self.endpoint)
            self._loop(sock)
        except Exception as exc:  # never silently: the job goes on with its configuration
            log.error("control link to %s failed (%r); training continues with %s",
                      self.endpoint, exc, self._describe())
        finally:
            sock.close(linger=100 if self.alive else 0)
            with self._fd_lock:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = -1

    def _loop(self, sock: zmq.Socket[Any]) -> None:
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        started = self.last_heard = time.monotonic()
        next_hello = next_alive = started
        heard = False
        while not self.stop_event.is_set():
            events = dict(poller.poll(timeout=round(TICK_S * 1e3)))
            if self._wake_r in events:
                self._drain_wake()
            if sock in events:
                for _ in range(1000):
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if self._receive(frames):
                        heard, self.last_heard = True, time.monotonic()
            now = time.monotonic()
            if (not heard or self._said_lost) and now >= next_hello:
                self._send(sock, "hello", self._hello)
                next_hello = now + self._heartbeat_s
            elif heard and now >= next_alive:
                self._send(sock, "alive", {"rank": self._hello.get("rank"),
                                           "step": self._progress()})
                next_alive = now + self._heartbeat_s
            while self.outbox:
                self._send(sock, *self.outbox.popleft())
            self._watch(now - self.last_heard, heard)
        self._send(sock, "bye", {"rank": self._hello.get("rank")})

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass

    def _receive(self, frames: list[bytes]) -> bool:
        try:
            message = self._verifier.verify(frames)
            self._handle(message)
        except ControlError as exc:
            self._verifier.drop(exc, self._signer.sender)
            self._forged |= str(exc).startswith("forged")
            return False
        self.received += 1
        return True

    def _handle(self, message: Message) -> None:
        data = message.body.get("decision" if message.type == "decision" else "latest")
        if message.type == "heartbeat":
            silent = message.body.get("silent", {})
            self.silent = silent if isinstance(silent, dict) else {}
            if data is None:
                return
        if not isinstance(data, dict):
            raise ControlError(f"malformed: {message.type} without a decision object")
        self._on_decision(Decision.from_dict(data))

    def _watch(self, silent_s: float, heard: bool) -> None:
        if silent_s < self._dead_after_s:
            if self._said_lost:
                log.warning("coordinator at %s is back", self.endpoint)
                self._said_lost = False
            self.alive = heard
            return
        self.alive = False
        if not self._said_lost:
            self._said_lost = True
            if self._forged and not heard:
                log.warning("coordinator at %s answers, but its messages fail the signature "
                            "check: this process's AUTOBYTE_SECRET differs from the "
                            "coordinator's; training continues with the last configuration "
                            "(%s)", self.endpoint, self._describe())
                return
            what = "silent for" if heard else "not reachable after"
            log.warning("coordinator at %s %s %.0f s: training continues with the last "
                        "configuration (%s)", self.endpoint, what, silent_s, self._describe())

    def _send(self, sock: zmq.Socket[Any], type_: str, body: dict[str, Any]) -> None:
        try:
            frames = self._signer.sign(type_, body)
        except (TypeError, ValueError) as exc:  # e.g. a NaN the adapter passed in
            log.warning("cannot encode a %s message (%s); dropped", type_, exc)
            return
        try:
            sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            log.debug("control queue full; dropped a %s message", type_)

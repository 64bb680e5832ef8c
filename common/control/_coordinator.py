"""The coordinator: one ROUTER socket that hears every worker's windows and answers decisions.

It runs in a child process of rank 0 (``TuningAgent`` starts it, ``_hosted``), on a daemon
thread of the caller (``start``), or standalone (``autobyte coordinator``, which calls
``run``). It binds in the caller's thread, so an address already in use is reported at once,
then hands its socket to its own thread; nothing else touches the socket. Every ``heartbeat_s``
it sends each known worker a heartbeat with the latest decision, so a worker that missed a
decision, or joined late, still hears it, and workers can tell the coordinator is gone. Windows
are merged once every worker has sent the same one; an older window still incomplete by then is
dropped (a worker was slow or lost it).
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import threading
import time
from typing import Any

import zmq

from common.config import Config
from common.control._loop import TunerLike, TuningLoop
from common.control._wire import MAX_MESSAGE_BYTES, Message, Signer, Verifier, worker_name
from common.decision_log import DecisionLog
from common.errors import ConfigError, ControlError
from common.stats import Observation, Window, merge_windows
from common.trigger import Trigger
from common.trigger import create as create_trigger

__all__ = ["Coordinator"]

log = logging.getLogger(__name__)
MUTE_AFTER = 20  # forged messages from one sender before it is muted
MUTE_S = 60.0

STOP_TIMEOUT_S = 30.0  # how long close() waits for the serving thread

_MAX_OPEN_WINDOWS = 64  # windows waiting for a slow or lost worker, oldest dropped first
MAX_LEAD_STEPS = 10_000  # the most a worker may ask decisions to lead by (a bad hello is ignored)


class Coordinator:
    def __init__(self, *, bind: str, num_workers: int, config: Config, secret: bytes,
                 tuner: TunerLike | None = None, trigger: Trigger | None = None,
                 decision_log: DecisionLog | None = None, lead_steps: int | None = None,
                 lead_s: float = 0.3, heartbeat_s: float = 1.0, max_age_s: float = 60.0,
                 exit_when_done: bool = False, tuner_name: str = "", guard: bool = True) -> None:
        if num_workers < 1:
            raise ConfigError(f"num_workers must be >= 1, got num_workers={num_workers}")
        if not heartbeat_s > 0:
            raise ConfigError(f"heartbeat_s must be > 0, got heartbeat_s={heartbeat_s!r}")
        self.num_workers = num_workers
        self.heartbeat_s = heartbeat_s
        self.exit_when_done = exit_when_done
        self._signer = Signer(secret=secret, sender="coordinator")
        self.verifier = Verifier(secret=secret, max_age_s=max_age_s,
                                 accept=("hello", "report", "alive", "bye"))
        self.log = decision_log or DecisionLog(None)
        trig = trigger or create_trigger("threshold", config=config)
        self.loop = TuningLoop(config=config, tuner=tuner, trigger=trig, decision_log=self.log,
                               lead_steps=lead_steps, lead_s=lead_s,
                               session=self._signer.session, guard=guard)
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES + 4096)
        self._sock.setsockopt(zmq.SNDHWM, 1000)
        try:
            self._sock.bind(bind)
        except zmq.ZMQError as exc:
            self._sock.close(0)
            self._ctx.term()
            raise ControlError(f"coordinator cannot bind {bind!r}: {exc}") from None
        self.endpoint: str = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self._peers: dict[bytes, str] = {}
        self._answered: dict[bytes, float] = {}  # senders of forged messages, when answered
        self._strikes: dict[bytes, int] = {}  # forged messages per sender
        self._muted: dict[bytes, float] = {}  # sender -> until when it is not heard
        self._byes: set[str] = set()
        self.grace_s = config.grace_s
        self._heard: dict[str, tuple[float, int]] = {}  # worker -> (when, its step) last heard
        self._quickest: dict[str, float] = {}  # worker -> its quickest delay (``_lag``)
        self.lost: dict[str, dict[str, Any]] = {}  # workers silent beyond the grace period
        self._silent: dict[str, dict[str, Any]] = {}  # workers silent for 3 heartbeats or more
        self._windows: dict[int, dict[int, Window]] = {}
        self._ready: list[Observation] = []
        self._stopping = False  # set while the last queued messages are handled
        self._failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._owns_process = False  # run() serves: the process is the coordinator's own
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self.tuner_name = _tuner_name(tuner, tuner_name)  # the one in force, after fallbacks
        self.log.write("job", {"num_workers": num_workers, "config": config,
                               "tuner": self.tuner_name,
                               "trigger": type(trig).__name__, "endpoint": self.endpoint,
                               "session": self._signer.session})
        self._listening = time.monotonic()  # a worker never heard is silent since then
        log.info("coordinator listening on %s for %d worker(s)", self.endpoint, num_workers)

    def start(self) -> Coordinator:
        """Serve on a daemon thread (it never keeps the process alive)."""
        with self._lock:
            if self._closed or self._thread is not None:
                return self
            self._thread = threading.Thread(target=self._serve, name="autobyte-coordinator",
                                            daemon=True)
            self._thread.start()
        atexit.register(self.close)
        return self

    def run(self) -> None:
        """Serve in this thread until ``close`` (another thread), Ctrl-C or, with
        ``exit_when_done``, every worker said bye."""
        with self._lock:
            if self._closed or self._thread is not None:
                return
            self._thread = threading.current_thread()
            self._owns_process = True
        try:
            self._serve()
        finally:
            self.close()

    def request_stop(self) -> None:
        """Ask ``run``/the thread to stop soon (safe in a signal handler); ``close`` after."""
        self._stop.set()

    @property
    def done(self) -> bool:
        return len(self._byes) >= self.num_workers

    def close(self) -> None:
        """Stop serving and release the socket; idempotent, safe from any thread."""
        if os.getpid() != self._pid:
            return  # a forked child: the parent owns the socket and the log
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        atexit.unregister(self.close)
        self._stop.set()
        if thread is None:
            self._sock.close(0)
        elif thread is not threading.current_thread():
            # It may be inside a TensorFlow call (the meta tuner compiling its scorer takes a
            # few seconds): a process that exits while TF runs in a thread aborts.
            thread.join(timeout=STOP_TIMEOUT_S)
            if thread.is_alive():
                log.warning("coordinator thread did not stop in %g s; leaving it",
                            STOP_TIMEOUT_S)
        closer = getattr(self.loop.tuner, "close", None)
        if callable(closer):  # e.g. a model still training in a thread of this process
            try:
                closer()
            except Exception as exc:
                log.warning("closing the tuner failed: %s", exc)
        if thread is not None and thread is not threading.current_thread() \
                and thread.is_alive():
            return  # the thread still owns the socket and the log
        stopped: dict[str, Any] = {"event": "coordinator_stopped",
                                   "rejected": dict(self.verifier.rejected)}
        if thread is not None and self._owns_process:  # a thread's CPU is not the process's
            stopped["cpu_s"] = round(time.process_time(), 3)
        self.log.write("event", stopped)
        self.log.close()
        self._ctx.term()

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        next_beat = time.monotonic()
        try:
            while not self._stop.is_set():
                if poller.poll(timeout=100):
                    self._drain()
                if time.monotonic() >= next_beat:
                    self._check_peers(time.monotonic())
                    self._broadcast("heartbeat", self._heartbeat())
                    next_beat = time.monotonic() + self.heartbeat_s
                if self.exit_when_done and self.done:
                    log.info("every worker said bye: coordinator exits")
                    break
                if self.exit_when_done and self.lost:
                    log.error("the job lost %s: coordinator exits", ", ".join(self.lost))
                    break
            self._record_queued()
        finally:
            self._sock.close(0)

    def _record_queued(self) -> None:
        """Stopping: log what is still queued, e.g. the windows of a short job that ended
        while the tuner was busy, as measured but not decided on (no worker would apply a
        decision now)."""
        self._stopping = True
        try:
            self._drain()
        except Exception as exc:  # stopping must not fail on a bad message
            log.warning("coordinator: handling the last messages failed: %s", exc)

    def _drain(self) -> None:
        """Handle what has arrived, then decide on the newest complete window only: older
        ones that queued while the loop was busy are measured, not decided on."""
        try:
            self._receive()
        finally:
            self._decide_ready()

    def _decide_ready(self) -> None:
        ready, self._ready = self._ready, []
        for i, observation in enumerate(ready):
            self._observe(observation, latest=i == len(ready) - 1)

    def _receive(self) -> None:
        for _ in range(1000):
            try:
                frames = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            identity, rest = frames[0], frames[1:]
            if self._muted.get(identity, 0.0) > time.monotonic():
                self.verifier.rejected["forged"] += 1  # a flood: not even hashed
                continue
            try:
                message = self.verifier.verify(rest)
                self._handle(identity, message)
            except ControlError as exc:
                self.verifier.drop(exc, "coordinator")
                if str(exc).startswith("forged"):
                    self._answer_forged(identity)
            except Exception:  # a bug or a full disk must not end the coordinator
                self._failures += 1
                if self._failures <= 3:
                    log.exception("coordinator: handling a message failed; going on")

    def _answer_forged(self, identity: bytes) -> None:
        """A heartbeat, signed, back to a sender whose signature failed (at most one per sender
        every 5 s): a worker with another secret then sees that the coordinator answers and
        that its signatures fail, not that it is unreachable. A sender with ``MUTE_AFTER``
        forged messages is not heard for ``MUTE_S`` seconds: a flood costs no hashing."""
        now = time.monotonic()
        strikes = self._strikes[identity] = self._strikes.get(identity, 0) + 1
        if strikes >= MUTE_AFTER:
            self._muted[identity] = now + MUTE_S
            self._strikes.pop(identity)
            if len(self._muted) > 4096:
                self._muted = {k: t for k, t in self._muted.items() if t > now}
        if now - self._answered.get(identity, -math.inf) < 5.0:
            return
        if len(self._answered) > 1024:
            self._answered.clear()
        self._answered[identity] = now
        self._send(identity, "heartbeat", {"latest": None})

    def _check_peers(self, now: float) -> None:
        """Say once when a worker has been silent beyond the grace period (dead, frozen or cut
        off: its link thread sends every heartbeat, also while training blocks), and when it
        is heard again. Heartbeats tell every worker who has been silent for three of them.
        A worker never heard counts as silent since the coordinator started listening (step
        None): one that froze before its first message reached a coordinator still starting
        has its hello queued in its own frozen process."""
        self._silent = {}
        never: dict[str, tuple[float, int | None]] = {
            worker_name(rank): (self._listening, None) for rank in range(self.num_workers)}
        for sender, (when, step) in {**never, **self._heard}.items():
            silent = now - when
            if sender in self._byes:
                continue
            if silent > 3 * self.heartbeat_s:
                self._silent[sender] = {"step": step, "silent_s": round(silent, 1)}
            if silent > self.grace_s and sender not in self.lost:
                self.lost[sender] = {"step": step, "silent_s": round(silent, 1)}
                log.error("%s has not been heard for %.0f s (%s): dead, frozen or cut off",
                          sender, silent, "never" if step is None else f"last at step {step}")
                self.log.write("event", {"event": "worker_lost", "sender": sender,
                                         "step": step, "silent_s": silent})
            elif sender in self.lost and silent <= self.grace_s:
                del self.lost[sender]
                log.warning("%s is heard again (step %d)", sender, step)
                self.log.write("event", {"event": "worker_back", "sender": sender, "step": step})

    def _lag(self, sender: str, delay: float) -> float:
        """How much later than its quickest message this one of ``sender`` is handled. The
        coordinator runs on what training leaves idle and may handle a backlog seconds late;
        a frozen worker's last messages must not count as heard then. The quickest delay seen
        (which holds the hosts' clock offset) drifts toward later ones, so a clock step is
        absorbed within a minute of heartbeats."""
        quickest = self._quickest.get(sender, delay)
        quickest = min(delay, quickest + 0.05 * (delay - quickest))
        self._quickest[sender] = quickest
        return delay - quickest

    def _handle(self, identity: bytes, message: Message) -> None:
        self._peers[identity] = message.sender
        step = message.body.get("step", -1) if message.type == "alive" else \
            self._heard.get(message.sender, (0.0, -1))[1]
        heard = time.monotonic() - self._lag(message.sender, time.time() - message.ts)
        self._heard[message.sender] = (heard, step if isinstance(step, int) else -1)
        if message.type == "alive":
            return
        if message.type != "report":
            self._decide_ready()  # what came before this message is answered first
        if message.type == "hello":
            claimed = message.body.get("num_workers")
            if claimed != self.num_workers:
                log.error("%s says the job has %r workers, this coordinator expects %d: its "
                          "windows will be dropped", message.sender, claimed, self.num_workers)
            lead = message.body.get("lead_steps", 0)
            if isinstance(lead, int) and not isinstance(lead, bool) and \
                    self.loop.lead_steps < lead <= MAX_LEAD_STEPS:
                self.loop.lead_steps = lead  # what the worker's adapter needs
            self._send(identity, "heartbeat", self._heartbeat())
        elif message.type == "bye":
            self._byes.add(message.sender)
            self.log.write("event", {"event": "bye", "sender": message.sender})
        elif message.type == "report":
            window = Window.from_dict(message.body.get("window", {}))
            if window.num_workers != self.num_workers:
                raise ControlError(f"malformed: window for {window.num_workers} workers, "
                                   f"this job has {self.num_workers}")
            if message.sender != worker_name(window.rank):
                raise ControlError(f"malformed: {message.sender} sent rank {window.rank}'s "
                                   "window")
            self._add(window)

    def _add(self, window: Window) -> None:
        bucket = self._windows.setdefault(window.window, {})
        bucket[window.rank] = window
        while len(self._windows) > _MAX_OPEN_WINDOWS:
            self._windows.pop(min(self._windows))
        if len(bucket) < self.num_workers:
            return
        del self._windows[window.window]
        for old in [w for w in self._windows if w < window.window]:
            got = self._windows.pop(old)
            self.log.write("window", {"window": old, "action": "skip", "workers": len(got),
                                      "reason": f"incomplete: {len(got)} of "
                                      f"{self.num_workers} workers reported"})
        try:
            observation = merge_windows(list(bucket.values()))
        except ControlError as exc:
            log.error("cannot merge window %d: %s", window.window, exc)
            self.log.write("event", {"event": "merge_error", "window": window.window,
                                     "error": str(exc)})
            return
        self._ready.append(observation)

    def _observe(self, observation: Observation, *, latest: bool) -> None:
        why = None
        if self._stopping:  # no worker would apply a decision now
            latest, why = False, "the coordinator is stopping: measured, not decided on"
        try:
            decision = self.loop.on_observation(observation, latest=latest, why=why)
        except Exception:  # a bug must not end the coordinator
            self._failures += 1
            if self._failures <= 3:
                log.exception("coordinator: deciding on window %d failed; going on",
                              observation.window)
            return
        if decision is not None:
            log.info("decision %d: %s from step %d (%s)", decision.id,
                     decision.config.describe(), decision.step, decision.reason)
            self._broadcast("decision", {"decision": decision.to_dict()})

    def _heartbeat(self) -> dict[str, Any]:
        latest = self.loop.latest
        return {"latest": None if latest is None else latest.to_dict(), "silent": self._silent}

    def _broadcast(self, type_: str, body: dict[str, Any]) -> None:
        for identity in list(self._peers):
            self._send(identity, type_, body)

    def _send(self, identity: bytes, type_: str, body: dict[str, Any]) -> None:
        try:
            self._sock.send_multipart([identity, *self._signer.sign(type_, body)], zmq.NOBLOCK)
        except (zmq.ZMQError, TypeError, ValueError) as exc:
            log.debug("send to %s failed: %s", self._peers.get(identity), exc)


def _tuner_name(tuner: TunerLike | None, requested: str) -> str:
    """The tuner actually built (``meta`` may have fallen back to ``bayesian``)."""
    if tuner is None:
        return "observe" if requested == "observe" else "none"
    return str(getattr(tuner, "name", "") or requested or type(tuner).__name__)

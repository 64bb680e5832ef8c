"""Messages on the control plane: JSON, versioned, authenticated, never pickled.

A message is two ZeroMQ frames: the UTF-8 JSON payload and the hex HMAC-SHA256 of exactly
those bytes under the job's shared secret. The MAC is checked before the JSON is parsed, so
a forged message costs one hash and is never interpreted. The payload carries the schema
version, the message type, the sender, a per-process session id, a sequence number and a
timestamp: a message whose (sender, session) already sent this sequence number or a later one
is a replay, and one whose timestamp is further than ``max_age_s`` from now is stale. Both are
dropped, as are malformed ones; the caller logs them and keeps going.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import itertools
import json
import logging
import math
import os
import secrets
import time
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.config import SECRET_ENV, environment
from common.errors import ControlError

__all__ = [
    "MESSAGE_TYPES",
    "SECRET_ENV",
    "WIRE_VERSION",
    "Message",
    "Signer",
    "Verifier",
    "ensure_secret",
    "secret_from_env",
    "worker_name",
]

log = logging.getLogger(__name__)

WIRE_VERSION = 1
MESSAGE_TYPES = ("hello", "report", "alive", "bye", "decision", "heartbeat")
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
SUMMARY_S = 10.0  # rejected messages beyond the first few are summed up at most this often
_REASONS = ("forged", "replayed", "stale", "malformed")


def worker_name(rank: int) -> str:
    """The sender name a worker signs with, which the coordinator checks windows against."""
    return f"worker{rank}"


def ensure_secret(environ: MutableMapping[str, str] | None = None) -> str:
    """The job's secret from ``AUTOBYTE_SECRET``; a fresh random one is put there when unset.

    Launchers call this once before starting a job's processes so they all inherit it.
    """
    env = os.environ if environ is None else environ
    if not env.get(SECRET_ENV):
        env[SECRET_ENV] = secrets.token_hex(32)
    return env[SECRET_ENV]


def secret_from_env(environ: Mapping[str, str] | None = None) -> bytes | None:
    value = environment(SECRET_ENV, environ)
    return value.encode() if value else None


@dataclass(frozen=True)
class Message:
    type: str
    sender: str
    session: str
    seq: int
    ts: float
    body: dict[str, Any]


class Signer:
    """Builds this process's outgoing messages: one session id, increasing sequence numbers."""

    def __init__(self, *, secret: bytes, sender: str, clock: Callable[[], float] = time.time
                 ) -> None:
        if not secret:
            raise ControlError(f"the control-plane secret must not be empty; set {SECRET_ENV}")
        self._secret = secret
        self.sender = sender
        self.session = secrets.token_hex(8)
        self._seq = itertools.count(1)
        self._clock = clock

    def sign(self, type_: str, body: Mapping[str, Any]) -> list[bytes]:
        if type_ not in MESSAGE_TYPES:
            raise ControlError(f"message type must be one of {list(MESSAGE_TYPES)}, got {type_!r}")
        payload = json.dumps({
            "v": WIRE_VERSION, "type": type_, "sender": self.sender, "session": self.session,
            "seq": next(self._seq), "ts": self._clock(), "body": dict(body),
        }, separators=(",", ":"), allow_nan=False).encode()
        return [payload, mac(self._secret, payload)]


def mac(secret: bytes, payload: bytes) -> bytes:
    return hmac.new(secret, payload, hashlib.sha256).hexdigest().encode()


class Verifier:
    """Checks incoming messages; ``verify`` returns a Message or raises ControlError(reason).

    ``rejected`` counts drops by reason (forged, replayed, stale, malformed); ``drop`` logs
    one, the first few of each reason and then every 100th, so an attack cannot flood logs.
    """

    def __init__(self, *, secret: bytes, max_age_s: float = 60.0, accept: Sequence[str] = (),
                 clock: Callable[[], float] = time.time, max_sessions: int = 4096) -> None:
        if not secret:
            raise ControlError(f"the control-plane secret must not be empty; set {SECRET_ENV}")
        if not max_age_s > 0:
            raise ControlError(f"max_age_s must be > 0, got max_age_s={max_age_s!r}")
        self._secret = secret
        self.max_age_s = max_age_s
        self._accept = tuple(accept) or MESSAGE_TYPES
        self._clock = clock
        self._last_seq: collections.OrderedDict[tuple[str, str], int] = collections.OrderedDict()
        self._max_sessions = max_sessions
        self.rejected: collections.Counter[str] = collections.Counter()
        self._unsaid: collections.Counter[str] = collections.Counter()  # dropped, not logged
        self._said_at = time.monotonic()

    def verify(self, frames: Sequence[bytes]) -> Message:
        if len(frames) != 2:
            raise ControlError(f"malformed: expected 2 frames (payload, mac), got {len(frames)}")
        payload, tag = frames
        if len(payload) > MAX_MESSAGE_BYTES:
            raise ControlError(f"malformed: payload of {len(payload)} bytes is too large")
        if not hmac.compare_digest(mac(self._secret, payload), bytes(tag)):
            raise ControlError("forged: HMAC-SHA256 does not match (wrong or missing secret)")
        message = _parse(payload, self._accept)
        age = self._clock() - message.ts
        if age > self.max_age_s:
            raise ControlError(f"stale: sent {age:.1f} s ago (max_age_s={self.max_age_s:g})")
        if -age > self.max_age_s:
            raise ControlError(f"stale: sent {-age:.1f} s in the future by this host's clock "
                               f"(clocks differ? max_age_s={self.max_age_s:g})")
        key = (message.sender, message.session)
        last = self._last_seq.get(key)
        if last is not None and message.seq <= last:
            raise ControlError(f"replayed: seq {message.seq} from {message.sender} "
                               f"(session {message.session}) after seq {last}")
        self._last_seq[key] = message.seq
        self._last_seq.move_to_end(key)
        while len(self._last_seq) > self._max_sessions:
            self._last_seq.popitem(last=False)
        return message

    def drop(self, error: ControlError, where: str) -> None:
        """Count a rejected message; the first few of each reason are logged with their cause,
        the rest as one summary line at most every ``SUMMARY_S`` seconds (a flood of forged
        messages must not flood the log)."""
        reason = str(error).split(":", 1)[0]
        if reason not in _REASONS:
            reason = "malformed"
        self.rejected[reason] += 1
        count = self.rejected[reason]
        if count <= 5:
            log.warning("%s: dropped a message (%s: %s; %d so far), not applied", where, reason,
                        str(error).removeprefix(reason + ": "), count)
            return
        self._unsaid[reason] += 1
        now = time.monotonic()
        if now - self._said_at >= SUMMARY_S:
            log.warning("%s: dropped %s more message(s) in the last %.0f s (%s so far)", where,
                        ", ".join(f"{n} {r}" for r, n in sorted(self._unsaid.items())),
                        now - self._said_at,
                        dict(sorted(self.rejected.items())))
            self._unsaid.clear()
            self._said_at = now


def _parse(payload: bytes, accept: Sequence[str]) -> Message:
    try:
        data = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ControlError(f"malformed: not UTF-8 JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ControlError(f"malformed: payload must be a JSON object, got {type(data).__name__}")
    if data.get("v") != WIRE_VERSION:
        raise ControlError(f"malformed: unsupported wire version {data.get('v')!r}, "
                           f"expected {WIRE_VERSION}")
    type_, sender, session = data.get("type"), data.get("sender"), data.get("session")
    seq, ts, body = data.get("seq"), data.get("ts"), data.get("body")
    if type_ not in accept:
        raise ControlError(f"malformed: message type {type_!r} not accepted here "
                           f"(accepted: {list(accept)})")
    if not isinstance(sender, str) or not isinstance(session, str) or not sender or not session:
        raise ControlError("malformed: sender and session must be non-empty strings")
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise ControlError(f"malformed: seq must be a positive integer, got {seq!r}")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
        raise ControlError(f"malformed: ts must be a number, got {ts!r}")
    if not isinstance(body, dict):
        raise ControlError("malformed: body must be a JSON object")
    return Message(str(type_), sender, session, seq, float(ts), body)

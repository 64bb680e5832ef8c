"""Message signing and verification: forged, replayed, stale and malformed are rejected."""

from __future__ import annotations

import json
import logging

import pytest

from common.control import Signer, Verifier, ensure_secret, secret_from_env
from common.control._wire import mac
from common.errors import ControlError

KEY = b"k" * 32


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_round_trip_and_sequence() -> None:
    signer = Signer(secret=KEY, sender="worker1")
    verifier = Verifier(secret=KEY)
    first = verifier.verify(signer.sign("report", {"x": 1}))
    second = verifier.verify(signer.sign("report", {"x": 2}))
    assert (first.type, first.sender, first.body, first.seq) == ("report", "worker1", {"x": 1}, 1)
    assert second.seq == 2 and second.session == first.session


def test_forged_message_is_rejected_before_parsing() -> None:
    frames = Signer(secret=b"other-secret", sender="worker0").sign("report", {})
    with pytest.raises(ControlError, match=r"^forged"):
        Verifier(secret=KEY).verify(frames)
    payload, tag = Signer(secret=KEY, sender="worker0").sign("report", {"samples": 1})
    tampered = payload.replace(b'"samples":1', b'"samples":9')
    with pytest.raises(ControlError, match=r"^forged"):
        Verifier(secret=KEY).verify([tampered, tag])


def test_replayed_message_is_rejected() -> None:
    signer, verifier = Signer(secret=KEY, sender="worker0"), Verifier(secret=KEY)
    old = signer.sign("report", {})
    new = signer.sign("report", {})
    verifier.verify(new)
    with pytest.raises(ControlError, match=r"^replayed"):
        verifier.verify(new)
    with pytest.raises(ControlError, match=r"^replayed"):
        verifier.verify(old)


def test_stale_and_future_messages_are_rejected() -> None:
    clock = Clock()
    signer = Signer(secret=KEY, sender="worker0", clock=clock)
    verifier = Verifier(secret=KEY, max_age_s=30, clock=clock)
    old = signer.sign("report", {})
    clock.now += 90.2
    with pytest.raises(ControlError, match=r"^stale: sent 90.2 s ago \(max_age_s=30\)"):
        verifier.verify(old)
    future = Signer(secret=KEY, sender="worker0", clock=lambda: clock.now + 60).sign("bye", {})
    with pytest.raises(ControlError, match=r"^stale: sent 60.0 s in the future .*clocks differ"):
        verifier.verify(future)


def _signed(payload: bytes) -> list[bytes]:
    return [payload, mac(KEY, payload)]


@pytest.mark.parametrize("frames", [
    [b"only one frame"],
    _signed(b"\xff\xfe not utf8"),
    _signed(b"{not json"),
    _signed(b"[1, 2]"),
    _signed(json.dumps({"v": 2, "type": "report", "sender": "w", "session": "s", "seq": 1,
                        "ts": 1000.0, "body": {}}).encode()),
    _signed(json.dumps({"v": 1, "type": "shutdown", "sender": "w", "session": "s", "seq": 1,
                        "ts": 1000.0, "body": {}}).encode()),
    _signed(json.dumps({"v": 1, "type": "report", "sender": "", "session": "s", "seq": 1,
                        "ts": 1000.0, "body": {}}).encode()),
    _signed(json.dumps({"v": 1, "type": "report", "sender": "w", "session": "s", "seq": "1",
                        "ts": 1000.0, "body": {}}).encode()),
    _signed(json.dumps({"v": 1, "type": "report", "sender": "w", "session": "s", "seq": 1,
                        "ts": None, "body": {}}).encode()),
    _signed(json.dumps({"v": 1, "type": "report", "sender": "w", "session": "s", "seq": 1,
                        "ts": 1000.0, "body": []}).encode()),
])
def test_malformed_messages_are_rejected(frames: list[bytes]) -> None:
    with pytest.raises(ControlError, match=r"^malformed"):
        Verifier(secret=KEY, clock=Clock()).verify(frames)


def test_accept_restricts_message_types() -> None:
    frames = Signer(secret=KEY, sender="coordinator").sign("decision", {})
    with pytest.raises(ControlError, match="not accepted"):
        Verifier(secret=KEY, accept=("report",)).verify(frames)


def test_drop_counts_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    verifier = Verifier(secret=KEY)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            try:
                verifier.verify(Signer(secret=b"x", sender="w").sign("bye", {}))
            except ControlError as exc:
                verifier.drop(exc, "test")
    assert verifier.rejected == {"forged": 3}
    assert "forged" in caplog.text and "not applied" in caplog.text


def test_secret_helpers() -> None:
    env: dict[str, str] = {}
    assert secret_from_env(env) is None
    value = ensure_secret(env)
    assert len(value) == 64 and env["AUTOBYTE_SECRET"] == value
    assert ensure_secret(env) == value
    assert secret_from_env(env) == value.encode()
    with pytest.raises(ControlError, match="must not be empty"):
        Signer(secret=b"", sender="w")

"""Liveness: the coordinator notices a worker that stopped talking (dead, frozen, cut off),
says so once after the grace period, tells every worker, and notices it coming back."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import zmq

from common.config import Config
from common.control import Coordinator, Signer, TuningAgent
from common.decision_log import DecisionLog, read_log
from common.errors import ConfigError
from common.testing.tuners import ScriptedTuner

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(60)]

KEY = b"l" * 32


def _until(check: Any, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _coordinator_and_rank0(config: Config, num_workers: int, decision_log: DecisionLog | None = None
                           ) -> tuple[Coordinator, TuningAgent]:
    """A coordinator (heartbeats every 0.2 s) and rank 0's agent talking to it."""
    coordinator = Coordinator(bind="tcp://127.0.0.1:*", num_workers=num_workers, config=config,
                              secret=KEY, heartbeat_s=0.2, decision_log=decision_log).start()
    agent = TuningAgent(rank=0, num_workers=num_workers, config=config,
                        endpoint=coordinator.endpoint, secret=KEY, host_coordinator=False,
                        heartbeat_s=0.2, tuner=ScriptedTuner([]))
    return coordinator, agent


def test_a_silent_worker_is_lost_after_the_grace_period_and_back_when_heard(
        tmp_path: Path) -> None:
    coordinator, agent = _coordinator_and_rank0(Config(grace_s=1.5, tuner="observe"), 2,
                                                DecisionLog(tmp_path / "d.jsonl"))
    ctx = zmq.Context()
    peer = ctx.socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.connect(coordinator.endpoint)
    signer = Signer(secret=KEY, sender="worker1")
    try:
        peer.send_multipart(signer.sign("hello", {"rank": 1, "num_workers": 2}))
        peer.send_multipart(signer.sign("alive", {"rank": 1, "step": 41}))
        _until(lambda: "worker1" in coordinator._heard, 5, "the coordinator never heard worker1")
        # worker1 goes silent; worker0's link keeps talking
        _until(lambda: "worker1" in coordinator.lost, 5, "worker1 was never declared lost")
        # the silence the coordinator measured when it declared the loss, not this thread's
        # polling, which a loaded machine delays
        assert 1.5 <= coordinator.lost["worker1"]["silent_s"] <= 3.0
        assert coordinator.lost["worker1"]["step"] == 41 and "worker0" not in coordinator.lost
        _until(lambda: "worker1" in agent.peers(), 3, "worker0 never heard of the silence")
        assert "the coordinator has not heard worker1 for" in agent.peers()
        assert "(last at step 41)" in agent.peers()
        peer.send_multipart(signer.sign("alive", {"rank": 1, "step": 42}))
        _until(lambda: not coordinator.lost, 3, "worker1 heard again, still lost")
        _until(lambda: agent.peers() == "", 3, "worker0 still hears of a silence")
    finally:
        agent.close()
        coordinator.close()
        peer.close(0)
        ctx.term()
    events = [r["event"] for r in read_log(tmp_path / "d.jsonl") if r["type"] == "event"]
    assert events.count("worker_lost") == 1 and events.count("worker_back") == 1


def test_messages_handled_late_count_as_heard_when_they_were_sent(tmp_path: Path) -> None:
    """A coordinator short of CPU works through a backlog: a message sent 4 s before it is
    handled (its delay 4 s beyond the sender's quickest) counts as heard 4 s ago, so a worker
    frozen since is named silent; a steady clock offset between the hosts counts for
    nothing."""
    config = Config(grace_s=30, tuner="observe")
    clock = {"offset": 20.0}  # worker1's clock runs 20 s behind the coordinator's
    coordinator = Coordinator(bind="tcp://127.0.0.1:*", num_workers=2, config=config,
                              secret=KEY, heartbeat_s=0.2,
                              decision_log=DecisionLog(tmp_path / "d.jsonl")).start()
    ctx = zmq.Context()
    peer = ctx.socket(zmq.DEALER)
    peer.setsockopt(zmq.LINGER, 0)
    peer.connect(coordinator.endpoint)
    signer = Signer(secret=KEY, sender="worker1",
                    clock=lambda: time.time() - clock["offset"])
    try:
        peer.send_multipart(signer.sign("alive", {"rank": 1, "step": 7}))
        _until(lambda: "worker1" in coordinator._heard, 5, "the coordinator never heard worker1")
        assert time.monotonic() - coordinator._heard["worker1"][0] < 0.5  # the offset: none
        clock["offset"] += 4.0  # sent 4 s before it is handled
        peer.send_multipart(signer.sign("alive", {"rank": 1, "step": 8}))
        _until(lambda: coordinator._heard["worker1"][1] == 8, 5, "step 8 never heard")
        assert 3.5 < time.monotonic() - coordinator._heard["worker1"][0] < 4.5
        _until(lambda: "worker1" in coordinator._silent, 3, "worker1 never named silent")
    finally:
        coordinator.close()
        peer.close(0)
        ctx.term()


def test_a_worker_never_heard_is_named_silent_since_the_coordinator_started(
        tmp_path: Path) -> None:
    """A worker frozen before its first message got through (its hello queued in its own
    stopped process) is named like one gone silent, counted from when the coordinator began
    listening."""
    coordinator, agent = _coordinator_and_rank0(Config(grace_s=1.5, tuner="observe"), 2)
    try:
        _until(lambda: "worker1" in agent.peers(), 5, "worker0 never heard of worker1")
        assert "the coordinator has not heard worker1 for" in agent.peers()
        assert "(never since it started)" in agent.peers() and "worker0" not in agent.peers()
        _until(lambda: "worker1" in coordinator.lost, 5, "worker1 was never declared lost")
        assert coordinator.lost["worker1"]["step"] is None and "worker0" not in coordinator.lost
    finally:
        agent.close()
        coordinator.close()


def test_a_worker_that_said_bye_is_not_lost(tmp_path: Path) -> None:
    coordinator, agent = _coordinator_and_rank0(Config(grace_s=1.0, tuner="observe"), 1)
    try:
        _until(lambda: "worker0" in coordinator._heard, 5, "the coordinator never heard worker0")
        agent.close()  # says bye
        time.sleep(1.8)
        assert coordinator.lost == {}
    finally:
        coordinator.close()


@pytest.mark.parametrize("value", ["soon", "0.5", "-3"])
def test_the_grace_period_is_checked_where_it_is_set(value: str) -> None:
    with pytest.raises(ConfigError, match=f"AUTOBYTE_GRACE_S must be .*AUTOBYTE_GRACE_S='{value}'"):
        Config.from_env({"AUTOBYTE_GRACE_S": value})
    assert Config.from_env({"AUTOBYTE_GRACE_S": "45"}).grace_s == 45.0

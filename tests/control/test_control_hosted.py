"""Rank 0's coordinator in a child process: it serves, runs below the training's priority,
reports bind errors, writes the log, and ends with its parent, also when the parent is killed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.config import Config
from common.control import TuningAgent
from common.control._hosted import HostedCoordinator
from common.decision_log import read_log

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(60)]

SECRET = "h" * 32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gone(pid: int, within_s: float) -> bool:
    """Exited (a zombie counts: who reaps an orphan is the system's business)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_rank0_hosts_the_coordinator_in_a_lower_priority_process(tmp_path: Path) -> None:
    env = {"AUTOBYTE_SECRET": SECRET,
           "AUTOBYTE_CONTROL_ENDPOINT": f"tcp://127.0.0.1:{_free_port()}"}
    config = Config(tuner="observe", window_steps=4)
    log_path = tmp_path / "d.jsonl"
    rank0 = TuningAgent(rank=0, num_workers=2, config=config, decision_log=log_path,
                        environ=env)
    rank1 = TuningAgent(rank=1, num_workers=2, config=config, environ=env)
    hosted = rank0.coordinator
    try:
        assert isinstance(hosted, HostedCoordinator) and hosted.pid != os.getpid()
        assert hosted.endpoint == rank1.endpoint == env["AUTOBYTE_CONTROL_ENDPOINT"]
        assert os.getpriority(os.PRIO_PROCESS, hosted.pid) > os.getpriority(os.PRIO_PROCESS, 0)
        for step in range(12):
            for agent in (rank0, rank1):
                agent.record_step(step, 8, 0.01)
        deadline = time.monotonic() + 20
        while not (rank0.coordinator_alive and rank1.coordinator_alive):
            assert time.monotonic() < deadline, "the workers never heard the hosted coordinator"
            time.sleep(0.05)
    finally:
        rank1.close()
        rank0.close()
    assert not hosted.alive  # close waited for it
    records = read_log(log_path)
    assert records[0]["type"] == "job" and records[0]["tuner"] == "observe"
    assert [r["first_step"] for r in records if r["type"] == "window"] == [0, 4, 8]
    assert records[-1].get("event") == "coordinator_stopped"


def test_a_bind_error_in_the_process_turns_tuning_off_with_the_reason(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        endpoint = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
        agent = TuningAgent(rank=0, num_workers=2, config=Config(tuner="observe"),
                            decision_log=tmp_path / "d.jsonl",
                            environ={"AUTOBYTE_SECRET": SECRET,
                                     "AUTOBYTE_CONTROL_ENDPOINT": endpoint})
    assert not agent.enabled and agent.coordinator is None
    assert "cannot host the coordinator" in agent.why_disabled
    assert f"cannot bind {endpoint!r}" in agent.why_disabled
    agent.close()


PARENT = """
import os, sys, time
from common.config import Config
from common.control import TuningAgent
agent = TuningAgent(rank=0, num_workers=2, config=Config(tuner="observe"),
                    decision_log=sys.argv[1],
                    environ={"AUTOBYTE_SECRET": "p" * 32,
                             "AUTOBYTE_CONTROL_ENDPOINT": "tcp://127.0.0.1:*"})
print(agent.coordinator.pid, flush=True)
time.sleep(60)
"""


def test_the_process_ends_when_its_parent_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path / "d.jsonl")],
                              stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2])
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert _gone(child, 10), "the coordinator process outlived its parent"
    finally:
        parent.kill()
        parent.wait()
    assert read_log(tmp_path / "d.jsonl")[-1].get("event") == "coordinator_stopped"


def test_sigterm_to_the_jobs_group_stops_the_process_cleanly(tmp_path: Path) -> None:
    """A launcher stopping the job signals the whole group: the coordinator still closes its
    log (and would save its adapted model) instead of dying mid-write."""
    agent = TuningAgent(rank=0, num_workers=2, config=Config(tuner="observe"),
                        decision_log=tmp_path / "d.jsonl",
                        environ={"AUTOBYTE_SECRET": SECRET,
                                 "AUTOBYTE_CONTROL_ENDPOINT": "tcp://127.0.0.1:*"})
    hosted = agent.coordinator
    assert isinstance(hosted, HostedCoordinator)
    os.kill(hosted.pid, signal.SIGTERM)
    assert _gone(hosted.pid, 10)
    agent.close()
    assert read_log(tmp_path / "d.jsonl")[-1].get("event") == "coordinator_stopped"

"""The control plane across real processes over real ZeroMQ sockets on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from control_helpers import PYTHON, WORKER_SCRIPT

from common.config import Config
from common.control import Signer
from common.control._wire import mac
from common.decision_log import read_log
from common.stats import StatsCollector, Window

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(60)]

SECRET = "s3cret-for-tests-" + "a" * 32


class Proc:
    """A child process whose stdout JSON lines and stderr are collected by threads."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.events: list[dict[str, Any]] = []
        self.lines: list[str] = []
        self.stderr = ""
        self.exited_at: float | None = None
        self.popen = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
        self._threads = [threading.Thread(target=self._out, daemon=True),
                         threading.Thread(target=self._err, daemon=True),
                         threading.Thread(target=self._wait, daemon=True)]
        for t in self._threads:
            t.start()

    def _out(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            self.lines.append(line)
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def _err(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.stderr += line

    def _wait(self) -> None:
        self.popen.wait()
        self.exited_at = time.time()

    def wait_line(self, text: str, timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            time.sleep(0.02)
        raise AssertionError(f"{text!r} not printed; stdout={self.lines}\n{self.stderr}")

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 20.0
                 ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in list(self.events):
                if predicate(event):
                    return event
            if self.popen.poll() is not None and self.exited_at is not None:
                time.sleep(0.1)
                for event in list(self.events):
                    if predicate(event):
                        return event
                break
            time.sleep(0.02)
        raise AssertionError(f"event not seen; events={self.events}\nstderr:\n{self.stderr}")

    def finish(self, timeout: float = 30.0) -> int:
        code = self.popen.wait(timeout=timeout)
        for t in self._threads:
            t.join(timeout=5)
        return code

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(timeout=10)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    procs: list[Proc] = []
    env = {**os.environ, "AUTOBYTE_SECRET": SECRET, "AUTOBYTE_WINDOW_STEPS": "5",
           "AUTOBYTE_LOG_DIR": str(tmp_path), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("AUTOBYTE_COORDINATOR", None)

    def start(*args: str, extra_env: dict[str, str] | None = None,
              module: bool = False) -> Proc:
        argv = [PYTHON, "-m", "common.cli", *args] if module else [PYTHON, str(WORKER_SCRIPT),
                                                                  *args]
        proc = Proc(argv, {**env, **(extra_env or {})})
        procs.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in procs:
            proc.kill()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_rank0_hosts_coordinator_and_both_workers_switch_at_the_same_step(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    log = tmp_path / "decisions.jsonl"
    workers = [spawn("--rank", str(r), "--workers", "2", "--endpoint", endpoint,
                     "--steps", "80", "--log", str(log)) for r in range(2)]
    for w in workers:
        assert w.finish() == 0, w.stderr
        done = w.wait_for(lambda e: e["event"] == "done")
        assert w.exited_at is not None and w.exited_at - done["t"] < 1.0
    applied = [w.wait_for(lambda e: e["event"] == "applied") for w in workers]
    heard = [w.wait_for(lambda e: e["event"] == "decision") for w in workers]
    assert applied[0]["step"] == applied[1]["step"] == heard[0]["step"]
    assert all(h["heard_at"] < h["step"] for h in heard)
    assert applied[0]["config"]["partition_bytes"] == 256 * 1024
    records = read_log(log)
    windows = [r for r in records if r["type"] == "window"]
    assert windows[0]["action"] == "explore" and windows[0]["workers"] == 2
    fast = [w for w in windows if w["config"]["partition_bytes"] == 256 * 1024]
    assert fast and fast[0]["first_step"] == applied[0]["step"]


def _attack_frames(window: Window) -> list[list[bytes]]:
    """In sending order (sequence numbers must increase for the good ones)."""
    good = Signer(secret=SECRET.encode(), sender="worker0")
    body = {"window": window.to_dict()}
    forged = Signer(secret=b"not-the-secret", sender="worker0").sign("report", body)
    junk = [b"{oops", mac(SECRET.encode(), b"{oops")]
    bad_window = good.sign("report", {"window": dict(body["window"], samples="lots")})
    stale = Signer(secret=SECRET.encode(), sender="worker0",
                   clock=lambda: time.time() - 3600).sign("report", body)
    valid = good.sign("report", body)
    return [forged, junk, bad_window, stale, valid, valid]


def test_coordinator_drops_forged_replayed_stale_and_malformed_reports(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    log = tmp_path / "coord.jsonl"
    coord = spawn("coordinator", "--bind", "tcp://127.0.0.1:*", "--workers", "1", "--tuner",
                  "none", "--log", str(log), module=True)
    endpoint = coord.wait_line("coordinator on").split()[2]
    windows: list[Window] = []
    collector = StatsCollector(rank=0, num_workers=1, config=Config(window_steps=5),
                               on_window=windows.append)
    for step in range(5):
        collector.record_step(step, 32, 0.1)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        for frames in _attack_frames(windows[0]):
            sock.send_multipart(frames)
        time.sleep(0.5)
    finally:
        sock.close(0)
        ctx.term()
    coord.popen.send_signal(signal.SIGTERM)
    assert coord.finish() == 0, coord.stderr
    records = read_log(log)
    measured = [r for r in records if r["type"] == "window"]
    assert len(measured) == 1 and measured[0]["speed"] == pytest.approx(320.0)
    stopped = next(r for r in records if r.get("event") == "coordinator_stopped")
    assert stopped["rejected"] == {"forged": 1, "malformed": 2, "stale": 1, "replayed": 1}
    for reason in ("forged", "malformed", "stale", "replayed"):
        assert f"({reason}:" in coord.stderr


def test_worker_drops_forged_replayed_stale_and_malformed_decisions(
        spawn: Callable[..., Proc]) -> None:
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    try:
        port = router.bind_to_random_port("tcp://127.0.0.1")
        worker = spawn("--rank", "0", "--workers", "1", "--steps", "150", "--step-time",
                       "0.01", extra_env={"AUTOBYTE_COORDINATOR": f"tcp://127.0.0.1:{port}"})
        assert router.poll(20_000), worker.stderr
        identity = router.recv_multipart()[0]
        good = Signer(secret=SECRET.encode(), sender="coordinator")
        slow = Config(window_steps=5, partition_bytes="4MiB", credit_bytes="4MiB")
        fast = Config(window_steps=5, partition_bytes="256KiB", credit_bytes="1MiB")

        def decision(id_: int, config: Config) -> dict[str, Any]:
            return {"decision": {"id": id_, "step": 120, "config": config.to_dict(),
                                 "session": "x"}}

        attacks = [
            Signer(secret=b"forger", sender="coordinator").sign("decision", decision(5, slow)),
            [b"\x00junk", mac(SECRET.encode(), b"\x00junk")],
            good.sign("decision", {"decision": {"id": 6, "step": "soon"}}),
            Signer(secret=SECRET.encode(), sender="coordinator",
                   clock=lambda: time.time() - 3600).sign("decision", decision(7, slow)),
        ]
        valid = good.sign("decision", decision(2, fast))
        attacks += [valid, valid]
        for frames in attacks:
            router.send_multipart([identity, *frames])
        assert worker.finish() == 0, worker.stderr
    finally:
        router.close(0)
        ctx.term()
    decisions = [e for e in worker.events if e["event"] == "decision"]
    assert [d["id"] for d in decisions] == [2]
    applied = worker.wait_for(lambda e: e["event"] == "applied")
    assert applied["step"] == 120 and applied["config"]["partition_bytes"] == 256 * 1024
    for reason in ("forged", "malformed", "stale", "replayed"):
        assert f"({reason}:" in worker.stderr, worker.stderr


def test_coordinator_killed_workers_keep_last_config_and_exit_promptly(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    coord = spawn("--role", "coordinator", "--workers", "2", "--endpoint", endpoint,
                  "--log", str(tmp_path / "c.jsonl"))
    coord.wait_for(lambda e: e["event"] == "listening")
    env = {"AUTOBYTE_COORDINATOR": endpoint}
    workers = [spawn("--rank", str(r), "--workers", "2", "--steps", "120", "--step-time",
                     "0.03", extra_env=env) for r in range(2)]
    for w in workers:
        w.wait_for(lambda e: e["event"] == "applied")
    coord.kill()
    for w in workers:
        assert w.finish() == 0, w.stderr
        done = w.wait_for(lambda e: e["event"] == "done")
        context = f"events={w.events}\nstderr:\n{w.stderr}"
        assert done["config"]["partition_bytes"] == 256 * 1024, context
        assert not done["alive"], context
        assert w.stderr.count("training continues with the last configuration") == 1, context
        assert w.exited_at is not None and w.exited_at - done["t"] < 1.0, (
            w.exited_at and w.exited_at - done["t"])


def test_exits_promptly_when_no_coordinator_ever_answered(spawn: Callable[..., Proc]) -> None:
    worker = spawn("--rank", "1", "--workers", "2", "--steps", "40", "--step-time", "0.02",
                   "--dead-after", "0.3",
                   extra_env={"AUTOBYTE_COORDINATOR": f"tcp://127.0.0.1:{_free_port()}"})
    assert worker.finish() == 0, worker.stderr
    done = worker.wait_for(lambda e: e["event"] == "done")
    assert done["config"]["partition_bytes"] == Config().partition_bytes
    assert worker.stderr.count("not reachable after") == 1, worker.stderr
    assert worker.exited_at is not None and worker.exited_at - done["t"] < 1.0


def test_no_secret_means_no_tuning_but_training_goes_on(spawn: Callable[..., Proc]) -> None:
    worker = spawn("--rank", "1", "--workers", "2", "--steps", "5",
                   extra_env={"AUTOBYTE_SECRET": "", "AUTOBYTE_COORDINATOR": "tcp://127.0.0.1:1"})
    assert worker.finish() == 0, worker.stderr
    assert worker.wait_for(lambda e: e["event"] == "started")["enabled"] is False
    assert "AUTOBYTE_SECRET is not set" in worker.stderr


def test_standalone_cli_coordinator_with_real_bayesian_tuner(
        spawn: Callable[..., Proc], tmp_path: Path) -> None:
    log = tmp_path / "bo.jsonl"
    coord = spawn("coordinator", "--bind", "tcp://127.0.0.1:*", "--workers", "2", "--tuner",
                  "bayesian", "--log", str(log), "--exit-when-done", "--lead-seconds", "0.8",
                  module=True)
    endpoint = coord.wait_line("coordinator on").split()[2]
    workers = [spawn("--rank", str(r), "--workers", "2", "--steps", "100",
                     extra_env={"AUTOBYTE_COORDINATOR": endpoint}) for r in range(2)]
    for w in workers:
        assert w.finish() == 0, w.stderr
    assert coord.finish(timeout=15) == 0, coord.stderr
    applied = [[(e["id"], e["step"], e["config"]["partition_bytes"]) for e in w.events
                if e["event"] == "applied"] for w in workers]
    assert applied[0] and applied[0] == applied[1]
    records = read_log(log)
    assert next(r for r in records if r["type"] == "job")["tuner"] == "bayesian"
    assert sum(1 for r in records if r.get("event") == "bye") == 2
    assert "every worker said bye" in coord.stderr


def test_a_worker_with_another_secret_says_the_signatures_fail(
        spawn: Callable[..., Proc]) -> None:
    """The coordinator answers a forged hello (once per 5 s per sender), so the worker can tell
    a wrong AUTOBYTE_SECRET from a coordinator that is not there."""
    coordinator = spawn("--role", "coordinator", "--workers", "1", "--endpoint",
                        f"tcp://127.0.0.1:{_free_port()}")
    endpoint = coordinator.wait_for(lambda e: e["event"] == "listening")["endpoint"]
    worker = spawn("--rank", "0", "--workers", "1", "--steps", "150", "--step-time", "0.02",
                   extra_env={"AUTOBYTE_COORDINATOR": endpoint,
                              "AUTOBYTE_SECRET": "another-secret-" + "b" * 32})
    assert worker.finish() == 0, worker.stderr
    assert "fail the signature check" in worker.stderr and "AUTOBYTE_SECRET" in worker.stderr
    assert "not reachable" not in worker.stderr, worker.stderr
    assert "(forged:" in worker.stderr


def test_the_coordinators_banner_names_the_tuner_in_force(tmp_path: Path) -> None:
    """A corrupt model file: the meta tuner falls back to Bayesian optimisation, and the
    banner and the decision log say bayesian, not meta."""
    bad = tmp_path / "bad.keras"
    bad.write_bytes(b"not a model")
    env = {**os.environ, "AUTOBYTE_SECRET": SECRET, "AUTOBYTE_META_MODEL": str(bad),
           "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([PYTHON, "-m", "common.cli", "coordinator", "--bind",
                             "tcp://127.0.0.1:*", "--workers", "1", "--tuner", "meta", "--log",
                             str(tmp_path / "c.jsonl")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "tuner bayesian" in banner and "tuner meta" not in banner, (banner, err)
    assert "falling back to Bayesian optimisation" in err
    job = next(r for r in read_log(tmp_path / "c.jsonl") if r["type"] == "job")
    assert job["tuner"] == "bayesian"

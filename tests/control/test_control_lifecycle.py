"""Coordinator and agent lifecycles in one process: start, close twice, bind errors, defaults."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from common.config import Config
from common.control import Coordinator, Decision, TuningAgent, adapter_options
from common.control._hosted import NICE, HostedCoordinator
from common.decision_log import read_log
from common.errors import ConfigError, ControlError
from common.testing.tuners import ScriptedTuner

KEY = b"k" * 32


def _threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith("autobyte-")}


def test_coordinator_close_is_idempotent_and_releases_the_port(tmp_path: Path) -> None:
    from common.decision_log import DecisionLog

    c = Coordinator(bind="tcp://127.0.0.1:*", num_workers=1, config=Config(), secret=KEY,
                    decision_log=DecisionLog(tmp_path / "d.jsonl")).start()
    endpoint = c.endpoint
    with pytest.raises(ControlError, match="cannot bind"):
        Coordinator(bind=endpoint, num_workers=1, config=Config(), secret=KEY)
    c.close()
    c.close()
    assert "autobyte-coordinator" not in _threads()
    again = Coordinator(bind=endpoint, num_workers=1, config=Config(), secret=KEY)
    again.close()
    events = [r.get("event") for r in read_log(tmp_path / "d.jsonl")]
    assert events[-1] == "coordinator_stopped"


def test_coordinator_run_returns_on_request_stop() -> None:
    c = Coordinator(bind="tcp://127.0.0.1:*", num_workers=1, config=Config(), secret=KEY)
    threading.Timer(0.2, c.request_stop).start()
    started = time.monotonic()
    c.run()
    assert time.monotonic() - started < 5
    c.close()


def test_single_worker_agent_hosts_and_tunes_in_process(tmp_path: Path) -> None:
    config = Config(window_steps=4)
    fast = config.replace(partition_bytes="256KiB", credit_bytes="1MiB")
    agent = TuningAgent(rank=0, num_workers=1, config=config, tuner=ScriptedTuner([fast]),
                        guard=False,
                        decision_log=tmp_path / "d.jsonl", environ={})
    assert agent.enabled and agent.coordinator is not None
    decision = None
    deadline = time.monotonic() + 10
    step = 0
    while decision is None and time.monotonic() < deadline:
        agent.record_step(step, 8, 0.01)
        decision = agent.poll()
        step += 1
        time.sleep(0.005)
    assert decision is not None and decision.config == fast and decision.step % 4 == 0
    assert agent.poll() is None
    agent.applied(decision)
    assert agent.config == fast
    agent.close()
    agent.close()
    assert not _threads()


def test_windows_reach_the_coordinator_without_the_training_thread_waking_the_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wake hands the GIL to the link thread mid-step: the link's tick sends windows."""
    from common.control._link import Link

    wakes: list[str] = []
    wake = Link.wake

    def counted(link: Link) -> None:
        wakes.append(threading.current_thread().name)
        wake(link)

    monkeypatch.setattr(Link, "wake", counted)
    config = Config(window_steps=4)
    fast = config.replace(partition_bytes="256KiB", credit_bytes="1MiB")
    agent = TuningAgent(rank=0, num_workers=1, config=config, tuner=ScriptedTuner([fast]),
                        guard=False, decision_log=tmp_path / "d.jsonl", environ={})
    try:
        for step in range(8):
            agent.record_step(step, 8, 0.01)
        deadline = time.monotonic() + 10
        while (decision := agent.poll()) is None:
            assert time.monotonic() < deadline, "no decision: the windows never went out"
            time.sleep(0.01)
        assert decision.config == fast
        assert wakes == []
    finally:
        agent.close()
    assert wakes == [threading.main_thread().name]  # only stop wakes it


def test_agent_without_an_endpoint_trains_untuned_and_says_how_to_fix_it(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        agent = TuningAgent(rank=1, num_workers=2, config=Config(),
                            environ={"AUTOBYTE_SECRET": "x"})
    assert not agent.enabled and "AUTOBYTE_COORDINATOR" in agent.why_disabled
    assert "AUTOBYTE_CONTROL_ENDPOINT" in caplog.text
    agent.record_step(0, 1, 0.1)
    assert agent.poll() is None and agent.due(10) is None
    agent.close()


def test_due_holds_a_decision_until_its_step_and_skips_the_config_in_force() -> None:
    agent = TuningAgent(rank=1, num_workers=2, config=Config(tuner="none"), environ={})
    fast = Config(partition_bytes="256KiB", credit_bytes="1MiB", tuner="none")
    agent._on_decision(Decision(id=1, step=20, config=fast, session="s"))
    assert agent.due(10) is None          # not yet: it waits for its step
    assert agent.due(20) == fast and agent.due(30) is None  # returned once
    agent.set_config(fast, step=20)
    agent._on_decision(Decision(id=2, step=30, config=fast, session="s"))
    assert agent.due(30) is None          # already in force: nothing to switch
    agent.close()


def test_tuner_none_collects_without_sockets() -> None:
    agent = TuningAgent(rank=1, num_workers=2, config=Config(tuner="none"), environ={})
    agent.record_step(0, 1, 0.1)
    assert not agent.enabled and agent.poll() is None and agent.endpoint is None
    agent.close()


def test_forked_child_exits_without_touching_the_parents_sockets(tmp_path: Path) -> None:
    import multiprocessing

    agent = TuningAgent(rank=0, num_workers=1, config=Config(), tuner=ScriptedTuner([]),
                        guard=False,
                        decision_log=tmp_path / "d.jsonl", environ={})
    try:
        child = multiprocessing.get_context("fork").Process(target=agent.close)
        child.start()
        child.join(timeout=10)
        assert child.exitcode == 0
        assert not any(r.get("event") == "coordinator_stopped"
                       for r in read_log(tmp_path / "d.jsonl"))
        assert any(t.name == "autobyte-coordinator" for t in threading.enumerate())
    finally:
        agent.close()
    assert any(r.get("event") == "coordinator_stopped" for r in read_log(tmp_path / "d.jsonl"))


def test_endpoint_from_the_launchers_control_endpoint(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"AUTOBYTE_SECRET": "x" * 32, "AUTOBYTE_CONTROL_ENDPOINT": f"tcp://127.0.0.1:{port}"}
    rank0 = TuningAgent(rank=0, num_workers=2, config=Config(), tuner=ScriptedTuner([]),
                        guard=False,
                        decision_log=tmp_path / "d.jsonl", environ=env)
    rank1 = TuningAgent(rank=1, num_workers=2, config=Config(), environ=env)
    try:
        assert rank0.coordinator is not None and rank1.coordinator is None
        assert rank0.coordinator.endpoint == rank1.endpoint == f"tcp://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while not (rank0.coordinator_alive and rank1.coordinator_alive):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        rank1.close()
        rank0.close()


def test_unwritable_decision_log_does_not_stop_tuning(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    agent = TuningAgent(rank=0, num_workers=1, config=Config(), tuner=ScriptedTuner([]),
                        guard=False,
                        decision_log=blocker / "d.jsonl", environ={})
    try:
        assert agent.enabled and agent.coordinator is not None
        assert agent.coordinator.log.path is None
    finally:
        agent.close()


def test_meta_tuner_falls_back_to_bayesian_when_it_cannot_be_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import common.tuners
    from common.control import make_tuner

    real = common.tuners.create

    def create(name: str, **kwargs: object) -> object:
        if name == "meta":
            raise ConfigError("the meta-network file is missing")
        return real(name, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(common.tuners, "create", create)
    tuner = make_tuner("meta", base=Config())
    assert getattr(tuner, "name", "") == "bayesian"
    with pytest.raises(ControlError, match="tuner must be one of"):
        make_tuner("nonsense")


def test_coordinator_survives_a_failing_decision_log(tmp_path: Path) -> None:
    import zmq

    from common.control import Signer
    from common.decision_log import DecisionLog
    from common.stats import StatsCollector, Window

    class FullDisk(DecisionLog):
        def write(self, type_: str, record: object) -> None:  # type: ignore[override]
            if type_ == "window":
                raise OSError(28, "No space left on device")

    c = Coordinator(bind="tcp://127.0.0.1:*", num_workers=1, config=Config(window_steps=2),
                    secret=KEY, decision_log=FullDisk(None)).start()
    windows: list[Window] = []
    collector = StatsCollector(rank=0, num_workers=1, config=Config(window_steps=2),
                               on_window=windows.append)
    for step in range(6):
        collector.record_step(step, 1, 0.1)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(c.endpoint)
        signer = Signer(secret=KEY, sender="worker0")
        for w in windows:
            sock.send_multipart(signer.sign("report", {"window": w.to_dict()}))
        deadline = time.monotonic() + 5  # a heartbeat may come before all are handled
        while c._failures < len(windows) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert c._failures == len(windows)
        sock.send_multipart(signer.sign("hello", {"rank": 0, "num_workers": 1}))
        assert sock.poll(5000), "coordinator stopped answering"
    finally:
        sock.close(0)
        ctx.term()
        c.close()


def test_adapters_refuse_tuning_options_they_set_themselves() -> None:
    assert adapter_options(None) == {} and adapter_options({"lead_s": 1.0}) == {"lead_s": 1.0}
    with pytest.raises(ConfigError, match=r"must not set \['model', 'rank'\].*model_name="):
        adapter_options({"rank": 3, "model": "x", "lead_s": 1.0})


def test_a_coordinator_that_fell_behind_decides_on_the_newest_window_only(
        tmp_path: Path) -> None:
    """Windows that queued while the loop was busy (a model compiling) are measured and
    logged as 'behind'; only the newest is decided on, so a decision never comes due in the
    past."""
    from common.decision_log import DecisionLog
    from common.stats import StatsCollector, Window

    config = Config(window_steps=2)
    fast = config.replace(partition_bytes="256KiB", credit_bytes="1MiB")
    c = Coordinator(bind="tcp://127.0.0.1:*", num_workers=1, config=config, secret=KEY,
                    tuner=ScriptedTuner([fast]), decision_log=DecisionLog(tmp_path / "d.jsonl"))
    windows: list[Window] = []
    collector = StatsCollector(rank=0, num_workers=1, config=config, warmup_after_change=0,
                               on_window=windows.append)
    for step in range(8):
        collector.record_step(step, 1, 0.1)
    for w in windows:
        c._add(w)  # as one drain receives them
    c._decide_ready()
    c.close()
    rows = [r for r in read_log(tmp_path / "d.jsonl") if r["type"] == "window"]
    assert [r["action"] for r in rows] == ["behind", "behind", "behind", "explore"]
    assert [r["first_step"] for r in rows] == [0, 2, 4, 6]
    assert c.loop.pending is not None and c.loop.pending.step > 7


def test_windows_queued_while_the_coordinator_is_busy_are_logged_when_the_job_ends(
        tmp_path: Path) -> None:
    """A job shorter than a busy spell of its coordinator (a 5 s MXNet job at 1 Gbit/s): its
    windows queue meanwhile, and stopping logs them, measured and not decided on, instead
    of dropping them."""
    from common.decision_log import DecisionLog

    gate, started = threading.Event(), threading.Event()
    tuner = ScriptedTuner([Config(partition_bytes="256KiB", credit_bytes="1MiB")])
    config = Config(window_steps=2)
    coordinator = Coordinator(bind="tcp://127.0.0.1:*", num_workers=1, config=config,
                              secret=KEY, tuner=tuner, guard=False,
                              decision_log=DecisionLog(tmp_path / "d.jsonl"))
    check = coordinator._check_peers

    def busy(now: float) -> None:  # the serve loop's first heartbeat holds it up
        if not started.is_set():
            started.set()
            gate.wait(10)
        check(now)

    coordinator._check_peers = busy  # type: ignore[method-assign]
    server = threading.Thread(target=coordinator.run, daemon=True)
    server.start()
    agent = TuningAgent(rank=0, num_workers=1, config=config, endpoint=coordinator.endpoint,
                        secret=KEY, host_coordinator=False, environ={})
    try:
        assert started.wait(10)
        for step in range(6):
            agent.record_step(step, 1, 0.1)
        time.sleep(0.3)  # the reports are in the coordinator's queue
        threading.Timer(0.3, gate.set).start()  # the spell ends while the job stops
    finally:
        agent.close()
        coordinator.request_stop()
        server.join(10)
    rows = [r for r in read_log(tmp_path / "d.jsonl") if r["type"] == "window"]
    assert [r["first_step"] for r in rows] == [0, 2, 4]
    assert {r["action"] for r in rows} == {"behind"}
    assert all("stopping" in r["reason"] for r in rows)
    assert agent.poll() is None  # no decision was sent


def test_every_thread_of_a_hosted_coordinator_runs_below_trainings_priority() -> None:
    """Those made before the priority is lowered too (ZeroMQ's I/O threads, any pool the
    tuner's model made while loading)."""
    hosted = HostedCoordinator(bind="tcp://127.0.0.1:0", num_workers=1,
                               config=Config(tuner="meta"), secret=b"k" * 32, lead_steps=None,
                               lead_s=0.3, heartbeat_s=1.0, max_age_s=30.0, log_path=None)
    try:
        assert hosted.tuner_name == "meta"
        tasks = Path(f"/proc/{hosted.pid}/task")
        stats = {t.name: (t / "stat").read_text().rsplit(")", 1)[1].split()
                 for t in tasks.iterdir()}
    finally:
        hosted.close()
    nice = {tid: int(fields[16]) for tid, fields in stats.items()}
    policy = {tid: int(fields[38]) for tid, fields in stats.items()}
    assert len(nice) > 3 and min(nice.values()) >= NICE, nice
    assert set(policy.values()) == {5}, policy  # SCHED_IDLE


def test_a_flood_of_forged_messages_is_muted_and_summed_up(
        caplog: pytest.LogCaptureFixture) -> None:
    """20 forged messages mute their sender for a minute (no hashing); the log gets the first
    few and at most a summary line, and a worker with the secret is still answered."""
    import zmq

    from common.control import Signer

    caplog.set_level(logging.WARNING)
    c = Coordinator(bind="tcp://127.0.0.1:*", num_workers=1, config=Config(),
                    secret=KEY).start()
    ctx = zmq.Context()
    flood, worker = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
    try:
        for sock in (flood, worker):
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(c.endpoint)
        forger = Signer(secret=b"not-the-key", sender="worker0")
        hello = {"rank": 0, "num_workers": 1}
        for _ in range(5000):
            flood.send_multipart(forger.sign("hello", hello))
        deadline = time.monotonic() + 20
        while sum(c.verifier.rejected.values()) < 5000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.verifier.rejected["forged"] == 5000
        worker.send_multipart(Signer(secret=KEY, sender="worker0").sign("hello", hello))
        assert worker.poll(5000), "the worker with the secret got no answer"
    finally:
        flood.close(0)
        worker.close(0)
        ctx.term()
        c.close()
    lines = [r for r in caplog.records if "dropped" in r.getMessage()]
    assert 5 <= len(lines) <= 7, [r.getMessage() for r in lines]


def test_a_standalone_coordinator_leads_decisions_by_what_the_workers_adapter_needs() -> None:
    """A standalone coordinator knows nothing of the adapter: each worker's hello says how many
    steps its decisions must lead by, and the coordinator's loop takes the largest (a bad value
    is ignored)."""
    config = Config(window_steps=2)
    coordinator = Coordinator(bind="tcp://127.0.0.1:*", num_workers=2, config=config,
                              secret=KEY, tuner=ScriptedTuner([]))
    assert coordinator.loop.lead_steps == 0
    server = threading.Thread(target=coordinator.run, daemon=True)
    server.start()
    agents = [TuningAgent(rank=rank, num_workers=2, config=config, endpoint=coordinator.endpoint,
                          secret=KEY, host_coordinator=False, environ={}, lead_steps=lead)
              for rank, lead in ((0, 3), (1, 10**9))]
    try:
        deadline = time.monotonic() + 10
        while len(coordinator._peers) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # both hellos are in
        assert len(coordinator._peers) == 2 and coordinator.loop.lead_steps == 3
    finally:
        for agent in agents:
            agent.close()
        coordinator.request_stop()
        server.join(10)


def test_the_coordinator_timeout_comes_from_the_environment(
        caplog: pytest.LogCaptureFixture) -> None:
    """AUTOBYTE_COORDINATOR_TIMEOUT=1: a worker whose coordinator never answers says so and goes
    on alone within seconds, not after the default 10 s."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    started = time.monotonic()
    agent = TuningAgent(rank=1, num_workers=2, config=Config(tuner="observe"),
                        environ={"AUTOBYTE_SECRET": "t" * 32, "AUTOBYTE_COORDINATOR": nobody,
                                 "AUTOBYTE_COORDINATOR_TIMEOUT": "1"})
    try:
        with caplog.at_level(logging.WARNING, logger="common.control"):
            while "not reachable after" not in caplog.text and time.monotonic() - started < 8:
                time.sleep(0.05)
        assert "not reachable after" in caplog.text, caplog.text
    finally:
        agent.close()
    with pytest.raises(ConfigError, match="AUTOBYTE_COORDINATOR_TIMEOUT must be between"):
        TuningAgent(rank=1, num_workers=2, config=Config(tuner="observe"),
                    environ={"AUTOBYTE_COORDINATOR_TIMEOUT": "0"})

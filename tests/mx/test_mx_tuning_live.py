"""Live tuning of real ps-lite jobs: kvstore='autobyte' with no tuning code in the training loop.

On the testbed (root: namespaces with tc-shaped links) two workers and a server train while a
Bayesian tuner hosted by rank 0 tunes from a poor start, the link rate drops mid-run, and the
tuner follows. On loopback a standalone coordinator is killed mid-run and training goes on.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Job, NativeRefs, assert_ok, job_dir, run_job, skip_without_mxnet

from common.control import ensure_secret
from common.decision_log import read_log
from common.testbed import Testbed

skip_without_mxnet()

sys.path.insert(0, str(Path(__file__).parents[1] / "testbed"))
from tb_helpers import IS_ROOT, nothing_left_behind  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "control"))
from control_helpers import standalone_coordinator  # noqa: E402

pytestmark = [pytest.mark.framework, pytest.mark.distributed, pytest.mark.slow]

WINDOW = 5


def assert_same_params(job: Job) -> None:
    got, want = job.params(1), job.params(0)
    assert got.keys() == want.keys()
    for name in want:
        assert np.array_equal(got[name], want[name]), (
            f"{name}: workers differ by up to {np.abs(got[name] - want[name]).max()}")


def assert_same_configs(job: Job) -> list[tuple[int, int, int]]:
    """Both workers ran the same configuration at every step; returns rank 0's."""
    seen = [[(s["step"], s["config"]["partition_bytes"], s["config"]["credit_bytes"])
             for s in job.summary(rank)["steps"]] for rank in range(job.workers)]
    assert seen[0] and seen[0] == seen[1], "workers ran different configurations at some step"
    return seen[0]


def knobs(config: dict[str, Any]) -> tuple[int, int]:
    return config["partition_bytes"], config["credit_bytes"]


def setting(config: dict[str, Any]) -> tuple[int, int] | str:
    return knobs(config) if config["scheduling"] else "native"


def windows_of(log: Path) -> list[dict[str, Any]]:
    return [r for r in read_log(log) if r["type"] == "window" and r.get("steps")]


def describe(windows: list[dict[str, Any]]) -> str:
    return "\n".join(f"{w['first_step']:4d}-{w['last_step']:4d} {w['speed']:8.1f}/s "
                     f"{_shown(w['config']):>17s} {w['action']:7s} "
                     f"{w.get('target_step') or '':>4} {w.get('reason', '')[:60]}"
                     for w in windows)


def _shown(config: dict[str, Any]) -> str:
    knob = setting(config)
    return knob if isinstance(knob, str) else f"{knob[0] >> 10}KiB/{knob[1] >> 10}KiB"


class When:
    """Runs ``action`` once ``condition()`` holds (polled on a thread until ``stop``)."""

    def __init__(self, condition: Callable[[], bool], action: Callable[[], None]) -> None:
        self.condition, self.action = condition, action
        self.fired_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            try:
                ready = self.condition()
            except (OSError, ValueError):  # a file being written: look again
                continue
            if ready:
                self.action()
                self.fired_at = time.time()
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture
def no_testbed_leaks() -> Iterator[None]:
    """Fail the test if it leaves a namespace, a testbed record or a root-namespace link."""
    with nothing_left_behind():
        yield


# the rate drops when rank 0 reaches step MARK; after it a decision leads by --lead-s (25-75
# steps at 20-60 ms a step), so the up to 6 explorations plus two settled windows need ~550
MARK, STEPS = 450, 1000


@pytest.mark.testbed
@pytest.mark.skipif(not IS_ROOT, reason="needs root: network namespaces and tc")
@pytest.mark.usefixtures("no_testbed_leaks")
def test_bayesian_tuner_leaves_a_poor_start_and_follows_a_rate_change(tmp_path: Path) -> None:
    """'wide' (0.76 MB of gradients, one 640 KB tensor): at 1 Gbit/s 4KiB partitions with a
    4KiB credit are ~5x slower than any configuration of the search space; at 100 Mbit/s
    splitting the big tensor (64KiB) beats sending it whole by ~1.3x, so the optimum moves."""
    out = job_dir(tmp_path)
    log = tmp_path / "decisions.jsonl"
    args = ("--model", "wide", "--steps", str(STEPS), "--mark", str(MARK), "--brief",
            "--partition", "4KiB", "--credit", "4KiB", "--lead-s", "1.5",
            "--explore-budget", "6", "--decision-log", str(log))
    env = {"AUTOBYTE_TUNER": "bayesian", "AUTOBYTE_WINDOW_STEPS": str(WINDOW)}
    with Testbed(hosts=3, rate="1gbit") as tb:
        change = When((out / f"mark_{MARK}").exists, lambda: tb.set_rate("100mbit"))
        try:
            job = run_job(tmp_path, *args, env=env, testbed=tb, out=out, timeout=300)
        finally:
            change.stop()
    assert_ok(job)
    assert change.fired_at is not None, "the rate never changed"
    assert_same_params(job)
    steps = assert_same_configs(job)
    windows = windows_of(log)
    adapted = [r["time"] - change.fired_at for r in read_log(log) if r.get("event") == "adapt"]
    table = (f"{describe(windows)}\nrate changed at step {MARK}; adapt events at "
             f"{[round(t, 1) for t in adapted]} s from the change")
    assert job.summary(0)["tuning"]["hosted"] and job.summary(1)["tuning"]["enabled"]

    # 1. from the poor start to the search space's configurations, at 1 Gbit/s
    before = [w for w in windows if w["last_step"] < MARK]
    assert before[0]["config"]["partition_bytes"] == 4096
    start = statistics.fmean(w["speed"] for w in before[:2])
    tuned = max(w["speed"] for w in before)
    assert tuned > 3 * start, f"tuning from the poor start gained too little\n{table}"

    # 2. after the rate drop the tuner moved to other configurations (exploring again after
    # the trigger saw its predictions fail, or still exploring when the rate changed)
    after = [w for w in windows if w["first_step"] >= MARK + WINDOW]  # the drop is mid-window
    at_change = knobs(next(w for w in windows
                           if w["first_step"] <= MARK <= w["last_step"])["config"])
    decided = [w for w in windows if w.get("target_step") and w["target_step"] > MARK]
    moved = [w for w in decided if knobs(w["next_config"]) != at_change]
    assert moved, f"no decision for another configuration after the change\n{table}"
    assert statistics.fmean(w["speed"] for w in after[:2]) < 0.5 * tuned, (
        f"the rate change did not slow the job down: was the link shaped?\n{table}")

    # 3. the tuner settled on the fastest setting it measured after the change, within the
    # windows' noise (one 5-step window at 100 Mbit/s can read 25% low)
    settle = max(w["target_step"] for w in decided)
    settled = [w for w in after if w["first_step"] >= settle]
    assert len(settled) >= 2, f"the tuner had not settled by the end (step {settle})\n{table}"
    speeds: dict[object, list[float]] = {}
    for w in after:
        speeds.setdefault(setting(w["config"]), []).append(w["speed"])
    best = max(statistics.median(s) for s in speeds.values() if len(s) >= 3)
    final = statistics.median(w["speed"] for w in settled)
    assert final >= 0.9 * best, (
        f"settled at {final:.1f} samples/s, below the {best:.1f} of the best setting measured "
        f"after the change\n{table}")
    # every worker switched exactly at the decided steps
    switches = {step for (step, p, c), (_, p0, c0) in zip(steps[1:], steps, strict=False)
                if (p, c) != (p0, c0)}
    targets = {w["target_step"] for w in windows if w.get("target_step")}
    assert switches <= targets, (sorted(switches - targets), table)


@pytest.mark.testbed
@pytest.mark.skipif(not IS_ROOT, reason="needs root: network namespaces and tc")
@pytest.mark.usefixtures("no_testbed_leaks")
def test_switches_on_a_slow_link_keep_the_servers_optimizer_right(
        tmp_path: Path, native_refs: NativeRefs) -> None:
    """On a slow link the last step's rounds are still on their way when Python starts the
    next step and switches. A switch that keeps the blocks (a new credit; native to native)
    must leave the server's keys alone, and one back to blocks used before refreshes them only
    after those rounds are done: otherwise the server stores a gradient sum as the weights."""
    args = ("--model", "mlp", "--steps", "14")
    want = native_refs.get(*args, workers=2, servers=1)
    with Testbed(hosts=3, rate="20mbit") as tb:
        job = run_job(tmp_path, *args, "--partition", "16KiB", "--credit", "64KiB",
                      "--switch", "1:16KiB:32KiB:1", "--switch", "3:16KiB:32KiB:0",
                      "--switch", "5:4MiB:4MiB:0", "--switch", "7:16KiB:64KiB:1",
                      "--switch", "9:16KiB:16KiB:1", testbed=tb, timeout=180)
    assert_ok(job)
    for rank in range(2):
        got = job.params(rank)
        for name, value in want.params(rank).items():
            assert np.array_equal(got[name], value), (
                f"rank {rank} {name}: max diff {np.abs(got[name] - value).max()}")
    layouts = [(s["config"]["partition_bytes"] >> 10, s["config"]["credit_bytes"] >> 10)
               if s["config"]["scheduling"] else 0 for s in job.summary(0)["steps"]]
    assert layouts[:13] == [(16, 64)] * 3 + [(16, 32)] * 2 + [0] * 4 + [(16, 64)] * 2 + \
        [(16, 16)] * 2


def test_standalone_coordinator_killed_mid_run_training_goes_on(tmp_path: Path) -> None:
    """Workers report to ``autobyte coordinator``; it is SIGKILLed once its first decision is
    in force. Both workers finish, with equal parameters, the same configuration at every
    step, and say once that the coordinator is gone."""
    secret = ensure_secret({})
    log = tmp_path / "coordinator.jsonl"
    with standalone_coordinator(tmp_path, secret, start="4KiB:4KiB",
                                window_steps=WINDOW) as (coordinator, endpoint):
        def decision_in_force() -> bool:
            return any(w["config"]["partition_bytes"] != 4096 for w in windows_of(log))

        killed = When(decision_in_force, lambda: os.kill(coordinator.pid, signal.SIGKILL))
        try:
            job = run_job(tmp_path, "--model", "mlp", "--steps", "1500", "--brief",
                          "--partition", "4KiB", "--credit", "4KiB", "--dead-after", "1.5",
                          env={"AUTOBYTE_TUNER": "bayesian",
                               "AUTOBYTE_WINDOW_STEPS": str(WINDOW),
                               "AUTOBYTE_COORDINATOR": endpoint, "AUTOBYTE_SECRET": secret},
                          timeout=240)
        finally:
            killed.stop()
    assert_ok(job)
    assert killed.fired_at is not None, "the coordinator's decision was never in force"
    assert coordinator.returncode == -signal.SIGKILL
    assert_same_params(job)
    steps = assert_same_configs(job)
    assert steps[-1][1] != 4096, "the decision made before the kill was not kept"
    for rank in range(2):
        text = job.output(f"worker{rank}")
        summary = job.summary(rank)
        assert summary["tuning"]["enabled"] and not summary["tuning"]["hosted"]
        assert not summary["tuning"]["coordinator_alive"], text[-2000:]
        assert text.count("training continues with the last configuration") == 1, text[-3000:]
        assert f"coordinator at {endpoint} silent for" in text

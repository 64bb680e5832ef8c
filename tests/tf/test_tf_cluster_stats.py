"""TF_CONFIG/XLA checks, statistics, and the step-agreement protocol (no TensorFlow needed)."""

from __future__ import annotations

import json
import sys
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

import autobyte_tf._control
from autobyte_tf._checks import check_no_auto_jit, file_barrier, parse_tf_config
from autobyte_tf._control import Controller, SteppedFunction, decision_lead
from autobyte_tf._sequencer import TensorInfo
from autobyte_tf._stats import ReadyTimes
from common.agreement import Agreement
from common.config import Config
from common.control import Decision, TuningAgent, TuningLoop
from common.errors import ConfigError
from common.stats import AHEAD_SETTLE_S, SampleBudget, Window, ring_bytes
from common.testing import peers_agree
from common.testing.tuners import ScriptedTuner
from common.trigger import ThresholdTrigger

sys.path.insert(0, str(Path(__file__).parents[1] / "control"))
from control_helpers import observation


def tf_config(workers: list[str], index: int = 0, kind: str = "worker") -> dict[str, str]:
    return {"TF_CONFIG": json.dumps({"cluster": {"worker": workers},
                                     "task": {"type": kind, "index": index}})}


def test_tf_config_gives_rank_and_size() -> None:
    info = parse_tf_config(tf_config(["a:1", "b:2", "c:3"], index=2))
    assert (info.rank, info.workers) == (2, 3)
    chief = {"TF_CONFIG": json.dumps({"cluster": {"chief": ["a:1"], "worker": ["b:2"]},
                                      "task": {"type": "worker", "index": 0}})}
    assert parse_tf_config(chief).rank == 1


@pytest.mark.parametrize(("env", "message"), [
    ({}, "TF_CONFIG is not set"),
    ({"TF_CONFIG": "{not json"}, "not valid JSON"),
    ({"TF_CONFIG": "[1]"}, "must be a JSON object"),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}})}, "'task' object"),
    (tf_config(["a:1"], index=1), "index must be an int in \\[0, 1\\)"),
    (tf_config(["a:1"], kind="ps"), "type must be one of \\['worker'\\]"),
    (tf_config(["nohost"]), "'host:port'"),
    (tf_config(["a:99999"]), "port in 1..65535"),
])
def test_bad_tf_config_is_explained(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        parse_tf_config(env)
    assert "TF_CONFIG" in str(info.value)


def test_xla_auto_jit_is_refused() -> None:
    check_no_auto_jit({"TF_XLA_FLAGS": "--tf_xla_auto_jit=0"})
    check_no_auto_jit({})
    with pytest.raises(ConfigError, match="auto-clustering"):
        check_no_auto_jit({"TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"})


def test_ready_times_give_each_gradient_since_the_step_began_and_the_links_busy_time() -> None:
    call = ("a", "b", "c")
    times = ReadyTimes()
    times.stamp(call, 0, 10.3)
    times.stamp(call, 2, 10.1)
    times.stamp_start(10.0)
    assert times.measured(call) is None  # "b" was never stamped
    times.stamp(call, 1, 10.2)
    times.done(call, (2,), 10.25)  # the run of collectives "c" started: busy 10.1-10.25
    times.done(call, (0, 1), 10.5)  # the last: from 10.3 until 10.5
    ready, busy = times.measured(call)  # type: ignore[misc]
    assert ready == pytest.approx([0.3, 0.2, 0.1])
    assert busy == pytest.approx(0.15 + 0.2)
    times.clear()
    assert times.measured(call) is None


def run_steps(controllers: list[Controller], steps: int) -> list[list[bool]]:
    """Lock-step workers: returns per step which workers had to rebuild."""
    rebuilds = []
    infos = (TensorInfo("t0", 8192, 4), TensorInfo("t1", 4096, 4))
    for _ in range(steps):
        flags = []
        for c in controllers:
            step = c.begin()
            flags.append(step.rebuild)
            c.plan_for(infos)
            if step.sample:
                for i in range(2):
                    c._stamps.stamp(infos, i, 10.0 + 0.001 * (2 - i))
                c._stamps.stamp_start(9.999)
            c._traced = False
            c.end(step, 0.01, 8)
        rebuilds.append(flags)
    return rebuilds


class _Sums:
    """The agreement's sum over workers, as the all-reduce makes it (the workers run in lock
    step: each sends its vector before any takes the sum)."""

    def __init__(self) -> None:
        self.sums: list[NDArray[np.float64]] = []
        self._sent: dict[int, int] = {}

    def of(self, rank: int) -> Callable[[NDArray[np.float64]], Callable[[], NDArray[np.float64]]]:
        def broadcast(vector: NDArray[np.float64]) -> Callable[[], NDArray[np.float64]]:
            i = self._sent[rank] = self._sent.get(rank, -1) + 1
            if i == len(self.sums):
                self.sums.append(np.zeros_like(vector))
            self.sums[i] = self.sums[i] + vector
            return lambda: self.sums[i]
        return broadcast


def test_rank0_decision_reaches_every_worker_at_the_same_step() -> None:
    results: dict[int, list[Config]] = {0: [], 1: []}
    summed = _Sums()

    def make(rank: int) -> Controller:
        return Controller(config=Config(partition_bytes=4096, credit_bytes=8192,
                                        window_steps=2),
                          rank=rank, workers=2, bandwidth=1e9, broadcast=summed.of(rank))

    workers = [make(0), make(1)]
    workers[1].reconfigure(Config(partition_bytes=65536, credit_bytes=65536))  # ignored
    run_steps(workers, 1)
    workers[0].reconfigure(Config(partition_bytes=16384, credit_bytes=32768))
    rebuilds = run_steps(workers, 5)
    for rank, c in enumerate(workers):
        results[rank].append(c.config)
    assert Agreement(rank=1, workers=2, config=Config()).take(summed.sums[0]).config == \
        Config(partition_bytes=16384, credit_bytes=32768)  # sent at step 1, half a window ahead,
    assert rebuilds[0] == [False, False] and rebuilds[2:] == [[False, False]] * 3
    assert rebuilds[1] == [True, True]  # ... in force from the boundary, step 2, on both
    assert results[0] == results[1]
    assert results[0][0].partition_bytes == 16 * 1024
    more = run_steps(workers, 6)
    assert [r[0] for r in more] == [r[1] for r in more]
    assert workers[0].measured_plan and workers[1].measured_plan
    assert workers[0]._times == workers[1]._times


def test_reconfigure_needs_a_config() -> None:
    c = Controller(config=Config(), rank=0, workers=1, bandwidth=1e9,
                   broadcast=lambda v: lambda: v)
    with pytest.raises(ConfigError, match="Config"):
        c.reconfigure({"partition_bytes": 4096})  # type: ignore[arg-type]


def test_every_step_function_switches_trace_and_a_switch_back_reuses_the_old_one() -> None:
    c = Controller(config=Config(window_steps=2), rank=0, workers=1, bandwidth=1e9,
                   broadcast=lambda v: lambda: v)
    builds = {"a": 0, "b": 0}

    def builder(name: str) -> Any:
        def build() -> Any:
            builds[name] += 1
            return lambda: name
        return build

    a = SteppedFunction(c, builder("a"), lambda: 0, can_sample=lambda: False)
    b = SteppedFunction(c, builder("b"), lambda: 0, can_sample=lambda: False)
    assert [a(), a(), b()] == ["a", "a", "b"]
    assert builds == {"a": 1, "b": 1}
    c.reconfigure(Config(partition_bytes=8192, credit_bytes=8192))
    a()  # step 3: the agreement starts half a window ahead ...
    assert c.config.partition_bytes != 8192
    a()  # step 4: ... in force from the boundary on, a rebuilds
    assert c.config.partition_bytes == 8192 and builds["a"] == 2
    b()
    assert builds["b"] == 2
    c.reconfigure(Config(window_steps=2))  # back to the first configuration
    for _ in range(4):
        a()  # step 10: the switch back reuses a's first trace
    assert c.config == Config(window_steps=2) and builds["a"] == 2
    c.reconfigure(Config(window_steps=2, scheduling=False))
    for _ in range(4):
        a()  # step 14: native is one more trace
    assert builds["a"] == 3


def _sampling(step_s: float, steps: int, *, workers: int = 1,
              switch_at: int = -1) -> tuple[list[bool], list[int]]:
    """Runs ``steps`` steps of ``step_s`` (a fake clock) on a controller per worker, whose
    agreements are summed as the strategy's all-reduce sums them; returns rank 0's traces
    (whether each would stamp) and the steps each worker ran a stamping trace in."""
    now = [0.0]
    summed = _Sums()
    controllers = [Controller(config=Config(window_steps=4), rank=r, workers=workers,
                              bandwidth=1e9, broadcast=summed.of(r), stamping=True)
                   for r in range(workers)]
    traced: list[bool] = []
    ran: list[list[int]] = [[] for _ in controllers]
    fns = []
    clock = types.SimpleNamespace(perf_counter=lambda: now[0])  # steps take only step_s
    for rank, c in enumerate(controllers):
        c._budget = SampleBudget(settle_s=AHEAD_SETTLE_S, clock=clock.perf_counter)

        def build(c: Controller = c, rank: int = rank) -> Any:
            stamps = c.stamps() is not None
            if rank == 0:
                traced.append(stamps)
            return lambda: ran[rank].append(c.step) if stamps else None

        fns.append(SteppedFunction(c, build, lambda: 0, can_sample=lambda: True))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(autobyte_tf._control, "time", clock)
        for step in range(steps):
            now[0] += step_s
            if step == switch_at:
                controllers[0].reconfigure(partition_bytes=8192)
            for fn in fns:  # in lock step: every worker's vector is in before a sum is taken
                fn()
    assert all(r == ran[0] for r in ran)  # every worker ran the same traces
    return traced, ran[0]


def test_sampled_steps_run_a_trace_of_their_own_and_other_steps_trace_no_stamps() -> None:
    """A stamp in every trace cost every step; now a plan's plain trace has none and its
    sampled trace, built at its first sampled step, runs at most one step a window."""
    traced, ran = _sampling(0.3, 12)  # 1.2-s windows
    assert traced == [False, True]  # step 0 plain, step 1 the first sampled one
    # steps 1, 5, 9 sample; step 2 too, since step 1 traced (its times are a trace's)
    assert ran == [1, 2, 5, 9]


def test_fast_steps_sample_every_window_while_unsettled_then_once_a_second_alike() -> None:
    """Rank 0 asks for a sampled step in the agreement half a window ahead: every window for
    ``AHEAD_SETTLE_S`` after a change (here the job's start, its first ask at step 2, t=0.3 s), then
    once a second; every worker runs the sampled trace at the same steps (collectives must
    match)."""
    _, ran = _sampling(0.1, 64, workers=2)  # 0.4-s windows; asked at steps 2, 6, 10, ...
    # step 1 (and 2, after its trace); windows to 32-35 (asked at t=3.1 s); then asked at
    # steps 42 (t=4.3 s) and 54 (5.5 s): windows 44-47 and 56-59
    assert ran == [1, 2, 5, 9, 13, 17, 21, 25, 29, 33, 45, 57]


def test_the_window_a_new_configuration_begins_samples_and_settles_again() -> None:
    # 0.5-s windows; the switch asked at step 5 is agreed at step 6 and in force from step 8
    # (t=1.125 s), whose window samples (step 9 traces, so step 10 too), as does every window
    # asked for within 3 s of it (to window 32-35); then one a second: window 40-43
    traced, ran = _sampling(0.125, 48, switch_at=5)
    assert ran == [1, 2, 5, 9, 10, 13, 17, 21, 25, 29, 33, 41]
    assert traced == [False, True, False, True]  # each plan: a plain and a sampled trace
    plain = Controller(config=Config(window_steps=4), rank=0, workers=1, bandwidth=1e9,
                       broadcast=lambda v: lambda: v)
    plain.sample(True)
    assert plain.stamps() is None and not plain.sampling  # a strategy that never stamps


def test_live_tuning_decision_switches_every_worker_at_its_step_and_windows_follow() -> None:
    """The coordinator's decision, heard by rank 0's agent, enters the agreement at its step;
    both agents learn the switch and their windows carry the steps, bytes and layer times."""
    summed = _Sums()
    windows: dict[int, list[Window]] = {0: [], 1: []}
    base = Config(partition_bytes=4096, credit_bytes=8192, window_steps=2, tuner="none")

    def make(rank: int) -> Controller:
        broadcast = summed.of(rank)
        agent = TuningAgent(rank=rank, num_workers=2, config=base, environ={})
        agent._collector._on_window = windows[rank].append
        return Controller(config=base, rank=rank, workers=2, bandwidth=1e9,
                          broadcast=broadcast, agent=agent)

    workers = [make(0), make(1)]
    fast = base.replace(partition_bytes=16384, credit_bytes=32768)
    assert workers[0].agent is not None
    workers[0].agent._on_decision(Decision(id=1, step=4, config=fast, session="s"))
    run_steps(workers, 4)  # step 1's agreement is for step 2, step 3's for step 4
    assert [c.config for c in workers] == [base, base]
    rebuilds = run_steps(workers, 2)
    assert rebuilds[0] == [True, True]
    for c in workers:
        assert c.config == fast and c.agent is not None and c.agent.config == fast
    for rank in (0, 1):
        got = [(w.first_step, w.config.partition_bytes) for w in windows[rank]]
        assert got == [(0, 4096), (2, 4096), (4, 16384)]
        assert windows[rank][0].bytes_up == ring_bytes(12288, 2) * 2
        assert any(w.layer_backward_s for w in windows[rank])
        assert all(len(w.layer_bytes) == 2 for w in windows[rank])
    for c in workers:
        assert c.agent is not None
        c.agent.close()


def test_a_decision_heard_after_its_window_ends_applies_at_the_step_the_loop_names() -> None:
    """With the adapter's lead, a decision on window [0, w) that reaches rank 0 only once step
    w began (the earliest the coordinator can hear of the window) still applies at its step:
    the agreement sends it a boundary ahead."""
    w = 2
    base = Config(partition_bytes=4096, credit_bytes=8192, window_steps=w, tuner="none")
    fast = base.replace(partition_bytes=16384, credit_bytes=32768)
    loop = TuningLoop(config=base, tuner=ScriptedTuner([fast]), trigger=ThresholdTrigger(),
                      guard=False, lead_steps=decision_lead(w), lead_s=0.0)
    decision = loop.on_observation(observation(base, 100.0, 0, steps=w))
    assert decision is not None
    agent = TuningAgent(rank=0, num_workers=1, config=base, environ={})
    rank0 = Controller(config=base, rank=0, workers=1, bandwidth=1e9,
                       broadcast=lambda v: lambda: v, agent=agent)
    run_steps([rank0], w + 1)
    agent._on_decision(decision)
    run_steps([rank0], decision.step - (w + 1))
    assert rank0.config == base
    assert run_steps([rank0], 1) == [[True]] and rank0.config == fast
    agent.close()


def test_a_step_that_traced_is_warmup_for_the_tuner() -> None:
    windows: list[Window] = []
    agent = TuningAgent(rank=0, num_workers=1, config=Config(window_steps=3, tuner="none"),
                        environ={})
    agent._collector._on_window = windows.append
    c = Controller(config=agent.config, rank=0, workers=1, bandwidth=1e9,
                   broadcast=lambda v: lambda: v, agent=agent)
    infos = (TensorInfo("t0", 8192, 4),)
    for seconds in (5.0, 0.1, 0.1):
        step = c.begin()
        c.plan_for(infos)  # marks the step as traced
        if seconds < 1:
            c._traced = False
        c.end(step, seconds, 8)
    (w,) = windows
    assert (w.steps, w.warmup_steps) == (2, 1) and w.elapsed_s == pytest.approx(0.2)
    agent.close()


def test_file_barrier_waits_for_every_worker(tmp_path: Path) -> None:
    done: list[int] = []
    late = threading.Thread(target=lambda: (time.sleep(0.3), file_barrier(tmp_path, 1, 2),
                                            done.append(1)))
    late.start()
    began = time.monotonic()
    file_barrier(tmp_path, 0, 2)
    assert time.monotonic() - began >= 0.25  # it waited for worker 1
    late.join(5)
    assert done == [1]
    with pytest.raises(ConfigError, match=r"only 2 of 3 workers reached the barrier"):
        file_barrier(tmp_path, 0, 3, timeout=0.2)


def test_steps_between_sample_counter_reads_get_the_last_rate_and_the_total_stays_exact() -> None:
    c = Controller(config=Config(window_steps=4), rank=0, workers=1, bandwidth=1e9,
                   broadcast=lambda v: lambda: v)
    batches = [8] * 6 + [3] + [8] * 5  # a short batch inside the second window
    total = {"n": 0, "reads": 0}
    recorded: list[int] = []
    end = c.end

    def record(step: Any, seconds: float, samples: int) -> None:
        recorded.append(samples)
        end(step, seconds, samples)

    def read() -> int:
        total["reads"] += 1
        return total["n"]

    c.end = record  # type: ignore[method-assign]
    fn = SteppedFunction(c, lambda: (lambda: None), read, can_sample=lambda: False)
    reads = total["reads"]
    for n in batches:
        total["n"] += n
        fn()
    assert sum(recorded) == sum(batches)
    # read at steps 0 and 1 (they agree), then at 3 (a window's end) and 7, which finds 3
    # samples fewer than given: step 7 gets what is left; then steps 8 and 9 until two agree
    assert recorded == [8, 8, 8, 8, 8, 8, 8, 3, 8, 8, 8, 8]
    assert total["reads"] - reads == 7  # steps 0, 1, 3, 7, 8, 9, 11


def test_a_windows_link_rate_is_its_bytes_over_the_time_the_link_was_busy() -> None:
    """Sampled steps stamp when each gradient is ready and when each collective's result is
    there; the link was busy for the union of [last gradient of a block ready, its result],
    and the stamped steps' bytes over that time is the window's rate, not bytes over step
    time; steps not stamped add to neither, and a window before the first stamped step reads
    bytes over step time. A traced step sends no bytes of steady state."""
    windows: list[Window] = []
    agent = TuningAgent(rank=0, num_workers=2, config=Config(window_steps=4, tuner="none"),
                        environ={})
    agent._collector._on_window = windows.append
    c = Controller(config=agent.config, rank=0, workers=2, bandwidth=1e9,
                   broadcast=peers_agree(2), agent=agent, sample_every=2,
                   stamping=True)
    infos = (TensorInfo("t0", 4096, 4, rank=2), TensorInfo("t1", 4096, 4, rank=2))
    for n in range(12):
        step = c.begin()
        c.sample(step.sample)
        if n == 0:
            c.plan_for(infos)  # traces: warm-up
        elif step.sample and n >= 4:
            stamps = c.stamps()
            assert stamps is not None
            stamps.stamp_start(10.0)
            stamps.stamp(infos, 0, 10.01)
            stamps.stamp(infos, 1, 10.02)
            stamps.done(infos, (0,), 10.03)  # busy 10.01-10.03 and 10.02-10.05: 0.04 s
            stamps.done(infos, (0, 1), 10.05)
        c.end(step, 0.1, 8)
    stats = agent.statistics()  # what a user reads is what the tuner got
    assert (stats.steps, stats.window, stats.warmup_steps, stats.sampled_steps) == (12, 4, 1, 4)
    assert stats.step_time_s == pytest.approx(0.1) and stats.samples_per_s == pytest.approx(80)
    assert stats.bytes_per_s == pytest.approx(8192 / 0.1)
    agent.close()
    first, second, third = windows
    assert first.warmup_steps == 1 and first.bytes_up == 3 * 8192
    assert first.bandwidth_up == pytest.approx(8 * 8192 / 0.1)  # no stamps yet: step time
    assert second.bytes_up == 4 * 8192  # steps 5 and 7 stamped, 4 and 6 not
    assert second.bandwidth_up == pytest.approx(8 * 8192 / 0.04)
    assert third.bandwidth_up == pytest.approx(8 * 8192 / 0.04)

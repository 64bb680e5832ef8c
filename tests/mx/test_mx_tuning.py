"""Live tuning in the MXNet adapter, without processes: the step feed, layer times, decisions.

The feed (``autobyte_mx._tuning.Tuning``) is driven here exactly as the kvstore drives it, into
a real ``TuningAgent`` that hosts a real coordinator on 127.0.0.1 (one worker), so the windows
it produces are checked where the tuner sees them: in the decision log.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from conftest import skip_without_mxnet

from common.agreement import Agreement, vector_length
from common.config import Config
from common.control import TuningAgent
from common.decision_log import read_log
from common.testing import RecordingAgent
from common.testing.mx import RecordingTransport
from common.testing.tuners import ScriptedTuner

skip_without_mxnet()

from autobyte_mx._stats import StepRecorder  # noqa: E402
from autobyte_mx._tuning import Tuning  # noqa: E402
from common.errors import ConfigError  # noqa: E402
from common.stats import comm_factor  # noqa: E402

# forward order: dense0 (weight, bias), dense1 (weight, bias), dense2 (weight, bias)
TENSORS = [("net_dense0_weight", 76800), ("net_dense0_bias", 1200),
           ("net_dense1_weight", 240000), ("net_dense1_bias", 800),
           ("net_dense2_weight", 8000), ("net_dense2_bias", 40)]
# backward order: dense2 ready first, dense0 last (seconds on one clock)
READY = {"net_dense2_bias": 10.000, "net_dense2_weight": 10.001, "net_dense1_weight": 10.004,
         "net_dense1_bias": 10.005, "net_dense0_bias": 10.011, "net_dense0_weight": 10.012}
STEP_S = 0.05
BATCH = 32


def test_layers_are_blocks_in_forward_order() -> None:
    agent = RecordingAgent()
    Tuning(agent, Config(tuner="none")).set_layers(TENSORS)
    assert agent.calls == [("layers", [78000, 240800, 8040])]


def test_layer_times_need_every_layer() -> None:
    tuning = Tuning(RecordingAgent(), Config(tuner="none"))
    tuning.set_layers(TENSORS)
    times = tuning.layer_times(READY)
    assert times is not None
    assert times.tolist() == pytest.approx([0.007, 0.004, 0.004])
    missing = {k: v for k, v in READY.items() if not k.startswith("net_dense1")}
    assert tuning.layer_times(missing) is None


COMM_S = 0.02  # the link was busy 20 of the 50 ms


def _feed(tuning: Tuning, steps: range, config: Config, *, t0: float = 100.0) -> None:
    for step in steps:
        done = t0 + step * STEP_S
        ready = {k: v + done for k, v in READY.items()}
        tuning.step(step, config, done=done, issue_s=0.001, samples=BATCH, ready=ready,
                    nbytes=326840, comm_s=COMM_S)


def test_feed_step_time_is_between_completions_and_switches_follow_the_steps() -> None:
    agent = RecordingAgent()
    first = Config(tuner="none")
    tuning = Tuning(agent, first, sample_every=2)
    tuning.set_layers(TENSORS)
    tuning.set_layers(list(TENSORS))  # unchanged: not sent again
    _feed(tuning, range(1, 5), first)
    second = first.replace(partition_bytes="64KiB", credit_bytes="256KiB")
    _feed(tuning, range(5, 7), second)
    kinds = [k for k, _ in agent.calls]
    assert kinds == ["layers", "step", "step", "step", "step", "config", "step", "step"]
    steps = [v for k, v in agent.calls if k == "step"]
    assert steps[0][2] == 0.001  # no previous completion: the issue interval
    assert all(s[2] == pytest.approx(STEP_S) for s in steps[1:])
    assert [s[1] for s in steps] == [BATCH] * 6
    assert all(s[3]["layer_backward_s"] is not None for s in steps)  # all stamped
    assert ("config", (second, 5)) in agent.calls
    assert steps[1][3]["bytes_up"] == steps[1][3]["bytes_down"] == 326840
    assert all(s[3]["comm_s"] == COMM_S for s in steps)
    # a gap in the steps (one was lost) does not produce a two-step interval
    _feed(tuning, range(8, 9), second)
    assert agent.calls[-1][1][2] == 0.001


def test_a_window_last_step_is_sampled_under_a_new_configuration_else_once_a_second() -> None:
    """Per-tensor timing costs milliseconds a sampled step whatever the step's length: by
    default a window's last step (the first window, steps 1-9, has one too) when the
    configuration is new, else once a second; every ``sample_every`` steps when the caller
    says."""
    now = [0.0]
    tuning = Tuning(RecordingAgent(), Config(tuner="none", window_steps=10),
                    clock=lambda: now[0])
    config = Config(tuner="none", window_steps=10)

    def sampled(steps: range, step_s: float, run: Config = config) -> list[int]:
        out = []
        for step in steps:
            now[0] += step_s
            if tuning.sampled(step, run):
                out.append(step)
            now[0] += 5.0  # asked again within the step: the same answer
            assert tuning.sampled(step, run) == (out[-1:] == [step])
            now[0] -= 5.0
        return out

    assert sampled(range(1, 40), 0.5) == [9, 19, 29, 39]  # 5 s windows: every one
    assert sampled(range(40, 100), 0.04) == [69, 99]  # 0.4 s windows: once a second
    other = config.replace(partition_bytes="64KiB")
    # new: at once, then once a second
    assert sampled(range(100, 230), 0.04, other) == [109, 139, 169, 199, 229]
    fixed = Tuning(RecordingAgent(), Config(tuner="none"), sample_every=3)
    assert [s for s in range(1, 7) if fixed.sampled(s, config)] == [2, 5]
    for bad in (0, 2.5, True, "2"):
        with pytest.raises(ConfigError, match="sample_every must be an int >= 1"):
            Tuning(RecordingAgent(), Config(tuner="none"), sample_every=bad)  # type: ignore[arg-type]


def test_only_steps_with_gradient_stamps_carry_layer_times() -> None:
    agent = RecordingAgent()
    tuning = Tuning(agent, Config(tuner="none"))
    tuning.set_layers(TENSORS)
    _feed(tuning, range(1, 3), Config(tuner="none"))
    tuning.step(3, Config(tuner="none"), done=200.0, issue_s=0.001, samples=BATCH, ready={},
                nbytes=0)
    steps = [v for k, v in agent.calls if k == "step"]
    assert [s[3]["layer_backward_s"] is not None for s in steps] == [True, True, False]


def test_recorder_hands_complete_steps_once_in_order_and_keeps_them_for_step_stats() -> None:
    rec = StepRecorder()
    config = Config(tuner="none")
    rec.begin_step(1, config, 8)
    rec.issued(1, 2)
    rec.begin_step(2, config, 8, at=rec._clock())
    rec.issued(2, 1)
    rec.chunks([(2, "b", 0, 0, 100, 1.0, 1.1, 1.5)])
    rec.ready(2, "b", 1.0)
    assert rec.finished() == []  # step 1 is incomplete and holds step 2 back
    rec.chunks([(1, "a", 0, 0, 100, 0.5, 0.6, 0.9), (1, "a", 1, 0, 50, 0.5, 0.7, 1.0)])
    rec.ready(1, "a", 0.5)
    rec.begin_step(3, config, 8)
    got = rec.finished()
    assert [(r.step, r.nbytes, r.done, r.ready) for r in got] == [
        (1, 150, 1.0, {"a": 0.5}), (2, 100, 1.5, {"b": 1.0})]
    assert rec.finished() == []
    stats = rec.drain()
    assert [s.step for s in stats] == [1, 2] and stats[0].bytes_up == 150
    assert len(stats[0].chunks) == 2 and stats[0].samples == 8


def test_step_stats_are_the_last_thousand_steps_however_many_the_feed_has_taken() -> None:
    rec = StepRecorder()
    config = Config(tuner="none")
    for step in range(1, 1204):
        rec.begin_step(step, config, 8)
        rec.issued(step, 1)
        rec.closed(step, 1, float(step))
        if step <= 1200:
            rec.finished()  # the feed has taken all but the last three (still open)
    steps = [s.step for s in rec.drain()]
    last = 1202  # the last step whose successor began (its end is known)
    assert steps == list(range(last - 999, last + 1))  # every worker returns the same


def test_recorder_step_timed_as_a_whole_completes_without_rows_bytes_or_busy_time() -> None:
    rec = StepRecorder()
    config = Config(tuner="none")
    rec.begin_step(1, config, 8)
    rec.issued(1, 3)
    rec.closed(1, 2, 0.8)
    rec.begin_step(2, config, 8)
    assert rec.finished() == []  # one of its three blocks is still out
    rec.closed(1, 1, 0.9)
    (step,) = rec.finished()
    assert (step.step, step.done, step.nbytes, step.comm_s, step.raw) == (1, 0.9, 0, 0.0, [])


def test_recorder_passes_over_a_step_that_lost_a_chunk_record() -> None:
    rec = StepRecorder()
    config = Config(tuner="none")
    for step in range(1, 12):
        rec.begin_step(step, config, 1)
        rec.issued(step, 1)
        if step != 2:
            rec.chunks([(step, "a", 0, 0, 10, 0.0, 0.0, float(step))])
    assert [r.step for r in rec.finished()] == [1]  # step 2 holds the rest back ...
    for step in range(12, 40):
        rec.begin_step(step, config, 1)
        rec.issued(step, 1)
        rec.chunks([(step, "a", 0, 0, 10, 0.0, 0.0, float(step))])
    handed = [r.step for r in rec.finished()]
    assert handed[0] == 3 and 2 not in handed  # ... until it is far behind


def test_feed_windows_reach_the_coordinator_and_its_decision_becomes_the_proposal(
        tmp_path: Path) -> None:
    """A real agent hosting a real coordinator (one worker, 127.0.0.1) with a scripted tuner:
    the windows in the decision log carry what the feed measured, and the tuner's decision
    comes back through the step agreement at its step, once."""
    log = tmp_path / "decisions.jsonl"
    start = Config(tuner="bayesian", window_steps=5, partition_bytes="4KiB",
                   credit_bytes="4KiB")
    fast = start.replace(partition_bytes="256KiB", credit_bytes="1MiB")
    agent = TuningAgent(rank=0, num_workers=1, config=start, model="mlp", arch="ps",
                        tuner=ScriptedTuner([fast]), decision_log=log, lead_steps=5, lead_s=0.0,
                        guard=False)
    try:
        assert agent.enabled and agent.coordinator is not None
        tuning = Tuning(agent, start, sample_every=1)
        tuning.set_layers(TENSORS)
        agreement = Agreement(rank=0, workers=1, config=start, due=agent.due)
        proposals: dict[int, Config] = {}
        config, deadline, step = start, time.monotonic() + 20, 1
        while step < 40 or not proposals:
            assert time.monotonic() < deadline, f"no decision came back; log: {read_log(log)}"
            _feed(tuning, range(step, step + 1), config)
            proposal = agreement.take(agreement.vector(step, due_at=step + 1)).config
            if proposal is not None:
                proposals[step + 1] = proposal
                config = proposal  # what the kvstore does one step later, on every worker
            step += 1
            time.sleep(0.01)  # let the coordinator's thread answer within the lead
    finally:
        agent.close()
    assert list(proposals.values()) == [fast]
    records = read_log(log)
    decided = [r for r in records if r["type"] == "window" and r.get("decision_id")]
    assert decided and decided[0]["action"] == "explore"
    assert list(proposals) == [decided[0]["target_step"]]  # switched at the decision's step
    windows = [r for r in records if r["type"] == "window"]
    first = windows[0]
    assert (first["first_step"], first["last_step"], first["steps"]) == (1, 4, 3)  # 1 warm-up
    assert first["speed"] == pytest.approx(BATCH / STEP_S, rel=1e-6)
    obs = first["observation"]
    assert obs["arch"] == "ps" and obs["model"] == "mlp" and obs["num_layers"] == 3
    assert obs["layer_bytes"] == [78000, 240800, 8040]
    assert np.allclose(obs["layer_backward_s"], [[0.007, 0.004, 0.004]])
    # bytes of all 4 steps (the warm-up step's too) over the time the link was busy
    assert obs["bandwidth_up"][0] == pytest.approx(8 * 326840 * 4 / (4 * COMM_S), rel=1e-6)
    after = [w for w in windows if w["first_step"] >= next(iter(proposals))]
    assert after and after[0]["config"]["partition_bytes"] == 256 * 1024
    assert after[0]["observation"]["layer_bytes"] == [78000, 240800, 8040]


@pytest.mark.parametrize("rank", [0, 1])
def test_the_control_key_asks_for_the_next_step_and_only_rank0_sends_it(rank: int) -> None:
    """The control key's vector of step s carries the decision due at s + 1 (it is applied
    when step s + 1 begins) and rank 0's plan head; other ranks ask too (draining their
    inbox) but send neither."""
    import mxnet as mx

    from autobyte_mx import _engine
    from autobyte_mx._control import ControlKey

    config = Config(tuner="none")
    fast = config.replace(partition_bytes="256KiB", credit_bytes="1MiB")
    agent = RecordingAgent()
    agent.decisions[8] = fast
    transport = RecordingTransport()
    key = ControlKey(Agreement(rank=rank, workers=2, config=config, due=agent.due),
                     transport=transport, threshold=None)  # type: ignore[arg-type]
    key._array = mx.nd.zeros((vector_length(1),))
    key._array.wait_to_read()  # as after the handshake
    key._view = _engine.host_view(key._array)
    key.send(7, head_bytes=4096 if rank == 0 else None, priority=0)
    assert [s for k, s in agent.calls if k == "due"] == [8]
    (vector,) = transport.pushed
    other = Agreement(rank=1 - rank, workers=2, config=config)
    summed = [a + b for a, b in zip(other.vector(7, due_at=8, payload_len=1), vector,
                                    strict=True)]
    agreed = Agreement(rank=1, workers=2, config=config).take(summed)
    assert agreed.config == (fast if rank == 0 else None)
    assert agreed.payload == ((4096,) if rank == 0 else None)


def test_a_steps_busy_time_is_the_union_of_its_transfer_intervals() -> None:
    rec = StepRecorder()
    rec.begin_step(1, Config(tuner="none"), 8)
    rec.issued(1, 3)
    rec.chunks([(1, "a", 0, 0, 100, 0.0, 1.0, 2.0), (1, "a", 1, 1, 100, 0.0, 1.5, 2.5),
                (1, "b", 0, 2, 100, 0.0, 4.0, 4.5)])
    rec.ready(1, "a", 0.5)
    rec.begin_step(2, Config(tuner="none"), 8)
    (step,) = rec.finished()
    assert step.comm_s == pytest.approx(2.0) and step.ready == {"a": 0.5}
    assert rec.drain()[0].comm_s == pytest.approx(2.0)


def test_the_bytes_reported_are_what_the_servers_links_carry() -> None:
    """Every worker's push crosses a server's link: with 4 workers and 2 servers each server
    link carries twice a worker's bytes in the busy time, so the bytes the agent gets (over
    the busy time: the window's link rate) are twice what the worker pushed, as the simulator
    and the meta-network's features count a parameter server's link."""
    agent = RecordingAgent()
    tuning = Tuning(agent, Config(tuner="none"), link_factor=comm_factor("ps", 4, 2))
    tuning.set_layers(TENSORS)
    _feed(tuning, range(1, 3), Config(tuner="none"))
    steps = [call[3] for name, call in agent.calls if name == "step"]
    assert steps and all(kw["bytes_up"] == kw["bytes_down"] == 2 * 326840 for kw in steps)
    assert all(kw["comm_s"] == COMM_S for kw in steps)
    assert comm_factor("ps", 2, 4) == 1.0 and comm_factor("allreduce", 4, 1) == 1.5

"""``autobyte meta collect``: decision logs of real runs -> testbed samples (no framework).

The log is hand-written with the coordinator's own record format (DecisionLog + Observation),
so the conversion is checked against exactly what a job writes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from common.bench._collect import (
    samples_from_log,
    samples_from_logs,
    sweep_configs,
    sweep_plan,
    visits,
)
from common.cli import main
from common.config import Config
from common.decision_log import DecisionLog
from common.errors import ConfigError
from common.meta import Dataset
from common.progress import NATIVE
from common.stats import Observation

K = 1024
A = Config(partition_bytes=64 * K, credit_bytes=256 * K)
B = Config(partition_bytes=K * K, credit_bytes=K * K)


def _obs(config: Config, speeds: tuple[float, float], first: int, *,
         layers: bool = True, workers: int = 2, steps: int = 5) -> Observation:
    return Observation(
        window=first, first_step=first, last_step=first + steps - 1, steps=steps,
        config=config,
        model="demo_cnn", arch="allreduce", num_workers=workers, num_layers=2,
        ranks=tuple(range(len(speeds))), speed_per_worker=speeds,
        bandwidth_up=(90e6 + first, 110e6 + first)[:len(speeds)],  # each window its own
        bandwidth_down=(80e6, 120e6)[:len(speeds)],
        layer_backward_s=((0.01, 0.03), (0.03, 0.05))[:len(speeds)] if layers else ((), ()),
        layer_bytes=(1000, 3000), step_time_s=64 / sum(speeds))


def _window(log: DecisionLog, obs: Observation, action: str = "stay") -> None:
    log.write("window", {"window": obs.window, "first_step": obs.first_step,
                         "last_step": obs.last_step, "steps": obs.steps, "config": obs.config,
                         "speed": obs.speed, "speed_per_worker": obs.speed_per_worker,
                         "workers": len(obs.ranks), "observation": obs, "action": action,
                         "reason": "test"})


def write_log(path: Path) -> Path:
    with DecisionLog(path) as log:
        log.write("job", {"num_workers": 2, "config": A.replace(window_steps=5),
                          "tuner": "observe"})
        _window(log, _obs(A, (100.0, 100.0), 0))        # first of the log: skipped
        _window(log, _obs(A, (150.0, 170.0), 5))        # sample 1
        _window(log, _obs(B, (90.0, 90.0), 10))         # first after a switch: skipped
        _window(log, _obs(B, (200.0, 220.0), 15))       # sample 2
        _window(log, _obs(B, (10.0,), 20), "skip")      # incomplete: skipped
        _window(log, _obs(B, (50.0, 50.0), 25, layers=False))  # untimed: sample 3
        log.write("event", {"event": "bye"})
        _window(log, _obs(A, (1.0, 1.0), 30))           # switch back: skipped
        _window(log, _obs(A, (120.0, 140.0), 35))       # sample 4
        _window(log, _obs(A, (60.0, 60.0), 40, steps=2))  # cut short by a switch: skipped
        _window(log, _obs(B, (1.0, 1.0), 42, steps=3))  # first after a switch: skipped
        # window 45 (the switch to A) never logged: 50 measured all its steps: sample 5
        _window(log, _obs(A, (300.0, 300.0), 50))
        log.write("window", {**_obs(B, (1.0, 1.0), 60).to_dict(), "config": B,
                             "speed": 2.0, "steps": 3, "action": "stay"})  # retrace: skipped
    return path


def test_a_log_becomes_samples_without_trace_and_switch_windows(tmp_path: Path) -> None:
    got = samples_from_log(write_log(tmp_path / "job1" / "decisions-x.jsonl"))
    assert got.windows == 12 and len(got.samples) == 5 and got.recovered == 1
    assert [(s.partition_bytes, s.credit_bytes, s.speed) for s in got.samples] == [
        (64 * K, 256 * K, 320.0), (K * K, K * K, 420.0), (K * K, K * K, 100.0),
        (64 * K, 256 * K, 260.0), (64 * K, 256 * K, 600.0)]
    assert got.samples[2].job == got.samples[1].job  # untimed: the job as last measured
    assert got.skipped == {"first window of the log (trace, warm-up)": 1,
                           "first window after a switch (switch, retrace)": 4,
                           "partial window (cut short by a switch)": 1,
                           "skipped by the coordinator (incomplete)": 1}
    job = got.samples[0].job
    assert job.layer_backward_s == pytest.approx((0.02, 0.04))  # mean over workers
    assert job.layer_bytes == (1000, 3000) and job.workers == 2 and job.arch == "allreduce"
    assert job.bandwidth_up_bps == pytest.approx(100e6 + 5)  # the best of windows 0 and 5
    assert job.bandwidth_down_bps == pytest.approx(100e6)
    # the job as the tuner saw it: the best link of the last 8 windows with statistics
    # (5, 10, 15, 30, 35, 40, 42, 50; 0 has left, 20 was incomplete, 25 had no layers)
    assert got.samples[4].job.bandwidth_up_bps == 100e6 + 50
    assert got.samples[3].job.bandwidth_up_bps == 100e6 + 35
    assert job.batch_size == 32  # speed x step time / workers
    assert got.runs == ["job1/decisions-x"] * 5
    assert "5 sample(s), 7 skipped" in got.describe()
    assert "1 of the samples follow a switch window the log lacks" in got.describe()


def test_dataset_keeps_runs_and_pairs_windows_as_deployed(tmp_path: Path) -> None:
    write_log(tmp_path / "r1" / "decisions-a.jsonl")
    write_log(tmp_path / "r2" / "decisions-b.jsonl")
    got = samples_from_logs([tmp_path])
    data = Dataset.from_samples(got.samples, source="testbed", runs=got.runs)
    assert data.runs() == ["r1/decisions-a", "r2/decisions-b"]
    # each timed window its own statistics; the untimed one shares the window's before
    assert len(data) == 10 and data.num_jobs == 8
    back = Dataset.load(data.save(tmp_path / "t.npz"))
    assert back.runs() == data.runs()
    one = back.select_runs("r2/*")
    assert one.runs() == ["r2/decisions-b"] and len(one) == 5
    assert back.select_runs("r2/*", keep=False).runs() == ["r1/decisions-a"]
    deployed = one.as_deployed()
    # every window's statistics score both configurations of its run, each at the mean
    # speed of its windows (A: 320, 260, 600; B: 420, 100)
    assert deployed.num_jobs == 4 and len(deployed) == 8
    for j in range(4):
        rows = deployed["sample_job"] == j
        assert deployed["partition_bytes"][rows].tolist() == [64 * K, K * K]
        assert deployed["speed"][rows].tolist() == pytest.approx([1180 / 3, 260.0])
        assert deployed.job(j) == one.job(j)
    np.testing.assert_allclose(deployed["speed"] * deployed["iteration_s"], 64.0)


def test_files_written_before_job_run_still_load(tmp_path: Path) -> None:
    with np.load("datasets/sim_holdout_v3.npz", allow_pickle=False) as f:
        columns = {k: f[k] for k in f.files if k != "job_run"}
    np.savez_compressed(tmp_path / "old.npz", **columns)  # as files before job_run
    data = Dataset.load(tmp_path / "old.npz")
    assert data.runs() == [] and set(data["job_run"].tolist()) == {""}
    assert data.as_deployed().num_jobs == data.num_jobs


def test_collect_command_writes_a_dataset(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    log = write_log(tmp_path / "decisions-c.jsonl")
    out = tmp_path / "t.npz"
    assert main(["meta", "collect", "--from-logs", str(log), "--out", str(out)]) == 0
    assert "5 samples" in capsys.readouterr().out
    data = Dataset.load(out)
    assert set(data["job_source"].tolist()) == {"testbed"}
    assert sorted(data["speed"].tolist()) == [100.0, 260.0, 320.0, 420.0, 600.0]


def test_bad_logs_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(ConfigError, match=r"nope\.jsonl: no such file or folder"):
        samples_from_logs([missing])
    with pytest.raises(ConfigError, match=r"nope\.jsonl: no such decision log"):
        samples_from_log(missing)
    garbage = tmp_path / "decisions-bad.jsonl"
    garbage.write_text("this is not json\n{also not\n")
    with pytest.raises(ConfigError, match=r"decisions-bad\.jsonl: no decision-log records"):
        samples_from_logs([garbage])
    binary = tmp_path / "decisions-bin.jsonl"
    binary.write_bytes(b"\xff\xfe\x00\x81" * 10)
    with pytest.raises(ConfigError, match=r"decisions-bin\.jsonl: not a readable decision log"):
        samples_from_log(binary)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="empty: a folder without decision logs"):
        samples_from_logs([empty])
    only_job = tmp_path / "decisions-job.jsonl"
    only_job.write_text(json.dumps({"type": "job", "v": 1}) + "\n")
    capsys.readouterr()
    assert main(["meta", "collect", "--from-logs", str(only_job), "--out",
                 str(tmp_path / "x.npz")]) == 2
    assert "no usable windows in" in capsys.readouterr().err
    assert not (tmp_path / "x.npz").exists()
    assert main(["meta", "collect", "--from-logs", str(only_job), "--out", "x.csv"]) == 2
    assert "--out must name a .npz file, got --out=x.csv" in capsys.readouterr().err


def test_sweep_plan_spreads_configurations_and_refuses_bad_values() -> None:
    configs = sweep_configs(12, np.random.default_rng(0))
    assert len(configs) == 13 and len(set(configs)) == 13
    assert configs.count(NATIVE) == 1  # native, measured as one of the candidates
    assert configs[0][0] > 16 * K  # the start is neither a small one nor native
    assert sum(p == 16 * K for p, _ in configs) == 2
    scheduled = [c for c in configs if c != NATIVE]
    parts = sorted({p for p, _ in scheduled if p > 16 * K})
    assert parts[0] <= 128 * K and parts[-1] >= 32 * K * K  # both ends of the space
    for p, c in scheduled:
        assert c % p == 0 and 1 <= c // p <= 16
    jobs = sweep_plan(frameworks=["tensorflow", "mxnet"], models=["cnn", "mlp"],
                      rates=["100mbit", "1gbit"])
    assert len(jobs) == 8 and len({j.name for j in jobs}) == 8
    by_name = {j.name: j for j in jobs}
    # a slow (communication-bound) job sweeps fewer configurations
    fast = by_name["tensorflow-cnn-1gbit"]
    assert len(by_name["mxnet-mlp-100mbit"].configs) < len(fast.configs)
    assert fast.steps == 15 * len(fast.configs)  # a switch window and two samples each
    longer = sweep_plan(frameworks=["tensorflow"], models=["cnn"], rates=["100mbit"],
                        sweep_steps=30)[0]
    assert longer.sweep_steps == 30 and longer.steps == 30 * len(longer.configs)
    # the same job draws the same configurations whatever else is planned
    alone = sweep_plan(frameworks=["mxnet"], models=["mlp"], rates=["100mbit"])
    assert alone[0].configs == by_name["mxnet-mlp-100mbit"].configs
    with pytest.raises(ConfigError, match=r"models must be some of .*'vgg'.* got \['vgg16'\]"):
        sweep_plan(frameworks=["tensorflow"], models=["vgg16"], rates=["1gbit"])
    with pytest.raises(ConfigError, match="frameworks must be some of"):
        sweep_plan(frameworks=["torch"], models=["cnn"], rates=["1gbit"])
    with pytest.raises(ConfigError, match="fastmbit"):
        sweep_plan(frameworks=["tensorflow"], models=["cnn"], rates=["fastmbit"])
    with pytest.raises(ConfigError, match=r"sweep_steps must be >= 10 .* got sweep_steps=9"):
        sweep_plan(frameworks=["tensorflow"], models=["cnn"], rates=["1gbit"], sweep_steps=9)
    with pytest.raises(ConfigError, match="max_configs must be >= 4"):
        sweep_plan(frameworks=["tensorflow"], models=["cnn"], rates=["1gbit"], max_configs=2)
    with pytest.raises(ConfigError, match="passes must be 1 or 2, got passes=3"):
        sweep_plan(frameworks=["tensorflow"], models=["cnn"], rates=["1gbit"], passes=3)


def test_a_second_pass_visits_every_configuration_again_in_reverse() -> None:
    assert visits(((1, 1), (2, 2), (3, 3)), 2) == ((1, 1), (2, 2), (3, 3), (2, 2), (1, 1),
                                                   (3, 3))
    once = sweep_plan(frameworks=["mxnet"], models=["mlp"], rates=["100mbit"], budget_s=300)[0]
    twice = sweep_plan(frameworks=["mxnet"], models=["mlp"], rates=["100mbit"], budget_s=300,
                       passes=2)[0]
    assert len(twice.configs) == 2 * twice.drawn  # each twice, in about the same time
    assert twice.drawn < once.drawn == len(once.configs) and twice.steps <= once.steps + 2 * 15
    assert all(a != b for a, b in itertools.pairwise(twice.configs))  # each visit switches

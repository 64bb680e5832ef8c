"""The evaluation's job plumbing without processes: sweep parsing, window maths, job specs.
(The real jobs run in tests/bench/test_bench_real.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from common.bench import JobRun, JobSpec, Window
from common.bench._jobs import _short
from common.config import Config
from common.control import make_tuner
from common.errors import ConfigError
from common.progress import NATIVE, openblas_core, parse_sweep, sweep_config, worker_env

K = 1024


def test_parse_sweep_checks_every_item() -> None:
    assert parse_sweep("64KiB:256KiB, 1MiB") == [(64 * K, 256 * K), (K * K, K * K)]
    assert parse_sweep("") == []
    with pytest.raises(ValueError, match=r"'64KiB:16KiB'.*credit"):
        parse_sweep("64KiB:16KiB")
    with pytest.raises(ValueError, match="'-1:4KiB'"):
        parse_sweep("-1:4KiB")


def test_sweep_config_switches_on_its_period_and_stops_at_the_end() -> None:
    sweep = [(1, 1), (2, 2), (3, 3)]
    assert [sweep_config(sweep, 10, s) for s in (5, 10, 20, 30, 40)] == \
        [None, (2, 2), (3, 3), None, None]
    assert sweep_config([], 10, 10) is None


def test_openblas_kernels_are_named_only_for_cpus_with_avx512(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512bw\n")
    assert openblas_core(str(cpuinfo)) == "SkylakeX"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512_fp16x\n")
    assert openblas_core(str(cpuinfo)) is None
    assert openblas_core(str(tmp_path / "missing")) is None
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")  # the user's choice is theirs
    env = worker_env()
    assert "OPENBLAS_CORETYPE" not in env and env["OMP_NUM_THREADS"] == "1"


def _window(first: int, last: int, speed: float, config: str, mean: float | None = None
            ) -> Window:
    return Window(first, last, speed, mean or speed, 0.01, config, "1gbit")


def test_job_run_measures_by_config_and_by_time() -> None:
    run = JobRun(JobSpec("j"), [
        _window(1, 5, 100.0, "a"), _window(6, 10, 200.0, "a"), _window(11, 15, 50.0, "b"),
        _window(16, 20, 300.0, "b"), _window(21, 25, 400.0, "b")], 1.0, None)
    assert run.by_config() == {"a": 200.0, "b": 350.0}  # first window after a switch dropped
    # 5 steps at each speed: total steps over total time
    assert run.mean_speed(first=1, last=10) == pytest.approx(10 / (5 / 100 + 5 / 200))
    assert run.mean_speed(first=100) != run.mean_speed(first=100)  # nan: no window


def test_job_spec_rejects_what_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="framework"):
        JobSpec("x", framework="torch")
    with pytest.raises(ConfigError, match="steps=5, window=5"):
        JobSpec("x", steps=5, window=5)
    with pytest.raises(ConfigError, match="sweep"):
        JobSpec("x", start=(K * K, K * K), sweep=((64 * K, 64 * K),))
    spec = JobSpec("x", sweep=((K * K, 4 * K * K), (64 * K, 64 * K)), baseline=False)
    assert spec.env(tmp_path)["AUTOBYTE_TUNER"] == "observe"
    assert "--sweep" in spec.command() and "--baseline" not in spec.command()
    Config.from_env(spec.env(tmp_path))  # every knob the job gets is valid
    shipped = JobSpec("x", tuner="meta", start=None).env(tmp_path)  # the adapter's own start
    assert "AUTOBYTE_PARTITION_BYTES" not in shipped and "AUTOBYTE_CREDIT_BYTES" not in shipped


def test_a_job_can_start_native(tmp_path: Path) -> None:
    env = JobSpec("x", start=NATIVE).env(tmp_path)
    assert not Config.from_env(env).scheduling
    assert not Config.from_env(env, start={"partition_bytes": "1MiB"}).scheduling
    assert Config.from_env(JobSpec("x", start=(K * K, K * K)).env(tmp_path)).scheduling


def test_short_config_labels() -> None:
    assert _short("partition=64KiB credit=256KiB (4x) scheduling=on") == "64KiB:256KiB"
    assert _short("baseline (MWMS)") == "baseline (MWMS)"


def test_observe_tuner_runs_no_search() -> None:
    assert Config(tuner="observe").tuner == "observe"
    assert make_tuner("observe") is None

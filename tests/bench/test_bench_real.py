"""``common.bench`` with real jobs: a sweep of fixed configurations, a rate change at a step of
the first job, and a second job joining it on the same testbed hosts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("tensorflow", reason="needs tensorflow==2.21 (pip install 'autobyte[tf]')")

from common.bench import JobSpec, run_jobs
from common.cli import main
from common.decision_log import read_log
from common.errors import FrameworkMissingError

pytestmark = [pytest.mark.framework, pytest.mark.distributed]

K = 1024


def test_sweep_rate_change_and_a_joining_job(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    sweep = ((64 * K, 64 * K), (K * K, 4 * K * K))
    first = JobSpec("sweeper", steps=30, window=5, start=sweep[0], sweep=sweep, sweep_steps=15)
    second = JobSpec("joiner", steps=10, window=5, baseline=True, join_at=10)
    runs = run_jobs([first, second], rate="1gbit", rate_changes=[(15, "300mbit")],
                    out=tmp_path, timeout=240, echo=False)
    sweeper, joiner = runs
    assert [w.last for w in sweeper.windows] == [5, 10, 15, 20, 25, 30]
    assert set(sweeper.by_config()) == {"64KiB:64KiB", "1MiB:4MiB"}
    assert all(w.speed > 0 and w.mean_speed > 0 and w.cpu_s_per_step > 0
               for w in sweeper.windows)
    rates = [w.rate for w in sweeper.windows]
    if os.geteuid() == 0:  # shaped: the rate in force changes when the first job reaches 15
        assert rates[:2] == ["1gbit", "1gbit"] and rates[-1] == "300mbit"
    else:
        assert set(rates) == {"loopback"}
    assert [w.config for w in joiner.windows] == ["baseline (MWMS)"] * 2
    # it started while the first job ran (at its step 10), not with it and not after it
    assert sweeper.began_s < joiner.began_s < sweeper.began_s + sweeper.elapsed_s
    # the sweep job's coordinator logged its windows (tuner 'observe'), with observations
    assert sweeper.log is not None and joiner.log is None
    windows = [r for r in read_log(sweeper.log) if r.get("type") == "window"]
    assert windows and all("observation" in r for r in windows)
    saved = (tmp_path / "sweeper" / "windows.csv").read_text().splitlines()
    assert saved[0].startswith("first,last,speed") and len(saved) == 1 + len(sweeper.windows)
    # the log records the link's rates, and the report compares configurations per rate
    links = [(r["step"], r["rate"]) for r in read_log(sweeper.log) if r.get("event") == "link"]
    capsys.readouterr()
    assert main(["report", str(tmp_path / "sweeper"), "--no-plot"]) == 0
    out = capsys.readouterr().out
    if os.geteuid() == 0:
        assert links[0] == (0, "1gbit") and links[1][1] == "300mbit" and links[1][0] >= 15
        assert "(link 1gbit)" in out and "(link 300mbit)" in out
    else:
        assert links == []


def test_mxnet_baseline_and_autobyte_jobs(tmp_path: Path) -> None:
    try:
        import autobyte_mx  # noqa: F401  (MXNet 1.9.1 needs its numpy shim)
    except FrameworkMissingError as exc:  # pragma: no cover - depends on the environment
        pytest.skip(f"needs mxnet==1.9.1 (pip install 'autobyte[mx]'): {exc}")
    runs = run_jobs([JobSpec("mx-base", framework="mxnet", steps=10, window=5, baseline=True),
                     JobSpec("mx-auto", framework="mxnet", steps=10, window=5, join_at=5)],
                    rate="1gbit", out=tmp_path, timeout=180, echo=False)
    base, auto = runs
    assert [w.config for w in base.windows] == ["baseline (dist_sync)"] * 2
    assert [w.config for w in auto.windows] == ["1MiB:4MiB"] * 2  # the JobSpec default
    assert all(w.speed > 0 for r in runs for w in r.windows)

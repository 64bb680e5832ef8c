"""benchmarks/window_medians.py: the medians per rate and configuration it prints."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_helpers import script_main

MAIN = script_main("window_medians")


def test_medians_per_rate_leave_out_the_warm_up_window(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "dyn-te-autobyte"
    job.mkdir()
    rows = [("1gbit", "native", 50.0), ("1gbit", "native", 600.0), ("1gbit", "native", 620.0),
            ("1gbit", "native", 640.0), ("100mbit", "64KiB:256KiB", 400.0),
            ("100mbit", "64KiB:256KiB", 500.0)]
    lines = ["first,last,speed,mean_speed,cpu_s_per_step,config,rate"]
    lines += [f"{i},{i},{s},{s},0.1,{c},{r}" for i, (r, c, s) in enumerate(rows)]
    (job / "windows.csv").write_text("\n".join(lines) + "\n")
    assert MAIN([str(job)]) == 0
    out = capsys.readouterr().out
    assert "1gbit native: 620.0 (3 windows)" in out  # the 50.0 warm-up left out
    assert "100mbit 64KiB:256KiB: 450.0 (2 windows)" in out


def test_a_folder_without_windows_is_named(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert MAIN([str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err

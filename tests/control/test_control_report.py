"""``autobyte report``: summary text and PNG from a decision log written by the real loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from control_helpers import observation

from common.cli import main
from common.config import Config
from common.control import TuningLoop
from common.control.testing import ScriptedTuner
from common.decision_log import DecisionLog, read_log
from common.trigger import ThresholdTrigger, knobs

A = Config(partition_bytes="1MiB", credit_bytes="4MiB")
B = A.replace(partition_bytes="256KiB", credit_bytes="1MiB")


def _write_log(path: Path) -> None:
    speed = {knobs(A): 100.0, knobs(B): 150.0}
    log = DecisionLog(path)
    log.write("job", {"num_workers": 2, "config": A, "tuner": "scripted",
                      "trigger": "ThresholdTrigger"})
    loop = TuningLoop(guard=False, config=A, tuner=ScriptedTuner([B]), trigger=ThresholdTrigger(),
                      decision_log=log)
    current, pending = A, None
    for w in range(8):
        if pending is not None and w * 10 >= pending.step:
            current, pending = pending.config, None
        pending = loop.on_observation(observation(current, speed[knobs(current)], w * 10)) \
            or pending
    log.write("event", {"event": "coordinator_stopped", "rejected": {"forged": 2}})
    log.close()


def test_report_prints_summary_and_writes_png(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "decisions.jsonl"
    _write_log(path)
    with path.open("a") as f:
        f.write("{truncated line\n")
    png = tmp_path / "out" / "plot.png"
    assert main(["report", str(path), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "job: 2 worker(s), tuner scripted" in out
    assert "speed: first 3 window(s) 116.7, last 3 150.0 samples/s (1.29x)" in out
    assert "256KiB/1MiB" in out and "<- best" in out.split("256KiB/1MiB")[1].split("\n")[0]
    assert "#1 at step 20: explore to 256KiB/1MiB" in out
    assert "rejected messages: {'forged': 2}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert len(read_log(path)) == 10


def test_report_default_plot_path_and_errors(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "d.jsonl"
    _write_log(path)
    assert main(["report", str(path)]) == 0
    assert (tmp_path / "d.png").is_file()
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["report", str(empty), "--no-plot"]) == 0
    assert "no measured windows" in capsys.readouterr().out

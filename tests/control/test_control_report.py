"""``autobyte report``: summary text and PNG from a decision log written by the real loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from control_helpers import observation

from common.cli import main
from common.config import Config
from common.control import TuningLoop
from common.decision_log import DecisionLog, read_log
from common.testing.tuners import ScriptedTuner
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
    (tmp_path / "out").mkdir()
    png = tmp_path / "out" / "plot.png"
    assert main(["report", str(path), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "job: 2 worker(s), tuner scripted" in out
    assert "speed: first 3 window(s) 116.7, last 3 150.0 samples/s (1.29x)" in out
    assert "steps 0..79 (job start): configurations compared under the same conditions" in out
    assert "256KiB/1MiB" in out and "<- best" in out.split("256KiB/1MiB")[1].split("\n")[0]
    assert "#1 explore to 256KiB/1MiB, took effect at step 20" in out
    assert "rejected messages: {'forged': 2}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert len(read_log(path)) == 10


def _window(first: int, config: Config, speed: float, **extra: Any) -> dict[str, Any]:
    return {"type": "window", "time": 1000.0 + first, "first_step": first,
            "last_step": first + 9, "config": config.to_dict(), "speed": speed,
            "action": "stay", **extra}


def _records(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    path = tmp_path / "decisions-1.jsonl"
    with DecisionLog(path) as log:
        for r in records:
            log.write(r.pop("type"), r)
    return path


def test_configurations_are_compared_only_under_the_same_link_rate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A configuration measured fast at 1gbit is not "best" against one measured at 100mbit."""
    path = _records(tmp_path, [
        {"type": "job", "time": 999.0, "num_workers": 2, "config": A.to_dict(), "tuner": "meta",
         "trigger": "ThresholdTrigger"},
        _window(0, A, 300.0), _window(10, A, 310.0), _window(20, B, 200.0),
        _window(30, B, 40.0), _window(40, A, 60.0),
        {"type": "event", "event": "link", "step": 0, "rate": "1gbit"},
        {"type": "event", "event": "link", "step": 30, "rate": "100mbit", "time": 1029.5}])
    assert main(["report", str(path), "--no-plot"]) == 0
    out = capsys.readouterr().out
    first, second = out.split("steps 30..49 (link 100mbit)")
    assert "steps 0..29 (link 1gbit)" in first
    assert "1MiB/4MiB" in first.split("<- best")[0].splitlines()[-1]
    assert "1MiB/4MiB" in second.split("<- best")[0].splitlines()[-1]  # 60 beats 40 there


def test_decisions_show_where_they_took_effect_and_flag_missed_predictions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    native = A.replace(scheduling=False)
    _records(tmp_path, [
        {"type": "job", "time": 999.0, "num_workers": 2, "config": A.to_dict(), "tuner": "meta",
         "trigger": "ThresholdTrigger"},
        _window(0, A, 100.0, decision_id=1, target_step=20, action="switch", reason="tuner",
                next_config=B.to_dict(),
                candidates=[{"config": B.to_dict(), "predicted": 745.0, "source": "model"}]),
        _window(10, A, 100.0), _window(20, B, 95.0), _window(30, B, 102.0),
        _window(40, B, 101.0, decision_id=2, target_step=60, action="explore", reason="guard",
                next_config=native.to_dict(), candidates=[]),
        _window(50, B, 100.0), _window(60, B, 100.0), _window(70, B, 100.0)])
    (tmp_path / "not-a-folder").write_text("")
    assert main(["report", str(tmp_path)]) == 0  # a folder: its newest log
    out = capsys.readouterr().out
    assert "missed by more than 10%: 1" in out
    assert "#1 switch to 256KiB/1MiB, took effect at step 20 - tuner" in out
    assert "predicted +645%, measured +0% against 100.0 samples/s before  MISSED" in out
    assert "#2 explore to native, planned for step 60, not applied - guard" in out
    assert (tmp_path / "decisions-1.png").stat().st_size > 10_000


def test_bad_input_is_refused_in_one_line(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "d.jsonl"
    _write_log(path)
    assert main(["report", str(path)]) == 0
    assert (tmp_path / "d.png").is_file()
    capsys.readouterr()
    cases = {
        str(tmp_path / "missing.jsonl"): "does not exist",
        str(tmp_path / "empty.jsonl"): "holds no decision records",
        str(tmp_path / "garbage.jsonl"): "holds no decision records",
        str(tmp_path / "binary.jsonl"): "not a decision log",
        str(tmp_path / "nowindow.jsonl"): "has no measured window",
        str(tmp_path / "nologs"): "a folder without decision logs",
    }
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "garbage.jsonl").write_text("hello\n[1, 2]\n")
    (tmp_path / "binary.jsonl").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    (tmp_path / "nowindow.jsonl").write_text('{"type": "job", "config": {}}\n')
    (tmp_path / "nologs").mkdir()
    for arg, message in cases.items():
        assert main(["report", arg, "--no-plot"]) == 2, arg
        err = capsys.readouterr().err
        assert err.startswith("autobyte report: error: ") and message in err, err
        assert err.count("\n") == 1, err
    assert main(["report", str(path), "--plot", str(tmp_path / "no" / "p.png")]) == 2
    assert "folder" in capsys.readouterr().err and not (tmp_path / "no").exists()

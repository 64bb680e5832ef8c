"""``autobyte demo``'s argument checks and summary (no processes: the real runs are in
tests/tf/test_tf_live_tuning.py and the README's demo)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from common.cli import main
from common.commands.demo import JobResult, phases_from_log, run_demo, summary_table
from common.config import Config
from common.errors import ConfigError

SLOW = Config(partition_bytes="16KiB", credit_bytes="16KiB").to_dict()
FAST = Config(partition_bytes="1MiB", credit_bytes="4MiB").to_dict()


@pytest.mark.parametrize(("changes", "message"), [
    ({"rates": "1gbit,100mbit,10mbit"}, "--rates must be one rate or two"),
    ({"rates": "fast"}, "--rates"),
    ({"steps": 10}, "--steps must be at least 4 windows"),
    ({"switch_step": 500}, "--switch-step must be in \\(0, 200\\)"),
    ({"start": "1KiB:1KiB"}, "--start partition must be between 4096"),
    ({"start": "1MiB:64KiB"}, "--start credit must be >= --start partition"),
    ({"tuner": "magic"}, "--tuner must be one of"),
])
def test_bad_arguments_are_refused_before_anything_starts(changes: dict[str, Any], message: str,
                                                         tmp_path: Path) -> None:
    args: dict[str, Any] = {"frameworks": ["tensorflow"], "steps": 200, "window": 5,
                            "rates": "1gbit,100mbit", "switch_step": None, "tuner": "meta",
                            "start": "16KiB:16KiB", "out": tmp_path, "timeout": 10.0}
    with pytest.raises(ConfigError, match=message):
        run_demo(**{**args, **changes})
    assert list(tmp_path.iterdir()) == []  # nothing launched, nothing written


def test_cli_reports_a_bad_argument_with_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--steps", "8"]) == 2
    assert "--steps must be at least 4 windows" in capsys.readouterr().err


def window(first: int, config: dict[str, Any], speed: float) -> dict[str, Any]:
    return {"type": "window", "first_step": first, "last_step": first + 4, "speed": speed,
            "config": config}


def test_phases_put_each_rates_first_window_against_its_final_configuration() -> None:
    records = [{"type": "job"}, window(0, SLOW, 900.0), window(5, SLOW, 100.0),
               window(10, FAST, 300.0), window(15, FAST, 320.0), window(20, FAST, 40.0),
               window(25, FAST, 150.0), window(30, FAST, 100.0), window(35, SLOW, 60.0),
               window(40, SLOW, 90.0), window(45, SLOW, 100.0),
               {"type": "window", "first_step": 50, "last_step": 54, "speed": None,
                "config": SLOW}]
    before, after = phases_from_log("mxnet", records, ["1gbit", "100mbit"], 25)
    assert (before.rate, before.first_step, before.last_step) == ("1gbit", 5, 25)  # cold 0-4
    assert before.start_speed == 100.0 and before.start_config.startswith("partition=16KiB")
    # the median of the FAST windows: the disturbed one (40) does not decide it
    assert before.end_config.startswith("partition=1MiB")
    assert (before.end_speed, before.end_windows) == (300.0, 3)
    # the window the rate changed in (25-29) is skipped: it ran partly at the old rate
    assert (after.rate, after.first_step, after.last_step) == ("100mbit", 30, 50)
    assert after.start_speed == 100.0 and (after.end_speed, after.end_windows) == (90.0, 3)
    table = summary_table([JobResult("mxnet", [before, after], True, None, None, 25)])
    assert "3.00x" in table and "0.90x" in table
    assert "weights equal on every worker: yes" in table


def test_without_a_rate_change_there_is_one_phase() -> None:
    (only,) = phases_from_log("tensorflow", [window(0, SLOW, 9.0), window(5, SLOW, 50.0),
                                             window(10, FAST, 80.0)], ["loopback"], None)
    assert (only.rate, only.start_speed, only.end_speed) == ("loopback", 50.0, 80.0)
    assert phases_from_log("tensorflow", [], ["loopback"], None) == []

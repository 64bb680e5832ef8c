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
    ({"rates": "1gbit,100mbit,10mbit"}, "rates must be one rate or two"),
    ({"rates": "fast"}, "rates"),
    ({"steps": 10}, "steps must be at least 4 windows"),
    ({"switch_step": 500}, "switch_step must be in \\(0, 200\\)"),
    ({"start": "1KiB:1KiB"}, "partition_bytes must be between 4096"),
    ({"start": "1MiB:64KiB"}, "credit_bytes must be >= partition_bytes"),
    ({"tuner": "magic"}, "tuner must be one of"),
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
    assert "steps must be at least 4 windows" in capsys.readouterr().err


def window(first: int, config: dict[str, Any], speed: float) -> dict[str, Any]:
    return {"type": "window", "first_step": first, "last_step": first + 4, "speed": speed,
            "config": config}


def test_phases_put_each_rates_first_window_against_its_last_two() -> None:
    records = [{"type": "job"}, window(0, SLOW, 100.0), window(5, SLOW, 110.0),
               window(10, FAST, 300.0), window(15, FAST, 320.0),
               window(20, FAST, 150.0), window(25, SLOW, 90.0), window(30, SLOW, 100.0),
               {"type": "window", "first_step": 35, "last_step": 39, "speed": None,
                "config": SLOW}]
    before, after = phases_from_log("mxnet", records, ["1gbit", "100mbit"], 20)
    assert (before.rate, before.first_step, before.last_step) == ("1gbit", 0, 20)
    assert before.start_speed == 100.0 and before.end_speed == 310.0
    assert before.start_config.startswith("partition=16KiB")
    assert before.end_config.startswith("partition=1MiB")
    assert (after.rate, after.first_step, after.last_step) == ("100mbit", 20, 35)
    assert after.start_speed == 150.0 and after.end_speed == 95.0  # a loss is shown as one
    table = summary_table([JobResult("mxnet", [before, after], True, None, None, 20)])
    assert "3.10x" in table and "0.63x" in table
    assert "weights equal on every worker: yes" in table


def test_without_a_rate_change_there_is_one_phase() -> None:
    (only,) = phases_from_log("tensorflow", [window(0, SLOW, 50.0), window(5, FAST, 80.0)],
                              ["loopback"], None)
    assert (only.rate, only.start_speed, only.end_speed) == ("loopback", 50.0, 65.0)
    assert phases_from_log("tensorflow", [], ["loopback"], None) == []

"""``autobyte simulate``: the printed figures are the simulator's; bad input exits 2."""

import re

import pytest

from common.cli import main
from common.config import Config
from common.sim import get_profile, simulate


def test_single_run_prints_iteration_speed_and_bound(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--model", "vgg16", "--workers", "8", "--arch", "ps",
                 "--bandwidth", "10gbit", "--partition", "4MB", "--credit", "16MB"])
    out = capsys.readouterr().out
    assert code == 0
    expected = simulate(get_profile("vgg16"),
                        Config(partition_bytes=4_000_000, credit_bytes=16_000_000),
                        workers=8, arch="ps", servers=8, bandwidth=10e9)
    assert f"iteration {expected.iteration_s * 1e3:.1f} ms" in out
    assert f"speed {expected.speed:.1f} samples/s" in out
    assert f"lower bound {expected.lower_bound_s * 1e3:.1f} ms" in out
    assert "8 workers, ps with 8 servers" in out and "native" in out


def test_credit_as_a_multiple_and_a_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--model", "resnet50", "--partition", "1MiB", "--credit", "8x",
                 "--bandwidth-schedule", "10gbit:0.2,3gbit:0.2", "--steps", "4"]) == 0
    out = capsys.readouterr().out
    assert "partition=1MiB credit=8MiB (8x)" in out and "schedule 10gbit:0.2,3gbit:0.2" in out


def test_grid_marks_the_fastest_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--model", "alexnet", "--grid", "--partitions", "256KiB,4MiB",
                 "--credits", "1,4,16"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if re.match(r"\s+[0-9.]+[KM]iB ", line)]
    assert len(rows) == 2 and all(len(r) == 4 for r in rows)
    cells = [cell for row in rows for cell in row[1:]]
    marked = [c for c in cells if c.endswith("*")]
    assert len(marked) == 1
    assert float(marked[0][:-1]) == max(float(c.rstrip("*")) for c in cells)
    assert "best: partition=" in out


@pytest.mark.parametrize(("argv", "needle"), [
    (["--credit", "3y"], "--credit must be a number with an optional unit"),
    (["--credit", "0.5x"], "--credit as a multiple"),
    (["--credit", "-2x"], "--credit as a multiple must be a number >= 1"),
    (["--credit", "-1MB"], "--credit must be positive, between 4096 (4KiB) and"),
    (["--partition", "-5"], "--partition must be positive, between 4096 (4KiB) and"),
    (["--partition", "1KiB"], "--partition must be between 4096 (4KiB) and"),
    (["--partition", "4MiB", "--credit", "1MiB"], "--credit must be >= --partition"),
    (["--workers", "0"], "--workers must be between 1 and 4096"),
    (["--workers", "100000"], "--workers must be between 1 and 4096"),
    (["--arch", "ps", "--servers", "0"], "--servers must be between 1 and 4096"),
    (["--bandwidth", "0gbit"], "--bandwidth must be > 0"),
    (["--bandwidth", "-1gbit"], "--bandwidth must be > 0"),
    (["--bandwidth-schedule", "10gbit"], "--bandwidth-schedule: bandwidth schedule must be"),
    (["--overhead", "1h"], "--overhead must be a duration"),
    (["--latency", "-1us"], "--latency must be >= 0"),
    (["--batch-size", "0"], "--batch-size must be between 1 and"),
    (["--compute-scale", "-1"], "--compute-scale must be > 0"),
    (["--grid", "--credits", "1,x"], "--credits must be comma-separated whole multiples"),
    (["--grid", "--credits", "32"], "--credits must be comma-separated whole multiples from 1 "
                                    "to 16"),
    (["--grid", "--partitions", "1KiB,4MiB"], "--partitions must be sizes between 4KiB"),
    (["--steps", "0"], "--steps must be between 1 and 100000"),
])
def test_bad_input_is_one_line_naming_the_flag_and_the_value(
        argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--model", "resnet50", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "", "nothing is printed before the flags are checked"
    assert err.startswith(f"autobyte simulate: error: {needle}"), err
    assert err.count("\n") == 1
    flag = needle.split()[0].rstrip(":")
    assert argv[argv.index(flag) + 1] in err, "the value the user typed"


def test_an_invalid_variable_is_named_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AUTOBYTE_PARTITION_BYTES", "abc")
    assert main(["simulate", "--model", "alexnet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autobyte simulate: error: AUTOBYTE_PARTITION_BYTES must be"), err
    assert "AUTOBYTE_PARTITION_BYTES='abc'" in err and err.count("\n") == 1
    monkeypatch.setenv("AUTOBYTE_PARTITION_BYTES", "2MiB")
    assert main(["simulate", "--model", "alexnet", "--credit", "1MiB"]) == 2
    err = capsys.readouterr().err
    assert "--credit must be >= AUTOBYTE_PARTITION_BYTES" in err, err


def test_one_worker_and_one_server_are_singular(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--model", "alexnet", "--workers", "1", "--arch", "ps",
                 "--servers", "1"]) == 0
    assert "cluster: 1 worker, ps with 1 server, links" in capsys.readouterr().out


def test_unknown_model_is_rejected_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--model", "lenet"])
    assert exc.value.code == 2
    assert "invalid choice: 'lenet'" in capsys.readouterr().err

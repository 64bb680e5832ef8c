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
    assert "8 server(s)" in out and "native" in out


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
    (["--credit", "3y"], "credit_bytes must be a number"),
    (["--credit", "0.5x"], "--credit as a multiple"),
    (["--workers", "0"], "--workers must be >= 1"),
    (["--arch", "ps", "--servers", "0"], "--servers must be >= 1"),
    (["--bandwidth", "0gbit"], "bandwidth must be > 0"),
    (["--bandwidth-schedule", "10gbit"], "RATE:SECONDS"),
    (["--overhead", "1h"], "--overhead must be a duration"),
    (["--partition", "1KiB"], "partition_bytes must be between"),
    (["--partition", "4MiB", "--credit", "1MiB"], "credit_bytes must be >= partition_bytes"),
    (["--grid", "--credits", "1,x"], "--credits must be"),
    (["--grid", "--credits", "32"], "credit_multiples must be ints between 1 and 16"),
    (["--steps", "0"], "steps must be an int"),
])
def test_bad_input_is_a_clear_error(argv: list[str], needle: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--model", "resnet50", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autobyte simulate: error:") and needle in err


def test_unknown_model_is_rejected_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--model", "lenet"])
    assert exc.value.code == 2
    assert "invalid choice: 'lenet'" in capsys.readouterr().err

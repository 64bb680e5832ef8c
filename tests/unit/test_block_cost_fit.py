"""benchmarks/block_cost_fit.py: the prior's block costs and link scale against the shipped runs."""

from __future__ import annotations

import pytest
from script_helpers import script_main

MAIN = script_main("block_cost_fit")


def test_every_arch_and_scale_gets_its_own_fit(capsys: pytest.CaptureFixture[str]) -> None:
    assert MAIN(["--costs", "1ms", "--cpu", "0", "--scales", "1,3"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(r[0], r[3]) for r in rows] == [("allreduce", "1"), ("allreduce", "3"),
                                            ("ps", "1"), ("ps", "3")]
    assert all(int(r[4]) > 100 for r in rows)  # configurations of the shipped sweep runs
    errors = {(r[0], r[3]): float(r[5]) for r in rows}
    assert errors[("ps", "1")] != errors[("ps", "3")]  # the scale reaches the simulator


@pytest.mark.parametrize("scales", ["0", "1,-2", "x"])
def test_a_bad_scale_is_named(scales: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        MAIN([f"--scales={scales}"])
    assert f"--scales takes numbers > 0, got {scales!r}" in capsys.readouterr().err

"""benchmarks/sweep_table.py: the latest run of each cell, and rows that do not fit the header."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_helpers import script_main

MAIN = script_main("sweep_table")
HEADER = "framework,model,rate,rounds,native,autobyte,autobyte/native,best_fixed/native,date"


def _csv(tmp_path: Path, *rows: str) -> str:
    path = tmp_path / "cells.csv"
    path.write_text("\n".join((HEADER, *rows)) + "\n")
    return str(path)


def test_each_cell_reads_its_latest_run(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    rates = ("100mbit", "300mbit", "1gbit", "3gbit")
    rows = [f"mxnet,cnn,{r},3,100,101,1.01,1.2,2026-12-01 10:00 UTC" for r in rates]
    rows.append("mxnet,cnn,1gbit,3,100,97,0.97,nan,2026-12-02 10:00 UTC")  # newer
    rows.append("mxnet,cnn,3gbit,3,100,90,0.90,nan,2026-11-30 10:00 UTC")  # older
    assert MAIN(["--csv", _csv(tmp_path, *rows)]) == 0
    out = capsys.readouterr().out
    assert "| MXNet | cnn | 1.010 | 1.010 | 0.970 | 1.010 | 1.200 |" in out
    assert "below 0.98: MXNet cnn 1gbit (0.970, 2026-12-02)" in out


def test_a_row_of_another_format_is_named_not_misread(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Two more fields than the header would shift every column after them."""
    path = _csv(tmp_path, "mxnet,cnn,1gbit,3,100,101,1.01,0.9,1.1,1.2,2026-12-01 10:00 UTC")
    assert MAIN(["--csv", path]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "9 columns" in err

"""benchmarks/rank_whatif.py: the shipped tuner's ranking of a logged job, rates as given."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from script_helpers import script_main

from common.config import Config
from common.stats import Observation

MAIN = script_main("rank_whatif")


def _window(first_step: int, rate: float) -> dict[str, object]:
    """A 2-worker native window of an 8-layer job, 10 MB of gradients."""
    obs = Observation(
        window=first_step, first_step=first_step, last_step=first_step + 9, steps=10,
        config=Config().replace(scheduling=False), model="unknown", arch="allreduce",
        num_workers=2, num_layers=8,
        ranks=(0, 1), speed_per_worker=(100.0, 100.0), bandwidth_up=(rate, rate),
        bandwidth_down=(rate, rate), layer_backward_s=((0.01,) * 8,) * 2,
        layer_bytes=(1_250_000,) * 8, step_time_s=0.32, samples_per_step=64.0)
    return {"type": "window", "observation": obs.to_dict()}


def test_the_ranking_is_scored_at_the_link_rate_given(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    job = tmp_path / "dyn-te-autobyte"
    job.mkdir()
    records = [{"type": "job"}, _window(0, 1e8), _window(10, 1e8), _window(30, 1e8)]
    (job / "decisions-1.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert MAIN([str(job), "--steps", "10", "--rates", "100gbit", "--top", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["as measured", "at 100gbit"]
    gains = [[float(g) for g in re.findall(r"\(([\d.]+)x\)", line)] for line in lines]
    assert all(len(g) == 3 and g == sorted(g, reverse=True) for g in gains)
    # the rate given is the one scored (whether the tuner ranks this toy job well is not the
    # script's to say): a link a thousand times faster moves every score
    assert gains[0] != gains[1]
    assert lines[0].split(":", 1)[1] != lines[1].split(":", 1)[1]


def test_a_job_folder_without_one_log_is_named(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert MAIN([str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err

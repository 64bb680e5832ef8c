"""The simulated dataset: reproducible from a seed, held-out split respected, ranges as
documented in datasets/SCHEMA.md, and a file round trip; bad files raise ModelFileError."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from common.errors import ModelFileError
from common.meta import HOLDOUT_BANDWIDTH_BPS, HOLDOUT_MODELS, Dataset, generate
from common.meta._dataset import COLUMNS
from common.tuners import NATIVE_BYTES


@pytest.fixture(scope="module")
def small() -> Dataset:
    return generate(jobs=6, seed=11, configs_per_job=3)


def test_same_seed_same_data(small: Dataset) -> None:
    again = generate(jobs=6, seed=11, configs_per_job=3)
    for name in COLUMNS:
        np.testing.assert_array_equal(small[name], again[name], err_msg=name)
    other = generate(jobs=2, seed=12, configs_per_job=3)
    assert not np.array_equal(other["speed"], small["speed"][:6])


def test_ranges_and_training_split(small: Dataset) -> None:
    assert len(small) == 24 and small.num_jobs == 6  # 3 configurations and native each
    assert set(small["job_source"].tolist()) == {"sim"}
    assert not set(small["job_model"].tolist()) & set(HOLDOUT_MODELS)
    low, high = HOLDOUT_BANDWIDTH_BPS
    assert np.all(small["job_workers"] >= 1) and np.all(small["job_workers"] <= 128)
    assert np.all(small["partition_bytes"] >= 4096)
    parts = small["partition_bytes"]
    assert np.all((parts <= 1024**3) | (parts == NATIVE_BYTES))
    multiples = small["credit_bytes"] / small["partition_bytes"]
    assert np.all((multiples >= 1) & (multiples <= 16))
    assert np.all(small["speed"] > 0)
    # the speed is the simulated iteration's: workers x batch / iteration time
    rows = small["sample_job"]
    per_step = small["job_workers"][rows] * small["job_batch_size"][rows]
    np.testing.assert_allclose(small["speed"] * small["iteration_s"], per_step, rtol=1e-9)
    for j in range(small.num_jobs):
        job = small.job(j)
        assert job.num_layers == small["job_layer_count"][j]
        rate = small["job_bandwidth_down_bps"][j]
        # measured with noise around a rate drawn outside the held-out band
        assert not (low * 1.2 < rate < high / 1.2)


def test_holdout_draws_only_held_out_conditions() -> None:
    data = generate(jobs=3, seed=0, holdout=True, grid=[(1 << 20, 1), (1 << 22, 4)])
    assert len(data) == 9  # the grid's two points and native
    models = set(data["job_model"].tolist())
    assert models <= set(HOLDOUT_MODELS) | {"random"}
    low, high = HOLDOUT_BANDWIDTH_BPS
    assert np.all(data["job_bandwidth_down_bps"] > low * 0.7)
    assert np.all(data["job_bandwidth_down_bps"] < high * 1.3)


def test_every_block_costs_what_blocks_cost_in_its_arch(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Jobs are simulated with the per-block cost of their arch (within the spread), not the
    simulator's default: with a block costing about a second, every step takes seconds."""
    from common.meta import _dataset

    monkeypatch.setattr(_dataset, "BLOCK_COST_S", {"allreduce": 1.0, "ps": 3.0})
    data = generate(jobs=4, seed=11, configs_per_job=2)
    rows = data["sample_job"]
    floor = np.where(data["job_arch"][rows] == "ps", 3.0, 1.0) / _dataset.BLOCK_COST_SPREAD
    assert np.all(data["iteration_s"] >= floor * 0.9)  # 0.9: the compute noise
    assert set(data["job_arch"].tolist()) == {"ps", "allreduce"}


def test_file_round_trip_and_selection(small: Dataset, tmp_path: Path) -> None:
    path = small.save(tmp_path / "d.npz")
    back = Dataset.load(path)
    for name in COLUMNS:
        np.testing.assert_array_equal(back[name], small[name], err_msg=name)
    assert back.job(2) == small.job(2)
    keep = np.array([True, False, True, False, False, True])
    part = small.select_jobs(keep)
    assert part.num_jobs == 3 and len(part) == 12
    assert part.job(1) == small.job(2)
    both = Dataset.concat([part, part])
    assert both.num_jobs == 6 and both.job(4) == small.job(2)


def test_bad_dataset_files(tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="no such dataset"):
        Dataset.load(tmp_path / "missing.npz")
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ModelFileError, match="not a readable dataset"):
        Dataset.load(bad)
    old = tmp_path / "old.npz"
    np.savez(old, schema_version=np.array(0))
    with pytest.raises(ModelFileError, match="schema version 0"):
        Dataset.load(old)


def test_testbed_rows_from_samples(small: Dataset) -> None:
    from common.meta import Sample

    job = small.job(0)
    rows = [Sample(job, 1 << 20, 4 << 20, 100.0), Sample(job, 1 << 22, 4 << 22, 120.0),
            Sample(small.job(1), 1 << 20, 1 << 20, 50.0)]
    data = Dataset.from_samples(rows)
    assert data.num_jobs == 2 and len(data) == 3
    assert set(data["job_source"].tolist()) == {"testbed"}
    assert data.job(0) == job
    np.testing.assert_allclose(data["speed"] * data["iteration_s"],
                               job.workers * job.batch_size * np.array([1, 1, 0])
                               + small.job(1).workers * small.job(1).batch_size
                               * np.array([0, 0, 1]))

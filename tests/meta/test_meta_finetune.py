"""Training with testbed data: fine-tuning a model on simulated plus (here synthetic) testbed
runs lowers its error on those runs without touching the original, and ``autobyte meta
train --init ... --holdout-runs`` keeps whole runs out and evaluates on them. Tiny networks:
behaviour, not quality."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("keras", reason="Keras 3 is not installed: the meta-network needs it")

from common.cli import main
from common.errors import ConfigError
from common.meta import (
    Dataset,
    MetaModel,
    Sample,
    evaluate,
    fine_tune,
    generate,
    leave_models_out,
    train,
)

TINY = {"width": 8, "lstm": 8, "dense": 16}


def _testbed(sim: Dataset, factor: float) -> Dataset:
    """Each sim job as a run of 'real' windows: slower by ``factor``, and each window with
    slightly different statistics (as measured windows are)."""
    samples, runs = [], []
    for j in range(sim.num_jobs):
        job = sim.job(j)
        rows = np.flatnonzero(sim["sample_job"] == j)
        for i, r in enumerate(rows):
            window = dataclasses.replace(job, bandwidth_up_bps=job.bandwidth_up_bps * (1 + i / 100))
            samples.append(Sample(window, int(sim["partition_bytes"][r]),
                                  int(sim["credit_bytes"][r]), float(sim["speed"][r]) * factor))
            runs.append(f"run{j}/decisions-x")
    return Dataset.from_samples(samples, source="testbed", runs=runs)


@pytest.fixture(scope="module")
def sim() -> Dataset:
    return generate(jobs=8, seed=5, configs_per_job=6)


@pytest.fixture(scope="module")
def base(sim: Dataset) -> MetaModel:
    return train(sim, epochs=2, size=TINY, seed=1)


def test_fine_tune_learns_the_testbed_and_leaves_the_model_alone(sim: Dataset,
                                                                 base: MetaModel) -> None:
    real = _testbed(sim, 0.5)
    assert len(real.runs()) == 8 and real.num_jobs == 56  # 6 configurations and native
    job = real.job(0)
    before = base.predict(job, [1 << 20], [4 << 20])
    old = evaluate(base, real.as_deployed())
    tuned = fine_tune(base, Dataset.concat([sim, real]).as_deployed(), epochs=12,
                      learning_rate=5e-3, testbed_weight=4.0, validation=0.0)
    new = evaluate(tuned, real.as_deployed())
    assert new.mape < 0.7 * old.mape, (old.describe(), new.describe())
    np.testing.assert_array_equal(base.predict(job, [1 << 20], [4 << 20]), before)
    assert tuned.vocabulary == base.vocabulary
    assert tuned.info["fine_tuned_on"]["testbed_samples"] == 56 * 7


def test_train_command_holds_out_runs(sim: Dataset, base: MetaModel, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    saved = base.save(tmp_path / "base.keras")
    sim_path = sim.save(tmp_path / "sim.npz")
    real_path = _testbed(sim, 0.5).save(tmp_path / "tb.npz")
    out = tmp_path / "tuned.keras"
    code = main(["meta", "train", "--init", str(saved), "--data", str(sim_path), "--data",
                 str(real_path), "--holdout-runs", "run1/*", "--holdout-runs", "run2/*",
                 "--epochs", "1", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "holding out 2 testbed run(s): run1/decisions-x, run2/decisions-x" in captured.err
    assert "held-out testbed runs (run1/*, run2/*): testbed, 2 runs as deployed: 98 rows" \
        in captured.out
    info = MetaModel.load(out).info["fine_tuned_on"]
    assert info["testbed_samples"] == 6 * 7 * 7  # 6 runs left, 7 windows x 7 configurations
    assert main(["meta", "train", "--data", str(real_path), "--holdout-runs", "nope*",
                 "--out", str(out)]) == 2
    assert "--holdout-runs ['nope*'] match no run" in capsys.readouterr().err
    assert main(["meta", "train", "--data", str(real_path), "--head-only",
                 "--out", str(out)]) == 2
    assert "--head-only fine-tunes an existing model" in capsys.readouterr().err
    code = main(["meta", "eval", "--model", str(out), "--data", str(real_path), "--runs",
                 "run3/*"])
    assert code == 0
    assert "run3/decisions-x: 49 rows, 7 jobs" in capsys.readouterr().out
    code = main(["meta", "eval", "--model", str(out), "--data", str(real_path), "--runs",
                 "run3/*", "--online", "ridge"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "replayed window by window, the same replay, not adapting: 5 rows" in captured.out
    assert "replayed window by window, adapting online (ridge): 5 rows" in captured.out
    assert main(["meta", "eval", "--model", str(out), "--data", str(real_path), "--runs",
                 "run3/*", "--online", "ridge,sgd"]) == 2
    assert "--online takes adaptation methods from ['ridge', 'adam']" in capsys.readouterr().err


def test_leave_models_out_never_trains_on_the_model_it_scores(
        sim: Dataset, base: MetaModel, monkeypatch: pytest.MonkeyPatch) -> None:
    import common.meta._train as train_module

    real = _testbed(sim, 0.5)
    models = set(real["job_model"].tolist())
    assert len(models) >= 2
    seen: list[set[str]] = []
    fine_tune_for_real = train_module.fine_tune

    def spy(model: MetaModel, data: Dataset, **kw: object) -> MetaModel:
        seen.append(set(data["job_model"].tolist()))
        return fine_tune_for_real(model, data, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(train_module, "fine_tune", spy)
    rows = leave_models_out(base, real, epochs=1)
    order = list(dict.fromkeys(real["job_model"].tolist()))
    assert seen == [models - {held} for held in order]
    assert {r.model for r in rows} == models
    for r in rows:
        assert r.framework in ("tensorflow", "mxnet") and r.runs >= 1
        assert r.after.rows == r.before.rows > 0


def test_leave_models_out_needs_two_models(sim: Dataset, base: MetaModel) -> None:
    real = _testbed(sim, 0.5)
    one = real.select_jobs(real["job_model"] == real["job_model"][0])
    with pytest.raises(ConfigError, match="at least two models"):
        leave_models_out(base, one)


def _two_models(real: Dataset) -> tuple[Dataset, list[str]]:
    """The first run of each of two models, and its ``--runs`` patterns."""
    runs = []
    for name in list(dict.fromkeys(real["job_model"].tolist()))[:2]:
        runs.append(real.select_jobs(real["job_model"] == name).runs()[0])
    return Dataset.concat([real.select_runs(r) for r in runs]), runs


def test_eval_command_leaves_models_out(sim: Dataset, base: MetaModel, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    saved = base.save(tmp_path / "base.keras")
    real = _testbed(sim, 0.5)
    real_path = real.save(tmp_path / "tb.npz")
    code = main(["meta", "eval", "--model", str(saved), "--data", str(real_path),
                 "--leave-models-out", "--epochs", "1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    table = captured.out[captured.out.index("leave-models-out"):]
    for name in set(real["job_model"].tolist()):
        assert f"\n  {name} " in table
    assert "held-out models" in table
    assert "with the guard (the faster of native and the tuner's " in table
    assert "fine-tuning on" in captured.err
    assert "replayed" not in captured.out
    two, runs = _two_models(real)
    code = main(["meta", "eval", "--model", str(saved), "--data", str(real_path),
                 "--leave-models-out", "--epochs", "1", "--online", "ridge",
                 *[a for r in runs for a in ("--runs", r)]])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "held-out runs replayed window by window" in captured.out
    assert "the same replay, not adapting" not in captured.out  # only the held-out replays
    frameworks = {"allreduce": "tensorflow", "ps": "mxnet"}
    for arch in set(two["job_arch"].tolist()):
        n = 5 * len(two.select_jobs(two["job_arch"] == arch).runs())  # windows 2-6 of 7
        assert f"{frameworks[arch]}, not adapting: {n} windows" in captured.out
        assert f"{frameworks[arch]}, adapting online (ridge): {n} windows" in captured.out
    assert "% with the guard" in captured.out[captured.out.index("replayed window"):]


def test_leave_models_out_replays_the_held_out_runs_adapting_and_not(
        sim: Dataset, base: MetaModel) -> None:
    """With ``online``, each held-out model's runs are replayed window by window by the network
    fine-tuned without them, once adapting and once not: the two replays score the same
    windows, and adapting changes the scores."""
    with pytest.raises(ConfigError, match=r"online takes adaptation methods .*\['sgd'\]"):
        leave_models_out(base, _testbed(sim, 0.5), epochs=1, online=["sgd"])
    two, _ = _two_models(_testbed(sim, 0.5))
    rows = leave_models_out(base, two, epochs=1, online=["ridge"])
    assert len(rows) == 2
    for r in rows:
        plain, adapted = r.online[None], r.online["ridge"]
        assert plain.rows == adapted.rows == 5 * r.runs  # windows 2-6 of each run's 7
        assert adapted.mape != plain.mape

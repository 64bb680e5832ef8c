"""The Keras meta-network: save/load round trip, refusal of bad files, batched scoring, the
tuner on a real network, and online adaptation of the head on a shifted distribution.

Skipped when Keras is not installed (the rest of tests/meta runs without it). Networks here
are tiny and trained for a few epochs: these tests check behaviour, not quality
(``autobyte meta eval`` and benchmarks/meta_bench.py measure quality).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("keras", reason="Keras 3 is not installed: the meta-network needs it")

from common.errors import ConfigError, ModelFileError
from common.meta import (
    Dataset,
    MetaModel,
    MetaTuner,
    Sample,
    _network,
    adapt,
    create_meta_tuner,
    evaluate,
    generate,
    train,
)
from common.meta._features import anchor
from common.meta._model import STAMP
from common.meta._network import WEIGHTS
from common.meta._prior import score, simulated_speeds
from common.meta._train import adapt_head, arrays
from common.tuners import NATIVE_BYTES, BayesianTuner, SearchSpace

TINY = {"width": 8, "lstm": 8, "dense": 16}


@pytest.fixture(scope="module")
def data() -> Dataset:
    return generate(jobs=10, seed=5, configs_per_job=6)


@pytest.fixture(scope="module")
def model(data: Dataset) -> MetaModel:
    return train(data, epochs=3, size=TINY, seed=1)


@pytest.fixture(scope="module")
def saved(model: MetaModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return model.save(tmp_path_factory.mktemp("meta") / "model.keras")


def grid() -> tuple[np.ndarray, np.ndarray]:
    points = np.array(list(SearchSpace()))
    return points[:, 0], points[:, 0] * points[:, 1]


def test_round_trip_gives_the_same_predictions(model: MetaModel, saved: Path,
                                               data: Dataset) -> None:
    back = MetaModel.load(saved)
    assert back.vocabulary == model.vocabulary
    assert back.info["jobs"] == 10
    parts, credits = grid()
    for j in (0, 7):
        before = model.predict(data.job(j), parts, credits)
        after = back.predict(data.job(j), parts, credits)
        assert before.shape == (len(parts),) and np.all(before > 0)
        np.testing.assert_allclose(after, before, rtol=1e-5)
    # the batched grid agrees with the training model row by row
    report = evaluate(back, data)
    assert report.rows == len(data) and 0 < report.fraction_of_best <= 1


def _rewrite(src: Path, dst: Path, stamp: dict[str, object] | None) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            if item.filename != STAMP:
                zout.writestr(item, zin.read(item.filename))
        if stamp is not None:
            zout.writestr(STAMP, json.dumps(stamp))


def test_bad_files_raise_model_file_error(saved: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelFileError, match="no meta-network file"):
        MetaModel.load(tmp_path / "missing.keras")
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])
    with pytest.raises(ModelFileError, match="corrupted"):
        MetaModel.load(truncated)
    unstamped = tmp_path / "plain.keras"
    _rewrite(saved, unstamped, None)
    with pytest.raises(ModelFileError, match="without an AutoByte stamp"):
        MetaModel.load(unstamped)
    future = tmp_path / "future.keras"
    _rewrite(saved, future, {"format": "autobyte-meta", "format_version": 99,
                             "feature_version": 1})
    with pytest.raises(ModelFileError, match="incompatible"):
        MetaModel.load(future)
    for member, match in ((WEIGHTS, "weights .* are damaged"), (".h5", "could not be loaded")):
        damaged = tmp_path / "damaged.keras"
        with zipfile.ZipFile(saved) as zin, zipfile.ZipFile(damaged, "w") as zout:
            for item in zin.infolist():
                body = zin.read(item.filename)
                if item.filename == WEIGHTS and member != WEIGHTS:
                    continue  # a file of before the NumPy weights: Keras reads its .h5
                zout.writestr(item, body[:100] if item.filename.endswith(member) else body)
        with pytest.raises(ModelFileError, match=match):
            MetaModel.load(damaged)
    other = tmp_path / "other.keras"  # weights of another network's shapes
    tiny = MetaModel(weights={k: tuple(w[..., :1] if w.ndim else w for w in v)
                              for k, v in MetaModel.load(saved)._weights.items()})
    with zipfile.ZipFile(saved) as zin, zipfile.ZipFile(other, "w") as zout:
        for item in zin.infolist():
            if item.filename != WEIGHTS:
                zout.writestr(item, zin.read(item.filename))
        zout.writestr(WEIGHTS, _network.to_npz(tiny._weights))
    with pytest.raises(ModelFileError, match="layer lstm1 has weights of shapes"):
        MetaModel.load(other)


def test_a_file_without_numpy_weights_loads_through_keras_alike(saved: Path, tmp_path: Path,
                                                                 data: Dataset) -> None:
    older = tmp_path / "older.keras"
    with zipfile.ZipFile(saved) as zin, zipfile.ZipFile(older, "w") as zout:
        for item in zin.infolist():
            if item.filename != WEIGHTS:
                zout.writestr(item, zin.read(item.filename))
    parts, credits = grid()
    np.testing.assert_allclose(MetaModel.load(older).predict(data.job(3), parts, credits),
                               MetaModel.load(saved).predict(data.job(3), parts, credits),
                               rtol=1e-6)


def test_the_shipped_model_scores_without_keras() -> None:
    """What a tuned job's coordinator imports: loading the shipped file and scoring a grid
    brings in neither Keras nor TensorFlow (they cost rank 0's host seconds and a GiB)."""
    code = ("import sys, numpy as np\n"
            "from common.meta import MetaInput, MetaModel\n"
            "from common.tuners import SearchSpace\n"
            "m = MetaModel.load()\n"
            "job = MetaInput(layer_backward_s=(0.01, 0.02), layer_bytes=(4096, 1 << 20),\n"
            "                workers=2, arch='ps', bandwidth_down_bps=1e9,\n"
            "                bandwidth_up_bps=1e9)\n"
            "p = np.array([c[0] for c in SearchSpace()])\n"
            "s = m.predict(job, p, p * 4)\n"
            "assert s.shape == p.shape and np.isfinite(s).all() and (s > 0).all()\n"
            "print(sorted(n for n in ('keras', 'tensorflow') if n in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stderr


def test_tuner_falls_back_on_an_incompatible_file(saved: Path, tmp_path: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    future = tmp_path / "future.keras"
    _rewrite(saved, future, {"format": "autobyte-meta", "format_version": 99})
    with caplog.at_level(logging.WARNING):
        assert isinstance(create_meta_tuner(model_path=future), BayesianTuner)
    assert "incompatible" in caplog.text and "Bayesian" in caplog.text
    assert isinstance(create_meta_tuner(model_path=saved), MetaTuner)


def test_meta_tuner_proposes_the_models_argmax(model: MetaModel, data: Dataset) -> None:
    tuner = MetaTuner(predictor=model)
    tuner.job = data.job(3)
    parts, credits = grid()
    best = int(np.argmax(model.predict(data.job(3), parts, credits)))
    config = tuner.propose()
    assert (config.partition_bytes, config.credit_bytes) == (parts[best], credits[best])


def test_evaluation_anchored_to_native_removes_a_factor_shared_by_a_jobs_configurations(
        model: MetaModel, data: Dataset, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs that run 1.6x and 0.6x what the network predicts, each configuration alike: once
    the predictions are anchored halfway to native's measurement (as the tuner scores; here
    without the simulator's prior, whose shortlist is emptied), the other rows miss by
    |1 - 1/sqrt(factor)| (21% and 29%) instead of |1 - 1/factor| (38% and 67%)."""
    monkeypatch.setattr("common.meta._prior.SHORTLIST", 0)
    rows = []
    for j in range(4):
        job = data.job(j)
        parts = np.array([NATIVE_BYTES, 1 << 16, 1 << 20, 1 << 22])
        credits = np.array([NATIVE_BYTES, 1 << 18, 1 << 22, 1 << 24])
        predicted = model.predict(job, parts, credits)
        factor = 1.6 if j % 2 else 0.6
        rows += [Sample(job, int(p), int(c), float(v) * factor)
                 for p, c, v in zip(parts, credits, predicted, strict=True)]
    report = evaluate(model, rows)
    assert report.mape == pytest.approx((0.375 + 2 / 3) / 2, rel=1e-3)
    assert report.native_rows == 12
    expected = (abs(1 - 1.6 ** -0.5) + abs(1 - 0.6 ** -0.5)) / 2
    assert report.native_mape == pytest.approx(expected, rel=1e-3), report.describe()
    assert "once native is measured" in report.describe()
    no_native = evaluate(model, [r for r in rows if r.partition_bytes != NATIVE_BYTES])
    assert no_native.native_rows == 0 and "once native" not in no_native.describe()


def test_evaluation_scores_as_the_tuner_with_the_simulators_prior(model: MetaModel,
                                                                  data: Dataset) -> None:
    """Where the runs go as the simulator says (speeds made by it, on each job's own layers
    and link), mixing it into the network's shortlist brings every shortlisted row nearer:
    a score (a/s)^(1 - w) of the way misses by less than a whenever a is off s. The anchored
    MAPE of the evaluation is that of ``score``."""
    parts = np.array([NATIVE_BYTES, 1 << 16, 1 << 18, 1 << 20, 1 << 22])
    credits = np.array([NATIVE_BYTES, 1 << 18, 1 << 20, 1 << 22, 1 << 24])
    rows = []
    for j in range(4):
        job = data.job(j)
        truth = simulated_speeds(job, parts, credits, 100.0)
        rows += [Sample(job, int(p), int(c), float(v))
                 for p, c, v in zip(parts, credits, truth, strict=True)]
    with_prior = evaluate(model, rows)
    errors = []
    for j in range(4):
        job, truth = data.job(j), np.array([r.speed for r in rows[5 * j:5 * j + 5]])
        scored = score(job, parts, credits, model.predict(job, parts, credits), 100.0)
        errors += list(np.abs(scored[1:] - truth[1:]) / truth[1:])
    assert with_prior.native_mape == pytest.approx(float(np.mean(errors)), rel=1e-6)
    anchored = []
    for j in range(4):
        job, truth = data.job(j), np.array([r.speed for r in rows[5 * j:5 * j + 5]])
        predicted = model.predict(job, parts, credits)
        scaled = anchor(predicted, float(predicted[0]), 100.0)
        anchored += list(np.abs(scaled[1:] - truth[1:]) / truth[1:])
    assert with_prior.native_mape < float(np.mean(anchored))


def test_the_guarded_pick_is_the_faster_of_the_top_ranked_configuration_and_native(
        model: MetaModel, data: Dataset) -> None:
    """A job whose top-ranked configuration measures half of native's speed: the pick scores
    0.5 of the best, the guard (which measures both and keeps the faster) 1.0; a job where the
    pick is the best scores 1.0 both ways; without a native row the guarded pick is the pick."""
    parts = np.array([NATIVE_BYTES, 1 << 16, 1 << 20, 1 << 22])
    credits = np.array([NATIVE_BYTES, 1 << 18, 1 << 22, 1 << 24])
    tops = [(data.job(j), int(np.argmax(model.predict(data.job(j), parts, credits))))
            for j in range(data.num_jobs)]
    scheduled_tops = [(job, top) for job, top in tops if top != 0][:2]
    assert len(scheduled_tops) == 2, "the network ranks native first on almost every job"
    rows = []
    for (job, top), (native, pick) in zip(scheduled_tops, ((200.0, 100.0), (100.0, 300.0)),
                                          strict=True):
        speeds = [native] + [pick if i == top else 100.0 for i in range(1, 4)]
        rows += [Sample(job, int(p), int(c), v)
                 for p, c, v in zip(parts, credits, speeds, strict=True)]
    report = evaluate(model, rows)
    assert report.per_job_fraction == pytest.approx((0.5, 1.0))
    assert report.per_job_guarded == pytest.approx((1.0, 1.0))
    assert "the pick or native, whichever is faster, 100.0%" in report.describe()
    scheduled = evaluate(model, [r for r in rows if r.partition_bytes != NATIVE_BYTES])
    assert scheduled.per_job_guarded == pytest.approx(scheduled.per_job_fraction)


def test_adaptation_reduces_error_on_a_shifted_distribution(model: MetaModel,
                                                            data: Dataset) -> None:
    """The real cluster runs 1.7x slower than the simulator predicted (framework overheads):
    fine-tuning the head on some jobs' windows removes most of the error the shift added on
    other jobs (not the tiny network's own error, which the shift did not cause)."""
    def samples(shift: float) -> list[Sample]:
        return [Sample(data.job(int(j)), int(p), int(c), float(v) / shift)
                for j, p, c, v in zip(data["sample_job"], data["partition_bytes"],
                                      data["credit_bytes"], data["speed"], strict=True)]

    jobs = data["sample_job"]
    seen = [s for s, j in zip(samples(1.7), jobs, strict=True) if j % 2 == 0]
    unseen = [s for s, j in zip(samples(1.7), jobs, strict=True) if j % 2 == 1]
    own = evaluate(model, [s for s, j in zip(samples(1.0), jobs, strict=True) if j % 2]).mape
    before = evaluate(model, unseen).mape
    assert before > own * 1.3, (own, before)
    weights = [w.copy() for w in model.network.get_weights()]
    job = adapt(model, seen)
    adapted = job.result(timeout=300)
    assert job.done and adapted is not model
    after = evaluate(adapted, unseen).mape
    assert after - own < 0.3 * (before - own), (own, before, after)
    # the caller's model is untouched and the encoder of the adapted one is frozen
    for w, v in zip(weights, model.network.get_weights(), strict=True):
        np.testing.assert_array_equal(w, v)
    enc_before = model.network.get_layer("encoder").get_weights()
    enc_after = adapted.network.get_layer("encoder").get_weights()
    for w, v in zip(enc_before, enc_after, strict=True):
        np.testing.assert_array_equal(w, v)
    assert adapted.info["adapted_on"] == len(seen)


def test_tuner_adapts_in_the_background_and_keeps_the_model(model: MetaModel, data: Dataset,
                                                           tmp_path: Path) -> None:
    from types import SimpleNamespace

    from common.config import Config

    job = data.job(1)

    def window(partition: int, credit: int, speed: float) -> SimpleNamespace:
        return SimpleNamespace(
            window=0, layer_backward_s=(job.layer_backward_s,), layer_bytes=job.layer_bytes,
            num_workers=job.workers, arch=job.arch, bandwidth_down=(job.bandwidth_down_bps,),
            bandwidth_up=(job.bandwidth_up_bps,), model=job.model, speed=speed,
            step_time_s=job.workers * job.batch_size / speed,
            config=Config(scheduling=False) if partition == NATIVE_BYTES else
            Config(partition_bytes=partition, credit_bytes=credit))

    rows = np.flatnonzero(data["sample_job"] == 1)
    windows = [window(int(data["partition_bytes"][r]), int(data["credit_bytes"][r]),
                      float(data["speed"][r]) / 2) for r in rows]
    path = tmp_path / "adapted.keras"
    tuner = MetaTuner(predictor=model, servers=job.servers, adapted_path=path)
    tuner.observe_window(windows[0])
    before = tuner.predict([windows[0].config])
    tuner.adapt(windows)  # returns while the head trains
    assert tuner.predictor is model  # the old model answers until the new one is ready
    assert tuner.wait_adaptation(timeout=300)
    assert tuner.predictor is not model and not path.exists()  # kept once, at close
    after = tuner.predict([windows[0].config])
    assert before is not None and after is not None
    target = windows[0].speed
    assert abs(after[0] - target) < abs(before[0] - target)
    # the adapted copy is the tuner's own: later adaptations update its head in place, and
    # its encoder's weights are the caller's model's, not copied
    owned = tuner.predictor
    encoder = owned._weights["lstm1"]  # type: ignore[attr-defined]
    assert encoder is model._weights["lstm1"]
    slower = [window(w.config.partition_bytes, w.config.credit_bytes, w.speed / 2)
              for w in windows]
    tuner.adapt(slower)
    assert tuner.wait_adaptation(timeout=300)
    again = tuner.predict([windows[0].config])
    assert tuner.predictor is owned and owned._weights["lstm1"] is encoder  # type: ignore[attr-defined]
    assert again is not None and abs(again[0] - slower[0].speed) < abs(after[0] - slower[0].speed)
    np.testing.assert_allclose(
        owned.predict(job, [windows[0].config.partition_bytes],  # type: ignore[attr-defined]
                      [windows[0].config.credit_bytes]), again, rtol=1e-6)
    tuner.close()
    assert path.is_file()  # the last adapted model, for the next job


def test_closing_the_tuner_ends_a_running_adaptation(model: MetaModel, data: Dataset) -> None:
    """The coordinator closes its tuner at the end of a job: Keras must not still be training
    in a thread when the process exits (TensorFlow aborts the process then)."""
    samples = [Sample(data.job(int(j)), int(p), int(c), float(v))
               for j, p, c, v in zip(data["sample_job"], data["partition_bytes"],
                                     data["credit_bytes"], data["speed"], strict=True)]
    tuner = MetaTuner(predictor=model)
    tuner._adaptation = adapt(model, samples[:8], method="adam", epochs=5000)  # minutes
    started = time.perf_counter()
    tuner.close(timeout=60)
    assert tuner._adaptation.done and time.perf_counter() - started < 60
    assert tuner.wait_adaptation(timeout=0) and tuner.predictor is model  # a stopped run is
    # never swapped in


def test_the_shipped_model_loads_and_is_the_meta_tuner() -> None:
    from common.tuners import create

    shipped = MetaModel.load()
    assert shipped.info["jobs"] >= 100 and "densenet121" not in shipped.vocabulary
    holdout = Dataset.load(Path(__file__).parents[2] / "datasets" / "sim_holdout_v3.npz")
    parts, credits = grid()
    speeds = shipped.predict(holdout.job(0), parts, credits)
    assert speeds.shape == (len(parts),) and np.all(np.isfinite(speeds) & (speeds > 0))
    assert isinstance(create("meta"), MetaTuner)


def test_numpy_scoring_is_the_keras_networks(model: MetaModel, data: Dataset) -> None:
    """Each candidate's prediction is the same alone, in a small batch and in the whole grid,
    and the NumPy layers give what the Keras network gives: the whole model's targets, and
    the encoder's vectors of jobs of different lengths in one masked batch."""
    from common.meta._train import predict_speeds

    parts, credits = grid()
    job = data.job(2)
    whole = model.predict(job, parts, credits)
    assert whole.shape == (len(parts),)
    for i in (0, 7, len(parts) - 1):
        np.testing.assert_allclose(model.predict(job, parts[i:i + 1], credits[i:i + 1]),
                                   whole[i:i + 1], rtol=1e-6)
    np.testing.assert_allclose(model.predict(job, parts[:3], credits[:3]), whole[:3], rtol=1e-6)
    batch = arrays(data, model.vocabulary)
    lengths = (batch.sequence != 0).any(axis=-1).sum(axis=1)
    assert len(set(lengths.tolist())) > 1  # the batch mixes lengths: masking is exercised
    for count in (3, 17):
        eager = model.network.get_layer("encoder")(
            [batch.sequence[:count], batch.static[:count]], training=False)
        np.testing.assert_allclose(model.encode(batch.sequence[:count], batch.static[:count]),
                                   np.asarray(eager), rtol=1e-4, atol=1e-5)
    ours = np.array([model.predict(data.job(int(j)), [p], [c])[0] for j, p, c in
                     zip(data["sample_job"][:20], data["partition_bytes"][:20],
                         data["credit_bytes"][:20], strict=True)])
    np.testing.assert_allclose(ours, predict_speeds(model, batch)[:20], rtol=1e-4)


def test_ridge_adaptation_refits_only_the_output_layer(model: MetaModel, data: Dataset) -> None:
    """The default adaptation keeps the hidden layers and pulls the output layer toward the
    observations only as far as the ridge allows: a huge ridge changes nothing, a small one
    fits a 1.7x slowdown; both 'adam' and a bad method are checked by name."""
    samples = [Sample(data.job(int(j)), int(p), int(c), float(v) / 1.7)
               for j, p, c, v in zip(data["sample_job"], data["partition_bytes"],
                                     data["credit_bytes"], data["speed"], strict=True)][:40]
    before = model.network.get_layer("head").get_weights()
    loose = adapt(model, samples, ridge=1e-3, background=False).result()
    stiff = adapt(model, samples, ridge=1e9, background=False).result()
    after = loose.network.get_layer("head").get_weights()
    for w, v in zip(before[:-2], after[:-2], strict=True):
        np.testing.assert_array_equal(w, v)
    assert not np.allclose(before[-2], after[-2]) and loose.info["adapted_by"] == "ridge"
    for w, v in zip(before, stiff.network.get_layer("head").get_weights(), strict=True):
        np.testing.assert_allclose(w, v, atol=1e-5)
    assert evaluate(loose, samples).mape < 0.5 * evaluate(model, samples).mape
    with pytest.raises(ConfigError, match="method must be one of"):
        adapt(model, samples, method="sgd")
    with pytest.raises(ConfigError, match="ridge must be"):
        adapt(model, samples, ridge=0)


def test_an_adapted_head_goes_in_place_without_a_copy_of_the_network(model: MetaModel,
                                                                     data: Dataset) -> None:
    """What the tuner uses: ``adapt_head`` fits the head alone and leaves the model as it was;
    ``take_head`` puts it in place, predicting as the copy ``adapt`` makes, and refuses a
    head of a model with another vocabulary."""
    samples = [Sample(data.job(int(j)), int(p), int(c), float(v) / 1.7)
               for j, p, c, v in zip(data["sample_job"], data["partition_bytes"],
                                     data["credit_bytes"], data["speed"], strict=True)][:40]
    mine = model.with_head(model.head())
    trained = mine.head()
    head = adapt_head(mine, samples, background=False).result()
    for w, v in zip(trained.weights, mine.head().weights, strict=True):
        np.testing.assert_array_equal(w, v)  # fitting changes nothing yet
    copy = adapt(mine, samples, background=False).result()
    job, parts, credits = samples[0].job, data["partition_bytes"][:8], data["credit_bytes"][:8]
    assert not np.allclose(mine.predict(job, parts, credits), copy.predict(job, parts, credits))
    mine.take_head(head)
    np.testing.assert_allclose(mine.predict(job, parts, credits),
                               copy.predict(job, parts, credits), rtol=1e-5)
    assert mine.info["adapted_by"] == "ridge" and "adapted_by" not in model.info
    with pytest.raises(ConfigError, match="same model"):
        mine.take_head(dataclasses.replace(head, vocabulary=("other",)))


def test_an_adapted_model_is_saved_from_the_file_it_came_from_without_keras(
        saved: Path, data: Dataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the coordinator does at a job's end: a loaded model with an adapted head is saved
    with no Keras network built, and the file loads as the adapted model both ways (Keras sees
    the new head, the NumPy weights predict as the adapted model does)."""
    import keras

    samples = [Sample(data.job(int(j)), int(p), int(c), float(v) / 1.7)
               for j, p, c, v in zip(data["sample_job"], data["partition_bytes"],
                                     data["credit_bytes"], data["speed"], strict=True)][:40]
    loaded = MetaModel.load(saved)
    adapted = loaded.with_head(adapt_head(loaded, samples, background=False).result())
    monkeypatch.setattr(MetaModel, "_keras", staticmethod(_no_keras))
    out = adapted.save(tmp_path / "adapted.keras")
    job, parts, credits = samples[0].job, data["partition_bytes"][:8], data["credit_bytes"][:8]
    np.testing.assert_allclose(MetaModel.load(out).predict(job, parts, credits),
                               adapted.predict(job, parts, credits), rtol=1e-5)
    assert MetaModel.load(out).info["adapted_by"] == "ridge"
    network = keras.saving.load_model(out, compile=False, safe_mode=True)
    np.testing.assert_allclose(
        np.concatenate([np.ravel(w) for w in _network.weights_of(network)["target"]]),
        np.concatenate([np.ravel(w) for w in adapted.head().weights[-2:]]), rtol=1e-6)
    assert not np.allclose(_network.weights_of(network)["target"][0],
                           loaded.head().weights[-2])  # the head did change
    # without h5py the network is built with Keras, as before
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(RuntimeError, match="Keras was asked for"):
        adapted.save(tmp_path / "again.keras")


def _no_keras(weights: object) -> object:
    raise RuntimeError("Keras was asked for")


def test_online_replay_of_real_runs_scores_each_next_window(data: Dataset) -> None:
    """``autobyte meta eval --online`` on the first 3 windows of a testbed run (here made of a
    simulated job's configurations): without adapting, window 2 is scored with window 1's
    statistics by the model as it is; adapting (on windows 0-1) changes the model, not the
    protocol."""
    import dataclasses

    from common.meta import Sample, evaluate_online

    job = data.job(0)
    rows = np.flatnonzero(data["sample_job"] == 0)[:3]
    windows = [dataclasses.replace(job, bandwidth_up_bps=job.bandwidth_up_bps * (1 + i / 50))
               for i in range(len(rows))]
    samples = [Sample(w, int(data["partition_bytes"][r]), int(data["credit_bytes"][r]),
                      float(data["speed"][r]) * 0.8) for w, r in zip(windows, rows, strict=True)]
    run = Dataset.from_samples(samples, source="testbed", runs=["run0/decisions-x"] * 3)
    assert run.num_jobs == 3
    shipped = MetaModel.load()
    plain = evaluate_online(shipped, run, method=None)
    speeds = run["speed"]
    predicted = shipped.predict(run.job(1), run["partition_bytes"], run["credit_bytes"])
    row = int(np.flatnonzero(run["sample_job"] == 2)[0])
    assert (plain.rows, plain.jobs) == (1, 1)
    assert plain.mape == pytest.approx(abs(predicted[row] - speeds[row]) / speeds[row])
    assert plain.fraction_of_best == pytest.approx(
        speeds[int(np.argmax(predicted))] / speeds.max())
    adapted = evaluate_online(shipped, run, method="ridge")
    assert adapted.rows == 1 and adapted.mape != plain.mape
    with pytest.raises(ConfigError, match="needs testbed runs"):
        evaluate_online(shipped, run.select_jobs(run["job_run"] == ""))


def test_online_replay_scores_as_the_tuner_once_native_ran(data: Dataset) -> None:
    """A run whose first window ran native: every later window is scored as the tuner
    scores it, anchored to native's windows so far and with the simulator's prior."""
    import dataclasses

    from common.meta import Sample, evaluate_online

    job = data.job(0)
    configs = [(NATIVE_BYTES, NATIVE_BYTES), (1 << 18, 1 << 20), (1 << 20, 1 << 22),
               (1 << 22, 1 << 24)]
    speeds_seen = [80.0, 95.0, 110.0, 90.0]
    windows = [dataclasses.replace(job, bandwidth_up_bps=job.bandwidth_up_bps * (1 + i / 50))
               for i in range(len(configs))]
    samples = [Sample(w, p, c, v)
               for w, (p, c), v in zip(windows, configs, speeds_seen, strict=True)]
    run = Dataset.from_samples(samples, source="testbed", runs=["run0/decisions-x"] * 4)
    shipped = MetaModel.load()
    got = evaluate_online(shipped, run, method=None, start=3)
    parts, credits, speeds = run["partition_bytes"], run["credit_bytes"], run["speed"]
    scored = score(run.job(2), parts, credits, shipped.predict(run.job(2), parts, credits),
                   80.0)
    row = int(np.flatnonzero(run["sample_job"] == 3)[0])
    assert got.rows == 1
    assert got.mape == pytest.approx(abs(scored[row] - speeds[row]) / speeds[row])
    assert got.fraction_of_best == pytest.approx(speeds[int(np.argmax(scored))] / speeds.max())

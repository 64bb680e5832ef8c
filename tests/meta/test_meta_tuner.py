"""The meta tuner above a fixed-output predictor (no Keras): it proposes the argmax of one
batched prediction, answers predict(), and falls back to Bayesian optimisation, saying so,
when the model file is missing or corrupted."""

from __future__ import annotations

import logging
import math
import types
import zipfile
from pathlib import Path

import pytest

from common.config import Config
from common.meta import MetaTuner, create_meta_tuner
from common.meta._prior import PRIOR_WEIGHT, simulated_speeds
from common.testing.meta import FixedPredictor
from common.tuners import NATIVE_BYTES, BayesianTuner, SearchSpace, create


def speed(partition: int, credit: int) -> float:
    """Peak at 2 MiB partitions with a 4x credit."""
    return 100.0 - (math.log2(partition) - 21) ** 2 - (credit / partition - 4) ** 2


def observation() -> types.SimpleNamespace:
    return types.SimpleNamespace(
        window=3, layer_backward_s=((0.01, 0.02, 0.03),), layer_bytes=(1 << 20, 4 << 20, 1 << 24),
        num_workers=1, arch="allreduce", bandwidth_down=(1e9,), bandwidth_up=(1e9,),
        model="", speed=320.0, step_time_s=0.1)


def test_proposes_the_argmax_in_one_batched_call() -> None:
    fake = FixedPredictor(speed)
    space = SearchSpace()
    base = Config(window_steps=5)
    tuner = MetaTuner(predictor=fake, space=space, base=base)
    first = tuner.propose()  # no statistics yet: Bayesian optimisation's first point
    assert first == BayesianTuner(space=space, base=base).propose()
    assert fake.calls == []
    tuner.observe_window(observation())
    config = tuner.propose()
    assert (config.partition_bytes, config.credit_multiple) == (2 << 20, 4)
    assert config.window_steps == 5
    assert fake.calls == [len(space) + 1]  # the whole grid and native, once
    assert tuner.propose() == config and fake.calls == [len(space) + 1]  # stable
    predicted = tuner.predict([config, Config(partition_bytes=1 << 16, credit_bytes=1 << 16)])
    assert predicted is not None and predicted[0] == pytest.approx(100.0)
    assert predicted[1] < predicted[0]


def test_offers_every_point_it_scores_once_a_window_carries_statistics() -> None:
    """The coordinator ranks the tuner's points itself, so it sees the best scheduled picks
    also when the network ranks native first (then the proposal is native, the one in force)."""
    native_first = FixedPredictor(lambda p, c: 500.0 if p > (64 << 20) else speed(p, c))
    tuner = MetaTuner(predictor=native_first)
    assert tuner.candidates() == []
    tuner.observe_window(observation())
    assert not tuner.propose().scheduling
    pool = tuner.candidates()
    assert len(pool) == len(tuner.space) + 1 and sum(not c.scheduling for c in pool) == 1
    # ranking them, and predicting the configuration in force, costs no second inference
    calls = len(native_first.calls)
    predicted = tuner.predict(pool)
    assert predicted is not None and max(predicted) == 500.0
    assert tuner.predict(pool[:1]) == [500.0] and len(native_first.calls) == calls
    tuner.observe_window(observation())  # a new window: scored anew, once
    tuner.predict(pool)
    tuner.predict(pool[1:3])
    assert len(native_first.calls) == calls + 1


def test_once_native_is_measured_the_predictions_move_toward_it() -> None:
    """A network that misses a model it never saw by a factor shared by all configurations:
    anchored halfway (in log terms) to native's measured windows, its speeds keep their ratios,
    the ranking stays, and new conditions (``reset``) drop the anchor."""
    far_off = FixedPredictor(lambda p, c: 2.0 * (300.0 if p > (64 << 20) else speed(p, c)))
    tuner = MetaTuner(predictor=far_off)
    native, best = Config(scheduling=False), Config(partition_bytes=2 << 20, credit_bytes=8 << 20)
    outside = Config(partition_bytes=3 << 20, credit_bytes=12 << 20)  # not a point of the space
    tuner.observe_window(observation())
    assert tuner.predict([native, best]) == [600.0, 200.0]
    proposal = tuner.propose()
    for speed_seen in (140.0, 20.0, 150.0, 160.0, 155.0):  # a warm-up window does not count
        tuner.observe(native, speed_seen)
    tuner.observe(best, 999.0)  # a scheduled window does not move the anchor
    # measured 150 where 600 was predicted: a quarter, so every speed halves (0.25 ** 0.5);
    # native and the best are mixed with the simulator's too (common.meta._prior), which puts
    # native at its measurement
    job = tuner.job
    assert job is not None
    prior = simulated_speeds(job, [NATIVE_BYTES, 2 << 20], [NATIVE_BYTES, 8 << 20], 150.0)
    w = PRIOR_WEIGHT[job.arch]
    assert prior[0] == pytest.approx(150.0)
    assert tuner.predict([native, best]) == [
        pytest.approx(300.0 ** (1 - w) * 150.0 ** w),
        pytest.approx(100.0 ** (1 - w) * prior[1] ** w)]
    off = tuner.predict([outside])  # not in the space: anchored only
    assert off is not None and off[0] == pytest.approx(speed(3 << 20, 12 << 20))
    assert tuner.propose() == proposal
    tuner.reset()
    tuner.observe_window(observation())
    assert tuner.predict([native]) == [600.0]


def test_the_job_scored_is_the_recent_windows_best_link() -> None:
    tuner = MetaTuner(predictor=FixedPredictor(speed))
    tuner.observe_window(observation())
    slow = observation()
    slow.bandwidth_down, slow.bandwidth_up = (2e8,), (3e8,)  # a slow configuration's window
    tuner.observe_window(slow)
    assert tuner.job is not None
    assert (tuner.job.bandwidth_down_bps, tuner.job.bandwidth_up_bps) == (1e9, 1e9)
    tuner.reset()  # conditions changed: the slow window alone
    tuner.observe_window(slow)
    assert (tuner.job.bandwidth_down_bps, tuner.job.bandwidth_up_bps) == (2e8, 3e8)


def test_unusable_window_keeps_the_last_job(caplog: pytest.LogCaptureFixture) -> None:
    tuner = MetaTuner(predictor=FixedPredictor(speed))
    tuner.observe_window(observation())
    job = tuner.job
    empty = observation()
    empty.layer_backward_s = ()
    with caplog.at_level(logging.DEBUG, logger="common.meta"):  # normal: not a warning
        tuner.observe_window(empty)
    assert tuner.job is job and "not usable" in caplog.text


@pytest.mark.parametrize("content", [None, b"garbage, not a zip archive"])
def test_bad_model_file_falls_back_to_bayesian(tmp_path: Path, content: bytes | None,
                                               caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "model.keras"
    if content is not None:
        path.write_bytes(content)
    with caplog.at_level(logging.WARNING):
        tuner = create_meta_tuner(model_path=path, seed=1)
    assert isinstance(tuner, BayesianTuner)
    assert "falling back to Bayesian optimisation" in caplog.text
    assert str(path) in caplog.text
    # the same through the registry, as the coordinator builds it
    assert isinstance(create("meta", model_path=path), BayesianTuner)


def test_registry_builds_a_meta_tuner_with_a_predictor() -> None:
    tuner = create("meta", predictor=FixedPredictor(speed))
    assert isinstance(tuner, MetaTuner)


def test_without_keras_the_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    import sys

    from common.errors import FrameworkMissingError
    from common.meta._model import PRETRAINED, keras_module
    from common.meta._network import WEIGHTS

    monkeypatch.setitem(sys.modules, "keras", None)  # import keras -> ImportError
    with pytest.raises(FrameworkMissingError, match=r"pip install 'autobyte\[tf\]'"):
        keras_module()
    # the shipped model scores in NumPy: its tuner needs no Keras
    assert isinstance(create_meta_tuner(), MetaTuner)
    # a file without the NumPy weights needs Keras to load: Bayesian optimisation, and why
    older = tmp_path / "older.keras"
    with zipfile.ZipFile(PRETRAINED) as zin, zipfile.ZipFile(older, "w") as zout:
        for item in zin.infolist():
            if item.filename != WEIGHTS:
                zout.writestr(item, zin.read(item.filename))
    with caplog.at_level(logging.WARNING):
        assert isinstance(create_meta_tuner(model_path=older), BayesianTuner)
    assert "Keras 3" in caplog.text and "Bayesian" in caplog.text

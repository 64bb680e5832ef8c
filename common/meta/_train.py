"""Offline training, held-out evaluation and online adaptation of the meta-network.

Training minimises the L2 error of the normalised target (``_features``: log of iteration time
over the no-overlap reference) against the observed 10-step mean, with a validation split by
job (a job's configurations share its layers, so splitting rows would leak). Evaluation reports
what the tuner needs: the mean absolute percentage error of predicted speed, and, per job, the
true speed of the candidate the model ranks first as a fraction of the best candidate's.

Adaptation fine-tunes the head only (the encoder of layers and cluster stays frozen) on recent
observations of the running job, in a background thread on a copy of the network: the caller
keeps predicting with the old model until the new one is ready. By default it refits just the
output layer, by ridge regression toward its trained weights (see ``adapt``).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from common.errors import ConfigError
from common.meta._dataset import Dataset
from common.meta._features import (
    KNOWN_MODELS,
    MetaInput,
    Sample,
    encode_candidates,
    encode_job,
    speed_from_target,
    target_from_speed,
)
from common.meta._model import Head, MetaModel, build_network, keras_module
from common.meta._prior import NATIVE_WINDOWS, score
from common.output import filtered_stderr
from common.tuners._space import NATIVE_BYTES

__all__ = ["Adaptation", "EvalReport", "HeldOut", "Sample", "adapt", "adapt_head", "arrays",
           "evaluate", "evaluate_online", "fine_tune", "leave_models_out", "train"]

Report = Callable[[str], None]
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Arrays:
    sequence: npt.NDArray[np.float32]
    static: npt.NDArray[np.float32]
    candidate: npt.NDArray[np.float32]
    target: npt.NDArray[np.float32]
    samples_per_step: npt.NDArray[np.float64]
    ref_s: npt.NDArray[np.float64]
    job: npt.NDArray[np.int64]
    partition_bytes: npt.NDArray[np.int64]
    credit_bytes: npt.NDArray[np.int64]
    jobs: tuple[MetaInput, ...]  # by ``job``

    def inputs(self) -> list[npt.NDArray[np.float32]]:
        return [self.sequence, self.static, self.candidate]


def arrays(samples: Sequence[Sample] | Dataset,
           vocabulary: Sequence[str] = KNOWN_MODELS) -> Arrays:
    """Network inputs and targets; each job is encoded once."""
    groups: list[tuple[MetaInput, npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]] = []
    if isinstance(samples, Dataset):
        for j in range(samples.num_jobs):
            rows = samples["sample_job"] == j
            groups.append((samples.job(j), samples["partition_bytes"][rows],
                           samples["credit_bytes"][rows], samples["speed"][rows]))
    else:
        by_job: dict[int, list[Sample]] = {}
        jobs: dict[int, MetaInput] = {}
        for s in samples:
            by_job.setdefault(id(s.job), []).append(s)
            jobs[id(s.job)] = s.job
        for key, items in by_job.items():
            groups.append((jobs[key], np.array([s.partition_bytes for s in items]),
                           np.array([s.credit_bytes for s in items]),
                           np.array([s.speed for s in items])))
    seq, static, cand, target, sps, ref, job_ids, partitions = [], [], [], [], [], [], [], []
    credit_bytes: list[npt.NDArray[np.int64]] = []
    for j, (job, parts, credits, speeds) in enumerate(groups):
        if not len(parts):
            continue
        enc = encode_job(job, vocabulary=vocabulary)
        count = len(parts)
        seq.append(np.repeat(enc.sequence[None], count, axis=0))
        static.append(np.repeat(enc.static[None], count, axis=0))
        cand.append(encode_candidates(enc, parts, credits))
        target.append(target_from_speed(speeds, enc.samples_per_step, enc.ref_s))
        sps.append(np.full(count, float(enc.samples_per_step)))
        ref.append(np.full(count, enc.ref_s))
        job_ids.append(np.full(count, j))
        partitions.append(np.asarray(parts, np.int64))
        credit_bytes.append(np.asarray(credits, np.int64))
    if not seq:
        raise ConfigError("no samples to encode")
    return Arrays(np.concatenate(seq), np.concatenate(static), np.concatenate(cand),
                  np.concatenate(target), np.concatenate(sps), np.concatenate(ref),
                  np.concatenate(job_ids), np.concatenate(partitions),
                  np.concatenate(credit_bytes), tuple(job for job, *_ in groups))


def train(dataset: Dataset, *, epochs: int = 60, batch_size: int = 128, seed: int = 0,
          validation: float = 0.15, learning_rate: float = 2e-3, patience: int = 12,
          size: dict[str, int] | None = None, report: Report | None = None,
          testbed_weight: float = 1.0) -> MetaModel:
    """Train a new network on ``dataset``; progress goes to ``report`` once per epoch.
    ``testbed_weight``: loss weight of testbed rows against simulated ones."""
    _check_fit(epochs, batch_size, validation, testbed_weight)
    vocabulary = tuple(m for m in KNOWN_MODELS if m in set(dataset["job_model"].tolist()))
    data = arrays(dataset, vocabulary)
    network = build_network(seed=seed, **(size or {}))
    network.get_layer("head").get_layer("target").bias.assign([float(data.target.mean())])
    _fit(network, dataset, data, epochs=epochs, batch_size=batch_size, seed=seed,
         validation=validation, learning_rate=learning_rate, patience=patience, report=report,
         testbed_weight=testbed_weight)
    info = {"jobs": int(dataset.num_jobs), "samples": len(dataset), "seed": seed,
            "epochs": epochs, "trained_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return MetaModel(network, vocabulary=vocabulary, info=info)


def fine_tune(model: MetaModel, dataset: Dataset, *, epochs: int = 15, batch_size: int = 128,
              seed: int = 0, validation: float = 0.15, learning_rate: float = 3e-4,
              patience: int = 5, report: Report | None = None,
              testbed_weight: float = 1.0, head_only: bool = False) -> MetaModel:
    """Go on training a copy of ``model`` (all of it, or with ``head_only`` its head, the
    encoder frozen; same vocabulary) on ``dataset``, e.g. simulated plus testbed data;
    ``model`` itself is not changed."""
    _check_fit(epochs, batch_size, validation, testbed_weight)
    network = model.keras_copy()
    if head_only:
        network.get_layer("encoder").trainable = False
    data = arrays(dataset, model.vocabulary)
    _fit(network, dataset, data, epochs=epochs, batch_size=batch_size, seed=seed,
         validation=validation, learning_rate=learning_rate, patience=patience, report=report,
         testbed_weight=testbed_weight)
    sources = dataset["job_source"][dataset["sample_job"]]
    info = {**model.info, "fine_tuned_on": {"jobs": int(dataset.num_jobs),
                                            "samples": len(dataset),
                                            "testbed_samples": int(np.sum(sources == "testbed")),
                                            "testbed_weight": testbed_weight,
                                            "head_only": head_only, "epochs": epochs,
                                            "learning_rate": learning_rate, "seed": seed},
            "fine_tuned_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return MetaModel(network, vocabulary=model.vocabulary, info=info)


def _check_fit(epochs: int, batch_size: int, validation: float, testbed_weight: float) -> None:
    if epochs < 1 or batch_size < 1 or not 0 <= validation < 1:
        raise ConfigError(f"need epochs >= 1, batch_size >= 1 and 0 <= validation < 1, got "
                          f"epochs={epochs}, batch_size={batch_size}, validation={validation}")
    if not testbed_weight > 0 or not math.isfinite(testbed_weight):
        raise ConfigError(f"testbed_weight must be a finite number > 0, got "
                          f"testbed_weight={testbed_weight!r}")


def _fit(network: Any, dataset: Dataset, data: Arrays, *, epochs: int, batch_size: int,
         seed: int, validation: float, learning_rate: float, patience: int,
         report: Report | None, testbed_weight: float) -> None:
    """Fit with a validation split by job, or by run for testbed jobs (the windows of one
    run share their job: splitting them would leak), testbed rows weighted."""
    keras = keras_module()
    runs = dataset["job_run"]
    groups: npt.NDArray[Any] = data.job
    if any(runs.tolist()):
        groups = np.array([f"run:{runs[j]}" if runs[j] else f"job:{j}" for j in data.job])
    unique = np.unique(groups)
    rng = np.random.default_rng(seed)
    val_groups = rng.choice(unique, size=round(len(unique) * validation), replace=False)
    is_val = np.isin(groups, val_groups)
    weighted = np.where(dataset["job_source"][data.job] == "testbed", testbed_weight,
                        1.0).astype(np.float32)
    weight = None if np.all(weighted == 1.0) else weighted
    network.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="mse")
    callbacks: list[Any] = [_Progress(keras, epochs, report)]
    fit_val = None
    if is_val.any():
        fit_val = ([a[is_val] for a in data.inputs()], data.target[is_val],
                   None if weight is None else weight[is_val])
        callbacks.append(keras.callbacks.EarlyStopping(patience=patience,
                                                       restore_best_weights=True))
        callbacks.append(keras.callbacks.ReduceLROnPlateau(factor=0.5,
                                                           patience=max(1, patience // 3)))
    rows = ~is_val
    network.fit([a[rows] for a in data.inputs()], data.target[rows],
                sample_weight=None if weight is None else weight[rows],
                validation_data=fit_val, epochs=epochs, batch_size=batch_size, shuffle=True,
                verbose=0, callbacks=callbacks)


def _Progress(keras: Any, epochs: int, report: Report | None) -> Any:
    class Progress(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.t0 = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            if report is None:
                return
            logs = logs or {}
            val = f" val {logs['val_loss']:.4f}" if "val_loss" in logs else ""
            report(f"epoch {epoch + 1}/{epochs} loss {logs.get('loss', math.nan):.4f}{val} "
                   f"({time.perf_counter() - self.t0:.1f} s)")

    return Progress()


@dataclasses.dataclass(frozen=True)
class EvalReport:
    """``mape``: mean |predicted - observed| / observed speed over all rows; ``fraction``:
    per job with >= 2 configurations, true speed of the top-ranked one over the best's;
    ``native_mape``: the MAPE of the other rows of jobs that measured native, scored as the
    tuner scores once native is measured (``common.meta._prior.score``: anchored to native's
    speed, the best mixed with the simulator's; NaN without such jobs); ``per_job_guarded``:
    per job, the faster of that score's top-ranked configuration and native over the best,
    what the tuner's guard keeps after measuring both (the network's top-ranked one where the
    job has no native row)."""

    rows: int
    jobs: int
    mape: float
    fraction_of_best: float
    worst_fraction: float
    per_job_fraction: tuple[float, ...]
    native_mape: float = math.nan
    native_rows: int = 0
    per_job_guarded: tuple[float, ...] = ()

    @property
    def guarded_fraction(self) -> float:
        return float(np.mean(self.per_job_guarded)) if self.per_job_guarded else math.nan

    def describe(self) -> str:
        anchored = "" if not self.native_rows else \
            f", {100 * self.native_mape:.1f}% once native is measured"
        return (f"{self.rows} rows, {self.jobs} jobs: MAPE {100 * self.mape:.1f}%{anchored}, "
                f"picked configuration at {100 * self.fraction_of_best:.1f}% of the best on "
                f"average (worst job {100 * self.worst_fraction:.1f}%; the pick or native, "
                f"whichever is faster, {100 * self.guarded_fraction:.1f}%)")


def predict_speeds(model: MetaModel, data: Arrays) -> npt.NDArray[np.float64]:
    with filtered_stderr():  # the first graph run narrates oneDNN's fallbacks in C++
        out = model.network.predict(data.inputs(), batch_size=1024, verbose=0)
    return speed_from_target(np.asarray(out).reshape(-1), data.samples_per_step, data.ref_s)


def evaluate(model: MetaModel, samples: Dataset | Sequence[Sample]) -> EvalReport:
    data = arrays(samples, model.vocabulary)
    predicted = predict_speeds(model, data)
    observed = speed_from_target(data.target, data.samples_per_step, data.ref_s)
    mape = float(np.mean(np.abs(predicted - observed) / observed))
    fractions, guarded, anchored = [], [], []
    for j in np.unique(data.job):
        rows = np.flatnonzero(data.job == j)
        native = rows[data.partition_bytes[rows] == NATIVE_BYTES]
        top = pick = rows[int(np.argmax(predicted[rows]))]
        if len(native) and len(rows) > len(native):
            scored = score(data.jobs[j], data.partition_bytes[rows], data.credit_bytes[rows],
                           predicted[rows], float(observed[native[0]]))
            others = data.partition_bytes[rows] != NATIVE_BYTES
            anchored.extend(np.abs(scored[others] - observed[rows][others]) /
                            observed[rows][others])
            pick = rows[int(np.argmax(scored))]  # what the guard measures beside native
        if len(rows) >= 2:
            fractions.append(float(observed[top] / observed[rows].max()))
            guarded.append(_guarded(observed, pick, native) / float(observed[rows].max()))
    return EvalReport(rows=len(observed), jobs=len(np.unique(data.job)), mape=mape,
                      fraction_of_best=float(np.mean(fractions)) if fractions else math.nan,
                      worst_fraction=min(fractions, default=math.nan),
                      per_job_fraction=tuple(fractions),
                      native_mape=float(np.mean(anchored)) if anchored else math.nan,
                      native_rows=len(anchored), per_job_guarded=tuple(guarded))


def _guarded(speeds: npt.NDArray[np.float64], pick: int, native: npt.NDArray[np.intp]) -> float:
    """What the guard keeps: the faster measured of the pick and native (if measured)."""
    return max([float(speeds[pick])] + [float(speeds[i]) for i in native[:1]])


def evaluate_online(model: MetaModel, dataset: Dataset, *, method: str | None = "ridge",
                    start: int = 2, report: Report | None = None) -> EvalReport:
    """Testbed runs replayed as the tuner meets them, with online adaptation: for each window
    t >= ``start`` of a run (windows in the order they ran), adapt a copy of ``model`` on the
    run's windows before t (each scored with its own statistics; ``method=None``: no
    adaptation), then score with window t-1's statistics as the tuner does (``score``: once
    native ran before t, anchored to its windows and mixed with the simulator's prior on the
    best). The error is that of window t's
    configuration against its speed; the pick is the run's best-predicted configuration,
    as a fraction of the run's best. ``report`` gets a line per run."""
    errors: list[float] = []
    fractions: list[float] = []
    guarded: list[float] = []
    work: MetaModel | None = None  # the adapted copy, one for all windows
    runs = dataset.runs()
    if not runs:
        raise ConfigError("evaluate_online needs testbed runs (job_run), got none")
    for run in runs:
        r = dataset.select_runs(run)
        jobs = [r.job(j) for j in range(r.num_jobs)]
        row_of = [int(np.flatnonzero(r["sample_job"] == j)[0]) for j in range(r.num_jobs)]
        parts, credits, speeds = r["partition_bytes"], r["credit_bytes"], r["speed"]
        native = np.flatnonzero(parts == NATIVE_BYTES)
        seen = len(errors)
        for t in range(max(1, start), r.num_jobs):
            current = model
            if method is not None:
                past = [Sample(jobs[j], int(parts[row_of[j]]), int(credits[row_of[j]]),
                               float(speeds[row_of[j]])) for j in range(t)]
                if work is None:
                    work = model.with_head(model.head())
                work.take_head(adapt_head(model, past, method=method, background=False).result())
                current = work
            measured = [float(speeds[row_of[j]]) for j in range(t)
                        if parts[row_of[j]] == NATIVE_BYTES][-NATIVE_WINDOWS:]
            predicted = score(jobs[t - 1], parts, credits,
                              current.predict(jobs[t - 1], parts, credits),
                              statistics.median(measured) if measured else None)
            row = row_of[t]
            errors.append(abs(predicted[row] - speeds[row]) / speeds[row])
            pick = int(np.argmax(predicted))
            fractions.append(float(speeds[pick] / speeds.max()))
            guarded.append(_guarded(speeds, pick, native) / float(speeds.max()))
        if report is not None and len(errors) > seen:
            report(f"  {run}: {len(errors) - seen} windows, MAPE "
                   f"{100 * np.mean(errors[seen:]):.1f}%, pick "
                   f"{100 * np.mean(fractions[seen:]):.1f}%")
    if not errors:
        raise ConfigError(f"no run has more than start={start} windows")
    return EvalReport(rows=len(errors), jobs=len(runs), mape=float(np.mean(errors)),
                      fraction_of_best=float(np.mean(fractions)),
                      worst_fraction=float(min(fractions)), per_job_fraction=tuple(fractions),
                      per_job_guarded=tuple(guarded))


FRAMEWORKS = {"allreduce": "tensorflow", "ps": "mxnet"}  # a job's arch -> the adapter


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """One architecture's testbed runs in one framework, scored by ``base`` as it is and by
    ``base`` fine-tuned on every other architecture's runs (none of this one's)."""

    model: str
    framework: str
    runs: int
    before: EvalReport
    after: EvalReport
    online: Mapping[str | None, EvalReport] = dataclasses.field(default_factory=dict)


def leave_models_out(base: MetaModel, dataset: Dataset, *, extra: Dataset | None = None,
                     epochs: int = 15, seed: int = 0, learning_rate: float = 3e-4,
                     testbed_weight: float = 1.0, online: Sequence[str] = (),
                     report: Report | None = None) -> list[HeldOut]:
    """For each model (``job_model``) of the testbed runs in ``dataset``: fine-tune a copy of
    ``base`` on the runs of all the other models (plus ``extra``, e.g. simulated jobs, that
    the network keeps learning from), then evaluate it on that model's runs as deployed, per
    framework. What a user's own architecture gets: a network that never saw it.

    ``online``: adaptation methods (``ADAPT_METHODS``) to replay the held-out runs with, window
    by window as the tuner meets them (``evaluate_online``), each beside the same replay not
    adapting (``HeldOut.online``, keyed by method, None for not adapting): whether adapting
    online helps on an architecture the network never saw."""
    unknown = sorted(set(online) - set(ADAPT_METHODS))
    if unknown:
        raise ConfigError(f"online takes adaptation methods from {list(ADAPT_METHODS)}, got "
                          f"{list(online)}")
    real = dataset.select_jobs(dataset["job_run"] != "")
    models = list(dict.fromkeys(real["job_model"].tolist()))
    if len(models) < 2:
        raise ConfigError(f"leaving models out needs testbed runs of at least two models, got "
                          f"{models or 'none'}")
    out: list[HeldOut] = []
    for i, name in enumerate(models):
        held = real.select_jobs(real["job_model"] == name)
        rest = real.select_jobs(real["job_model"] != name)
        train_on = (rest if extra is None else Dataset.concat([extra, rest])).as_deployed()
        if report is not None:
            report(f"model {i + 1}/{len(models)} {name}: fine-tuning on {len(rest.runs())} "
                   f"runs of the other models")
        tuned = fine_tune(base, train_on, epochs=epochs, seed=seed, learning_rate=learning_rate,
                          testbed_weight=testbed_weight, validation=0.0)
        for arch, framework in FRAMEWORKS.items():
            part = held.select_jobs(held["job_arch"] == arch)
            if part.num_jobs:
                deployed = part.as_deployed()
                replays = {method: evaluate_online(tuned, part, method=method)
                           for method in ([None, *online] if online else [])}
                out.append(HeldOut(name, framework, len(part.runs()),
                                   evaluate(base, deployed), evaluate(tuned, deployed),
                                   replays))
    return out


class Adaptation(Generic[T]):
    """A fine-tuning run in a background thread; ``result()`` waits for what it made (the
    adapted model, or for ``adapt_head`` its head)."""

    def __init__(self, target: Callable[[], T], *, background: bool = True,
                 stop: threading.Event | None = None) -> None:
        self._result: T | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._stop = stop or threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._run, args=(target,), daemon=True,
                                            name="autobyte-meta-adapt")
            self._thread.start()
        else:
            self._run(target)

    def _run(self, target: Callable[[], T]) -> None:
        try:
            self._result = target()
        except BaseException as exc:  # handed to whoever asks for the result
            self._error = exc
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def stop(self, timeout: float = 10.0) -> bool:
        """Ask the run to end after its current batch and wait; True when it has ended.

        A process must not exit while Keras trains in a thread (TensorFlow aborts at exit)."""
        self._stop.set()
        return self._done.wait(timeout)

    def result(self, timeout: float | None = None) -> T:
        if not self._done.wait(timeout):
            raise TimeoutError(f"adaptation still running after {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


ADAPT_METHODS = ("ridge", "adam")


def adapt(model: MetaModel, samples: Sequence[Sample], *, method: str = "ridge",
          ridge: float = 10.0, epochs: int = 100, learning_rate: float = 5e-3,
          background: bool = True) -> Adaptation[MetaModel]:
    """A copy of ``model`` with its head fine-tuned on ``samples`` (``adapt_head``);
    ``model`` itself is not changed. Returns at once (``background=True``); the Adaptation's
    ``result()`` is the new model."""
    fit, stop = _head_fit(model, samples, method=method, ridge=ridge, epochs=epochs,
                          learning_rate=learning_rate)
    return Adaptation(lambda: model.with_head(fit()), background=background, stop=stop)


def adapt_head(model: MetaModel, samples: Sequence[Sample], *, method: str = "ridge",
               ridge: float = 10.0, epochs: int = 100, learning_rate: float = 5e-3,
               background: bool = True) -> Adaptation[Head]:
    """Fine-tune ``model``'s head on ``samples``; ``result()`` is the new head, which
    ``model.take_head`` puts in place without copying the network (a copy was four fifths of
    an adaptation's CPU on rank 0).

    The encoder runs once (its output feeds the head and stays fixed), then in NumPy:

    - ``method="ridge"`` (default): the head's output layer is refitted in closed form by
      ridge regression toward its trained weights (``ridge``: the pull toward them): a few
      windows of one job over-fit a whole head, but not one layer pulled toward the trained
      one (`autobyte meta eval --data RUNS.npz --online ridge,adam` compares them).
    - ``method="adam"``: the head's three dense layers train with Adam (``epochs``,
      ``learning_rate``); for many observations of a shifted environment.

    The encoder runs in a compiled graph (``MetaModel.encode``) and queues almost no work in
    TensorFlow's thread pools, which a training worker shares (``benchmarks/meta_bench.py``
    measures an adaptation's cost)."""
    fit, stop = _head_fit(model, samples, method=method, ridge=ridge, epochs=epochs,
                          learning_rate=learning_rate)
    return Adaptation(fit, background=background, stop=stop)


def _head_fit(model: MetaModel, samples: Sequence[Sample], *, method: str, ridge: float,
              epochs: int, learning_rate: float) -> tuple[Callable[[], Head], threading.Event]:
    """The checked inputs of an adaptation as the function that fits the head, and the
    event that stops it."""
    if not samples:
        raise ConfigError("adapt needs at least one observation, got none")
    if method not in ADAPT_METHODS:
        raise ConfigError(f"method must be one of {list(ADAPT_METHODS)}, got method={method!r}")
    if not ridge > 0 or not math.isfinite(ridge):
        raise ConfigError(f"ridge must be a finite number > 0, got ridge={ridge!r}")
    data = arrays(list(samples), model.vocabulary)
    stop = threading.Event()

    def fit() -> Head:
        trained = model.head()
        vectors = model.encode(data.sequence, data.static)
        x = np.concatenate([vectors, data.candidate], axis=1).astype(np.float64)
        y = np.asarray(data.target, np.float64).reshape(-1, 1)
        weights = [w.astype(np.float64) for w in trained.weights]
        if method == "ridge":
            fitted = refit_output_layer(weights, x, y, ridge=ridge)
        else:
            rng = np.random.default_rng(0)
            order = np.concatenate([rng.permutation(len(y)) for _ in range(epochs)])
            fitted = fit_dense_head(weights, x, y, order, batch=min(16, len(y)),
                                    learning_rate=learning_rate, stop=stop)
        if stop.is_set():
            raise ConfigError("adaptation stopped before it finished")
        info = {**trained.info, "adapted_on": len(data.target), "adapted_by": method,
                "adapted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        return Head(tuple(w.astype(np.float32) for w in fitted), trained.vocabulary, info)

    return fit, stop


def refit_output_layer(weights: list[npt.NDArray[np.float64]], x: npt.NDArray[np.float64],
                       y: npt.NDArray[np.float64], *,
                       ridge: float) -> list[npt.NDArray[np.float64]]:
    """Relu-relu-linear dense layers (kernel, bias pairs): keep the hidden layers, solve the
    linear output layer for min |H w - y|^2 + ridge |w - w_trained|^2 (H: the last hidden
    layer's activations with a constant column for the bias)."""
    params = [w.copy() for w in weights]
    hidden = x
    for i in range(len(params) // 2 - 1):
        hidden = np.maximum(hidden @ params[2 * i] + params[2 * i + 1], 0.0)
    h = np.concatenate([hidden, np.ones((len(hidden), 1))], axis=1)
    kernel, bias = params[-2], params[-1]
    w0 = np.concatenate([kernel, bias.reshape(1, -1)], axis=0)
    w = np.linalg.solve(h.T @ h + ridge * np.eye(len(w0)), h.T @ y + ridge * w0)
    params[-2], params[-1] = w[:-1], w[-1]
    return params


def fit_dense_head(weights: list[npt.NDArray[np.float64]], x: npt.NDArray[np.float64],
                   y: npt.NDArray[np.float64], order: npt.NDArray[Any], *, batch: int,
                   learning_rate: float, stop: threading.Event | None = None,
                   betas: tuple[float, float] = (0.9, 0.999),
                   eps: float = 1e-7) -> list[npt.NDArray[np.float64]]:
    """Adam on relu-relu-linear dense layers (kernel, bias pairs) for mean squared error,
    over the rows of ``x`` in ``order``, ``batch`` rows per step (Keras's Adam defaults)."""
    params = [w.copy() for w in weights]
    m = [np.zeros_like(w) for w in params]
    v = [np.zeros_like(w) for w in params]
    layers = len(params) // 2
    for t, start in enumerate(range(0, len(order), batch), start=1):
        if stop is not None and stop.is_set():
            break
        rows = order[start:start + batch]
        acts = [x[rows]]
        for i in range(layers):
            z = acts[-1] @ params[2 * i] + params[2 * i + 1]
            acts.append(np.maximum(z, 0.0) if i < layers - 1 else z)
        delta = 2.0 * (acts[-1] - y[rows]) / len(rows)
        grads: list[npt.NDArray[np.float64]] = [np.empty(0)] * len(params)
        for i in reversed(range(layers)):
            grads[2 * i] = acts[i].T @ delta
            grads[2 * i + 1] = delta.sum(axis=0)
            if i:
                delta = (delta @ params[2 * i].T) * (acts[i] > 0)
        lr = learning_rate * np.sqrt(1 - betas[1] ** t) / (1 - betas[0] ** t)
        for j, g in enumerate(grads):
            m[j] = betas[0] * m[j] + (1 - betas[0]) * g
            v[j] = betas[1] * v[j] + (1 - betas[1]) * g * g
            params[j] -= lr * m[j] / (np.sqrt(v[j]) + eps)
    return params

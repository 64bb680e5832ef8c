"""The meta-network tuner: one batched inference over the whole search space replaces a search.

It follows the tuner contract of ``common.tuners`` and the decision loop's optional hooks:
``observe_window(observation)`` gives it the job's Table II statistics, ``predict(configs)``
answers for the trigger, ``adapt(observations)`` fine-tunes the head in the background when
the trigger sees predictions drift (the old model keeps answering until the new one is ready).
Until it has a window with per-layer statistics (an adapter that does not time layers never
sends one) it proposes with Bayesian optimisation over the same observations, saying so once.
Once native is measured, its speeds are anchored to that measurement (``anchor``: moved halfway,
in log terms, to the median of native's recent windows under the conditions in force: a
window swings by a tenth here, and the job's first carries its warm-up), which removes much of
the network's absolute miss on a model it never saw, and its best candidates are mixed with
what the simulator predicts for them on the job's own layers and link (``common.meta._prior``).
"""

from __future__ import annotations

import collections
import logging
import statistics
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from common.config import LOG_DIR_ENV, META_MODEL_ENV, Config, environment
from common.errors import ConfigError, FrameworkMissingError, ModelFileError
from common.meta._features import JobTracker, MetaInput, anchor
from common.meta._prior import NATIVE_WINDOWS, score
from common.tuners import BayesianTuner, SearchSpace, Tuner

__all__ = ["MetaTuner", "Predictor", "create_meta_tuner"]

log = logging.getLogger(__name__)

class Predictor(Protocol):
    def predict(self, job: MetaInput, partitions: npt.ArrayLike,
                credits: npt.ArrayLike) -> npt.NDArray[np.float64]: ...


class MetaTuner(Tuner):
    name = "meta"

    def __init__(self, *, predictor: Predictor, space: SearchSpace | None = None, seed: int = 0,
                 base: Config | None = None, servers: int = 1,
                 adapted_path: str | Path | None = None, owns_predictor: bool = False) -> None:
        super().__init__(space=space, seed=seed, base=base)
        if not callable(getattr(predictor, "predict", None)):
            raise ConfigError(f"predictor must have predict(job, partitions, credits), "
                              f"got predictor={predictor!r}")
        self.predictor = predictor
        # adaptations update an owned model's head in place (no copy of its encoder)
        self.owns_predictor = owns_predictor
        self.servers = servers
        self.adapted_path = Path(adapted_path) if adapted_path is not None else None
        self.job: MetaInput | None = None
        self._tracker = JobTracker()
        self._points = self.space.configs(self.base)  # what ``scores`` answers for, in order
        self._encoded = np.array([self.space.encode(c) for c in self._points], dtype=np.int64)
        self._position = {tuple(e): i for i, e in enumerate(self._encoded.tolist())}
        # native's point, when the space has it (no anchor without)
        self._native_at = self._position.get(tuple(self.space.encode(self.base.replace(
            scheduling=False))))
        self._native: collections.deque[float] = collections.deque(maxlen=NATIVE_WINDOWS)
        self._raw: npt.NDArray[np.float64] | None = None  # the network's, this job and model
        self._scored: npt.NDArray[np.float64] | None = None  # scores(): those anchored
        self._proposal: Config | None = None
        self._adaptation: Any = None
        self._lock = threading.Lock()
        self._fallback = BayesianTuner(space=self.space, seed=seed, base=self.base)
        self._warned = False
        self.adaptations = 0  # adapted models taken into use (logged once, at close)

    def observe(self, config: Config, speed: float) -> None:
        super().observe(config, speed)
        self._fallback.observe(config, speed)
        if not config.scheduling and speed > 0 and self._native_at is not None:
            self._native.append(float(speed))
            self._scored = None

    def reset(self) -> None:
        """The conditions changed: what native measured describes another job."""
        super().reset()
        self._fallback.reset()
        self._tracker.reset()
        self._native.clear()
        self._raw = self._scored = self._proposal = None

    def observe_window(self, observation: Any) -> None:
        """Table II statistics of the latest merged window: with the recent ones
        (``JobTracker``), the job the network scores."""
        try:
            self.job = self._tracker.update(
                MetaInput.from_observation(observation, servers=self.servers))
        except ConfigError as exc:
            log.debug("meta tuner: window %s not usable (%s); keeping the last one",
                        getattr(observation, "window", "?"), exc)
            return
        self._proposal = self._raw = self._scored = None

    def scores(self) -> npt.NDArray[np.float64]:
        """Predicted samples/s of every point of the space, in ``space.configs()`` order,
        anchored and the best mixed with the simulator's once native is measured (``score``);
        one inference per window (and adapted model), which ``predict`` answers from."""
        if self.job is None:
            raise ConfigError("the meta tuner has seen no window yet")
        self._collect_adaptation()
        if self._raw is None:
            self._raw = np.asarray(self.predictor.predict(self.job, self._encoded[:, 0],
                                                          self._encoded[:, 1]), np.float64)
        if self._scored is None:
            native = statistics.median(self._native) if self._native else None
            self._scored = score(self.job, self._encoded[:, 0], self._encoded[:, 1], self._raw,
                                 native)
        return self._scored

    def candidates(self) -> list[Config]:
        """Every point the network scores (none before a window carries statistics), so the
        coordinator sees its best scheduled picks also when it ranks native first."""
        return list(self._points) if self.job is not None else []

    def propose(self) -> Config:
        if self.job is None:
            if not self._warned:
                self._warned = True
                log.warning("meta tuner: no per-layer statistics yet; proposing with Bayesian "
                            "optimisation until a window carries them")
            return self._fallback.propose()
        if self._proposal is None:
            self._proposal = self._points[int(np.argmax(self.scores()))]
        return self._proposal

    def predict(self, configs: Sequence[Config]) -> list[float] | None:
        if self.job is None or not configs:
            return None
        encoded = np.array([self.space.encode(c) for c in configs], dtype=np.int64)
        positions = [self._position.get(tuple(e)) for e in encoded.tolist()]
        if None not in positions:
            scores = self.scores()
            return [float(scores[i]) for i in positions if i is not None]
        self.scores()  # the network's own prediction of native, for the anchor
        predicted = np.asarray(self.predictor.predict(self.job, encoded[:, 0], encoded[:, 1]),
                               np.float64)
        at = self._native_at
        if at is not None and self._raw is not None and self._native:  # anchored as in scores
            predicted = anchor(predicted, float(self._raw[at]), statistics.median(self._native))
        return [float(v) for v in predicted]

    def adapt(self, observations: Sequence[Any]) -> None:
        """Fine-tune the head on recent windows in the background (no-op for a predictor
        that is not a trained network, or while an adaptation is running)."""
        from common.meta._model import MetaModel
        from common.meta._train import Sample, adapt_head

        if not isinstance(self.predictor, MetaModel) or self._adaptation is not None:
            return
        samples = []
        tracker = JobTracker(self._tracker.history)  # each window as the tuner saw it
        for obs in observations:
            try:
                job = tracker.update(MetaInput.from_observation(obs, servers=self.servers))
            except ConfigError:
                continue
            partition, credit = self.space.encode(obs.config)
            samples.append(Sample(job, partition, credit, float(obs.speed)))
        # the environment changed: what the older windows showed of the link is stale
        self._tracker.keep_newest()
        if samples:
            log.debug("meta tuner: adapting the head on %d window(s) in the background",
                     len(samples))
            self._adaptation = adapt_head(self.predictor, samples)

    def _collect_adaptation(self) -> None:
        with self._lock:
            job = self._adaptation
            if job is None or not job.done:
                return
            self._adaptation = None
            try:
                head = job.result()
                if self.owns_predictor:  # in place: the encoder's weights stay shared
                    self.predictor.take_head(head)  # type: ignore[attr-defined]
                else:  # never change a model the caller handed in; the copy is ours
                    self.predictor = self.predictor.with_head(head)  # type: ignore[attr-defined]
                    self.owns_predictor = True
            except Exception as exc:
                log.warning("meta tuner: adaptation failed (%s); keeping the model", exc)
                return
            self._proposal = self._raw = self._scored = None
            self.adaptations += 1
            log.debug("meta tuner: adapted model in use")

    def close(self, timeout: float = 10.0) -> None:
        """End a running adaptation (the coordinator calls this when it stops)."""
        job = self._adaptation
        if job is not None and not job.stop(timeout):
            log.warning("meta tuner: adaptation did not stop within %.0f s", timeout)
        if not self.adaptations:
            return
        where = ""
        if self.adapted_path is not None:  # once, at the end
            try:
                where = f"; the last adapted model is {self.predictor.save(self.adapted_path)}"  # type: ignore[attr-defined]
            except Exception as exc:
                log.warning("meta tuner: cannot keep the adapted model (%s)", exc)
        log.info("meta tuner: adapted to this job %d time(s)%s", self.adaptations, where)

    def wait_adaptation(self, timeout: float | None = None) -> bool:
        """Block until a running adaptation is in use (tests, end of job); True if none left."""
        job = self._adaptation
        if job is not None:
            try:
                job.result(timeout)
            except TimeoutError:
                return False
            except Exception:
                pass
        self._collect_adaptation()
        return self._adaptation is None


def create_meta_tuner(*, space: SearchSpace | None = None, seed: int = 0,
                      base: Config | None = None, model_path: str | Path | None = None,
                      predictor: Predictor | None = None, **options: Any) -> Tuner:
    """The ``meta`` tuner with the model at ``model_path`` (default: AUTOBYTE_META_MODEL, else
    the pretrained model). A missing, corrupted or incompatible file (or one that needs Keras
    to load, without it) gives Bayesian optimisation instead, with a warning saying why."""
    if predictor is None:
        from common.meta._model import MetaModel

        path = model_path or environment(META_MODEL_ENV)
        options.setdefault("owns_predictor", True)
        try:
            predictor = MetaModel.load(path)
        except (ModelFileError, FrameworkMissingError) as exc:
            log.warning("meta tuner unavailable: %s; falling back to Bayesian optimisation",
                        exc)
            return BayesianTuner(space=space, seed=seed, base=base)
    log_dir = environment(LOG_DIR_ENV)
    options.setdefault("adapted_path",
                       Path(log_dir) / "meta-adapted.keras" if log_dir else None)
    return MetaTuner(predictor=predictor, space=space, seed=seed, base=base, **options)

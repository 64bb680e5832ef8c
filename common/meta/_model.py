"""The meta-network in Keras 3 (functional API), its file format and batched scoring.

    encoder: layer sequence -> Dense embedding (per layer) -> LSTM -> LSTM, concatenated with
             the static features (n, l, architecture, bandwidths, model slot)
    head:    [encoder output, candidate features] -> Dense -> Dense -> log(iteration / ref)

Training runs ``encoder`` and ``head`` as one model; scoring runs the encoder once for the job
and the head once over all candidates (the job vector is broadcast in the graph), so one
inference scores the whole grid. The ``.keras`` file carries a stamp (``autobyte_meta.json``
inside the zip) with the format and feature versions and the model vocabulary; a file without
a matching stamp is refused with ModelFileError rather than silently mis-predicting.

Keras is imported lazily: ``common.meta`` imports without it, and building or loading a model
without it raises FrameworkMissingError with the install command.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from common.errors import ConfigError, FrameworkMissingError, ModelFileError
from common.meta._features import (
    CANDIDATE_FEATURES,
    FEATURE_VERSION,
    KNOWN_MODELS,
    SEQ_FEATURES,
    SEQ_LEN,
    STATIC_FEATURES,
    MetaInput,
    encode_candidates,
    encode_job,
    speed_from_target,
)
from common.output import filtered_stderr, import_tensorflow

__all__ = ["FORMAT", "FORMAT_VERSION", "Head", "MetaModel", "build_network", "keras_module"]

FORMAT = "autobyte-meta"
FORMAT_VERSION = 1
STAMP = "autobyte_meta.json"
PRETRAINED = Path(__file__).with_name("pretrained.keras")


def keras_module() -> Any:
    """Import Keras 3 (few threads: the coordinator shares the CPU with training)."""
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
    try:
        with filtered_stderr():
            import_tensorflow()
            import keras
    except ImportError as exc:
        raise FrameworkMissingError(
            f"the meta-network needs Keras 3 with a backend (TensorFlow): pip install "
            f"'autobyte[tf]' ({exc})") from None
    if not str(getattr(keras, "__version__", "0")).startswith("3."):
        raise FrameworkMissingError(f"the meta-network needs Keras 3, found keras "
                                    f"{keras.__version__}: pip install 'keras>=3.10,<4'")
    return keras


def build_network(*, width: int = 32, lstm: int = 48, dense: int = 96, seed: int = 0) -> Any:
    """The training model: inputs sequence, static, candidate; output the normalised target.
    Its sub-models are the layers named "encoder" and "head"."""
    keras = keras_module()
    layers = keras.layers
    keras.utils.set_random_seed(seed)
    seq = keras.Input((SEQ_LEN, SEQ_FEATURES), name="sequence")
    static = keras.Input((STATIC_FEATURES,), name="static")
    x = layers.Masking(mask_value=0.0)(seq)
    x = layers.Dense(width, activation="relu", name="embed")(x)
    x = layers.LSTM(lstm, return_sequences=True, name="lstm1")(x)
    x = layers.LSTM(lstm, name="lstm2")(x)
    job = layers.Concatenate(name="job")([x, static])
    encoder = keras.Model([seq, static], job, name="encoder")

    job_in = keras.Input((lstm + STATIC_FEATURES,), name="job_vector")
    cand = keras.Input((CANDIDATE_FEATURES,), name="candidate")
    h = layers.Concatenate()([job_in, cand])
    h = layers.Dense(dense, activation="relu", name="dense1")(h)
    h = layers.Dense(dense, activation="relu", name="dense2")(h)
    out = layers.Dense(1, name="target")(h)
    head = keras.Model([job_in, cand], out, name="head")

    seq2 = keras.Input((SEQ_LEN, SEQ_FEATURES), name="sequence")
    static2 = keras.Input((STATIC_FEATURES,), name="static")
    cand2 = keras.Input((CANDIDATE_FEATURES,), name="candidate")
    y = head([encoder([seq2, static2]), cand2])
    return keras.Model([seq2, static2, cand2], y, name="autobyte_meta")


MIN_BATCH = 16  # batches are padded to a power of two, at least this


def _padded(rows: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``rows`` with its last row repeated up to a power of two (>= MIN_BATCH) rows: compiled
    graphs trace (XLA: compile, seconds) once per input shape, so only a few shapes occur."""
    count = len(rows)
    size = max(MIN_BATCH, 1 << max(0, count - 1).bit_length())
    if not count or size == count:
        return rows
    return np.concatenate([rows, np.repeat(rows[-1:], size - count, axis=0)])


@dataclasses.dataclass(frozen=True)
class Head:
    """The weights of a network's head (what an online adaptation changes), with the
    vocabulary of the model they belong to and its stamp info."""

    weights: tuple[npt.NDArray[Any], ...]
    vocabulary: tuple[str, ...]
    info: dict[str, Any]


class MetaModel:
    """A trained network plus its stamp; ``predict`` scores candidates in one batched call.

    ``vocabulary``: the known models seen in training (others use the "unknown" slot).
    """

    def __init__(self, network: Any, *, vocabulary: Sequence[str] = KNOWN_MODELS,
                 info: dict[str, Any] | None = None) -> None:
        self.network = network
        self.vocabulary = tuple(vocabulary)
        self.info = dict(info or {})
        self._scorer: Any = None
        self._encoder: Any = None
        self._lock = threading.Lock()

    def _build_scorer(self) -> Any:
        """One Keras model: job inputs with batch 1, candidates with batch C."""
        keras = keras_module()
        encoder = self.network.get_layer("encoder")
        head = self.network.get_layer("head")
        seq = keras.Input((SEQ_LEN, SEQ_FEATURES), name="sequence")
        static = keras.Input((STATIC_FEATURES,), name="static")
        cand = keras.Input((CANDIDATE_FEATURES,), name="candidate")
        vector = encoder([seq, static])
        tiled = keras.layers.Lambda(
            lambda t: keras.ops.broadcast_to(t[0], (keras.ops.shape(t[1])[0],
                                                    keras.ops.shape(t[0])[1])),
            name="tile")([vector, cand])
        scorer = keras.Model([seq, static, cand], head([tiled, cand]))
        scorer.compile(jit_compile=True)  # XLA: about 5x faster for a grid on this CPU
        return scorer

    def predict_targets(self, job: MetaInput, partitions: npt.ArrayLike,
                        credits: npt.ArrayLike) -> tuple[npt.NDArray[np.float64], Any]:
        encoded = encode_job(job, vocabulary=self.vocabulary)
        cands = encode_candidates(encoded, partitions, credits)
        count = len(cands)
        cands = _padded(cands)
        inputs = [encoded.sequence[None], encoded.static[None], cands]
        with self._lock:
            if self._scorer is None:
                with filtered_stderr():  # XLA's compile narrates itself in C++
                    self._scorer = self._build_scorer()
                    out = self._score(inputs)
            else:
                out = self._score(inputs)
        return np.asarray(out, np.float64).reshape(-1)[:count], encoded

    def _score(self, inputs: list[Any]) -> Any:
        assert self._scorer is not None
        try:
            return self._scorer.predict_on_batch(inputs)
        except Exception:  # no XLA for this backend or device: plain graph mode
            self._scorer.compile(jit_compile=False)
            return self._scorer.predict_on_batch(inputs)

    def encode(self, sequence: npt.NDArray[np.float32],
               static: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
        """The encoder's vectors for a batch of jobs (what adaptation fits the head on), in a
        compiled graph padded to a few batch sizes (eager, a dozen windows took 0.7 s here)."""
        count = len(sequence)
        sequence, static = _padded(sequence), _padded(static)
        with self._lock:
            if self._encoder is None:
                keras = keras_module()
                seq = keras.Input((SEQ_LEN, SEQ_FEATURES), name="sequence")
                stat = keras.Input((STATIC_FEATURES,), name="static")
                self._encoder = keras.Model([seq, stat],
                                            self.network.get_layer("encoder")([seq, stat]))
                self._encoder.compile(jit_compile=False)
                with filtered_stderr():  # the first graph run narrates oneDNN's fallbacks
                    out = self._encoder.predict_on_batch([sequence, static])
            else:
                out = self._encoder.predict_on_batch([sequence, static])
        return np.asarray(out, np.float64)[:count]

    def warm_up(self, candidates: int = 256) -> None:
        """Compile the scorer for one and for ``candidates`` candidates now (e.g. when a
        coordinator starts, before training), not at the first windows while training runs."""
        job = MetaInput(layer_backward_s=(0.01, 0.01), layer_bytes=(4096, 4096), workers=2,
                        arch="ps", bandwidth_down_bps=1e9, bandwidth_up_bps=1e9)
        for count in (1, candidates):
            self.predict(job, np.full(count, 65536), np.full(count, 65536))
        encoded = encode_job(job, vocabulary=self.vocabulary)
        for count in (MIN_BATCH, 2 * MIN_BATCH):  # adaptation: up to 20 recent windows
            self.encode(np.repeat(encoded.sequence[None], count, 0),
                        np.repeat(encoded.static[None], count, 0))

    def predict(self, job: MetaInput, partitions: npt.ArrayLike,
                credits: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Predicted samples/s of ``job`` under each (partition, credit) in bytes."""
        targets, encoded = self.predict_targets(job, partitions, credits)
        return speed_from_target(targets, encoded.samples_per_step, encoded.ref_s)

    def head(self) -> Head:
        """A copy of the head's weights, with this model's vocabulary and stamp info."""
        with self._lock:
            weights = self.network.get_layer("head").get_weights()
        return Head(tuple(weights), self.vocabulary, dict(self.info))

    def take_head(self, head: Head) -> None:
        """Put ``head`` (an online adaptation of this model's) in place: its weights are
        copied into this network, whose compiled scorer reads them as variables, so the next
        prediction needs no new XLA compile (seconds of rank 0's CPU while training runs, for
        every adaptation: the coordinator logs how long its first compile, the warm-up,
        took), and no copy of the network is made."""
        if head.vocabulary != self.vocabulary:
            raise ConfigError(f"an adapted head must come from the same model: vocabulary "
                              f"{head.vocabulary} differs from {self.vocabulary}")
        with self._lock:
            self.network.get_layer("head").set_weights(list(head.weights))
            self.info = dict(head.info)

    def with_head(self, head: Head) -> MetaModel:
        """A copy of this model with ``head`` in place (this one is not changed)."""
        copy = MetaModel(self._network_copy(), vocabulary=self.vocabulary, info=self.info)
        copy.take_head(head)
        return copy

    def _network_copy(self) -> Any:
        """The network with the same weights, and no optimizer state."""
        keras = keras_module()
        with self._lock:
            clone = keras.models.clone_model(self.network)
            clone.set_weights(self.network.get_weights())
        return clone

    def save(self, path: str | Path) -> Path:
        """Write one ``.keras`` file with the stamp (atomically: a reader never sees half)."""
        path = Path(path)
        if path.suffix != ".keras":
            raise ModelFileError(f"a meta-network file must end in .keras, got {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.keras")
        bare = self._network_copy()  # without optimizer state: half the size, same predictions
        try:
            bare.save(tmp)
            stamp = {"format": FORMAT, "format_version": FORMAT_VERSION,
                     "feature_version": FEATURE_VERSION, "vocabulary": list(self.vocabulary),
                     "info": self.info}
            with zipfile.ZipFile(tmp, "a") as archive:
                archive.writestr(STAMP, json.dumps(stamp, indent=1, default=str))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    @classmethod
    def load(cls, path: str | Path | None = None) -> MetaModel:
        """Load a stamped file (default: the pretrained model shipped with the package).

        Raises ModelFileError when the file is missing, corrupted or from another version,
        FrameworkMissingError when Keras is not installed."""
        path = Path(path) if path is not None else PRETRAINED
        if not path.is_file():
            raise ModelFileError(f"no meta-network file at {path}; train one with "
                                 f"`autobyte meta train` or set AUTOBYTE_META_MODEL")
        try:
            with zipfile.ZipFile(path) as archive:
                stamp = json.loads(archive.read(STAMP))
        except KeyError:
            raise ModelFileError(f"{path} is a .keras file without an AutoByte stamp "
                                 f"({STAMP}); it is not a meta-network") from None
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise ModelFileError(f"{path} is corrupted or not a .keras file ({exc})") from None
        expected = {"format": FORMAT, "format_version": FORMAT_VERSION,
                    "feature_version": FEATURE_VERSION}
        found = {k: stamp.get(k) for k in expected} if isinstance(stamp, dict) else {}
        if found != expected:
            raise ModelFileError(f"{path} is incompatible: it has {found}, this AutoByte needs "
                                 f"{expected}; retrain with `autobyte meta train`")
        keras = keras_module()
        try:
            network = keras.saving.load_model(path, compile=False, safe_mode=True)
            network.get_layer("encoder")
            network.get_layer("head")
        except Exception as exc:  # Keras raises many types for a damaged archive
            raise ModelFileError(f"{path} could not be loaded as a meta-network: "
                                 f"{type(exc).__name__}: {exc}") from None
        return cls(network, vocabulary=stamp.get("vocabulary", KNOWN_MODELS),
                   info=stamp.get("info", {}))

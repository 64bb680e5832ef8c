"""The meta-network in Keras 3 (functional API), its file format and batched scoring.

    encoder: layer sequence -> Dense embedding (per layer) -> LSTM -> LSTM, concatenated with
             the static features (n, l, architecture, bandwidths, model slot)
    head:    [encoder output, candidate features] -> Dense -> Dense -> log(iteration / ref)

Training runs ``encoder`` and ``head`` as one Keras model; scoring runs the same layers in
NumPy (``common.meta._network``): the encoder once for the job, the head once over all
candidates, so one inference scores the whole grid. The ``.keras`` file carries a stamp
(``autobyte_meta.json`` inside the zip) with the format and feature versions and the model
vocabulary, and the weights as a NumPy archive; a file without a matching stamp is refused
with ModelFileError rather than silently mis-predicting.

Keras is imported lazily, to train or save a model (or to load a file without the NumPy
weights): without it those raise FrameworkMissingError with the install command. A model loaded
from a file and then adapted is saved without Keras: the file it came from gives the Keras part,
with the arrays that changed rewritten where that file held them (``_write_from_source``).
"""

from __future__ import annotations

import dataclasses
import io
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
from common.meta import _network
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
from common.meta._network import ENCODER, HEAD, WEIGHTS, Weights, weights_of
from common.output import filtered_stderr, import_tensorflow

__all__ = ["FORMAT", "FORMAT_VERSION", "Head", "MetaModel", "build_network", "keras_module"]

FORMAT = "autobyte-meta"
FORMAT_VERSION = 1
STAMP = "autobyte_meta.json"
PRETRAINED = Path(__file__).with_name("pretrained.keras")
KERAS_WEIGHTS = "model.weights.h5"  # the member of a .keras zip that Keras loads weights from


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


@dataclasses.dataclass(frozen=True)
class Head:
    """The weights of a network's head (what an online adaptation changes), with the
    vocabulary of the model they belong to and its stamp info."""

    weights: tuple[npt.NDArray[Any], ...]
    vocabulary: tuple[str, ...]
    info: dict[str, Any]


class MetaModel:
    """A trained network's weights plus its stamp; ``predict`` scores candidates in NumPy
    (``common.meta._network``), without Keras.

    Made from a Keras ``network`` (training) or from ``weights`` (a loaded file); ``network``
    builds the Keras model from the weights when training needs it. ``vocabulary``: the known
    models seen in training (others use the "unknown" slot).
    """

    def __init__(self, network: Any = None, *, weights: Weights | None = None,
                 vocabulary: Sequence[str] = KNOWN_MODELS,
                 info: dict[str, Any] | None = None) -> None:
        if (network is None) == (weights is None):
            raise ValueError("MetaModel needs a Keras network or its weights, one of them")
        self._keras_net = network
        self._weights: Weights = weights_of(network) if weights is None else dict(weights)
        self.vocabulary = tuple(vocabulary)
        self.info = dict(info or {})
        self._lock = threading.Lock()
        self._source: Path | None = None  # the file these weights were loaded from

    @property
    def network(self) -> Any:
        """The Keras model with these weights (built on first use; needs Keras)."""
        with self._lock:
            if self._keras_net is None:
                self._keras_net = self.keras_copy()
            return self._keras_net

    def keras_copy(self) -> Any:
        """A new Keras model with these weights, e.g. to train on (needs Keras)."""
        return self._keras(self._weights)

    @staticmethod
    def _keras(weights: Weights) -> Any:
        network = build_network(width=weights["embed"][0].shape[-1],
                                lstm=weights["lstm1"][1].shape[0],
                                dense=weights["dense1"][0].shape[-1])
        for part, names in (("encoder", ENCODER), ("head", HEAD)):
            model = network.get_layer(part)
            for name in names:
                model.get_layer(name).set_weights(list(weights[name]))
        return network

    def predict_targets(self, job: MetaInput, partitions: npt.ArrayLike,
                        credits: npt.ArrayLike) -> tuple[npt.NDArray[np.float64], Any]:
        encoded = encode_job(job, vocabulary=self.vocabulary)
        cands = encode_candidates(encoded, partitions, credits)
        weights = self._weights  # one set, whatever an adaptation puts in place meanwhile
        vector = _network.encode(weights, encoded.sequence[None], encoded.static[None])
        return _network.score(weights, vector, cands).reshape(-1), encoded

    def encode(self, sequence: npt.NDArray[np.float32],
               static: npt.NDArray[np.float32]) -> npt.NDArray[np.float64]:
        """The encoder's vectors for a batch of jobs (what adaptation fits the head on)."""
        return _network.encode(self._weights, sequence, static)

    def predict(self, job: MetaInput, partitions: npt.ArrayLike,
                credits: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """Predicted samples/s of ``job`` under each (partition, credit) in bytes."""
        targets, encoded = self.predict_targets(job, partitions, credits)
        return speed_from_target(targets, encoded.samples_per_step, encoded.ref_s)

    def head(self) -> Head:
        """A copy of the head's weights, with this model's vocabulary and stamp info."""
        weights = self._weights
        return Head(tuple(w.astype(np.float32) for name in HEAD for w in weights[name]),
                    self.vocabulary, dict(self.info))

    def take_head(self, head: Head) -> None:
        """Put ``head`` (an online adaptation of this model's) in place; the encoder's
        weights are shared, not copied."""
        if head.vocabulary != self.vocabulary:
            raise ConfigError(f"an adapted head must come from the same model: vocabulary "
                              f"{head.vocabulary} differs from {self.vocabulary}")
        layers = dict(self._weights)
        arrays = [np.asarray(w, np.float64) for w in head.weights]
        for i, name in enumerate(HEAD):
            if [w.shape for w in arrays[2 * i:2 * i + 2]] != [w.shape for w in layers[name]]:
                raise ConfigError(f"an adapted head must have the head's shapes: {name} "
                                  f"differs")
            layers[name] = tuple(arrays[2 * i:2 * i + 2])
        with self._lock:
            self._weights = layers
            self.info = dict(head.info)
            if self._keras_net is not None:
                self._keras_net.get_layer("head").set_weights(list(head.weights))

    def with_head(self, head: Head) -> MetaModel:
        """A copy of this model with ``head`` in place (this one is not changed)."""
        copy = MetaModel(weights=self._weights, vocabulary=self.vocabulary, info=self.info)
        copy._source = self._source
        copy.take_head(head)
        return copy

    def save(self, path: str | Path) -> Path:
        """Write one ``.keras`` file with the stamp (atomically: a reader never sees half)."""
        path = Path(path)
        if path.suffix != ".keras":
            raise ModelFileError(f"a meta-network file must end in .keras, got {path}")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.keras")
        weights = self._weights
        try:
            if not self._write_from_source(tmp, weights):
                self._keras(weights).save(tmp)  # a new model: no optimizer state
            stamp = {"format": FORMAT, "format_version": FORMAT_VERSION,
                     "feature_version": FEATURE_VERSION, "vocabulary": list(self.vocabulary),
                     "info": self.info}
            with zipfile.ZipFile(tmp, "a") as archive:
                archive.writestr(STAMP, json.dumps(stamp, indent=1, default=str))
                archive.writestr(WEIGHTS, _network.to_npz(weights), zipfile.ZIP_DEFLATED)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        return path

    def _write_from_source(self, tmp: Path, weights: Weights) -> bool:
        """Write ``tmp``'s Keras part as the file these weights were loaded from, each array
        that changed since put where that file held it, so saving an adapted model needs no
        Keras (the coordinator saving one at a job's end imported TensorFlow for it: 5 s of a
        core). False where that cannot be done exactly (no source file, no h5py, a changed
        array not found once by its value); the caller then builds the network with Keras."""
        if self._source is None:
            return False
        try:
            import h5py
        except ImportError:
            return False
        try:
            with zipfile.ZipFile(self._source) as archive:
                old = _network.from_npz(archive.read(WEIGHTS), str(self._source))
                members = [(item, archive.read(item.filename)) for item in archive.infolist()
                           if item.filename not in (STAMP, WEIGHTS)]
        except (KeyError, OSError, zipfile.BadZipFile, ModelFileError):
            return False
        at = next((i for i, (item, _) in enumerate(members)
                   if item.filename == KERAS_WEIGHTS), None)
        if at is None or old.keys() != weights.keys():
            return False
        buffer = io.BytesIO(members[at][1])
        with h5py.File(buffer, "r+") as h5:
            stored: list[Any] = []
            h5.visititems(lambda _, node: stored.append(node)
                          if isinstance(node, h5py.Dataset) else None)
            for name, arrays in weights.items():
                for before, after in zip(old[name], arrays, strict=True):
                    before, after = before.astype(np.float32), after.astype(np.float32)
                    if before.shape != after.shape:
                        return False
                    if np.array_equal(before, after):
                        continue
                    found = [d for d in stored
                             if d.shape == before.shape and np.array_equal(d[()], before)]
                    if len(found) != 1:
                        return False
                    found[0][...] = after
        members[at] = (members[at][0], buffer.getvalue())
        with zipfile.ZipFile(tmp, "w") as archive:
            for item, data in members:
                archive.writestr(item, data)
        return True

    @classmethod
    def load(cls, path: str | Path | None = None) -> MetaModel:
        """Load a stamped file (default: the pretrained model shipped with the package).

        Reads the weights the file keeps for NumPy, so no Keras is needed. Raises
        ModelFileError when the file is missing, corrupted or from another version;
        FrameworkMissingError for a file without those weights when Keras is missing."""
        path = Path(path) if path is not None else PRETRAINED
        if not path.is_file():
            raise ModelFileError(f"no meta-network file at {path}; train one with "
                                 f"`autobyte meta train` or set AUTOBYTE_META_MODEL")
        try:
            with zipfile.ZipFile(path) as archive:
                stamp = json.loads(archive.read(STAMP))
                packed = archive.read(WEIGHTS) if WEIGHTS in archive.namelist() else None
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
        vocabulary, info = stamp.get("vocabulary", KNOWN_MODELS), stamp.get("info", {})
        if packed is not None:
            model = cls(weights=_network.from_npz(packed, str(path)), vocabulary=vocabulary,
                        info=info)
            model._source = path
            return model
        keras = keras_module()  # a file saved before its weights were kept for NumPy
        try:
            network = keras.saving.load_model(path, compile=False, safe_mode=True)
            weights = _network.weights_of(network)
        except Exception as exc:  # Keras raises many types for a damaged archive
            raise ModelFileError(f"{path} could not be loaded as a meta-network: "
                                 f"{type(exc).__name__}: {exc}") from None
        _network.check_shapes(weights, str(path))
        return cls(network, vocabulary=vocabulary, info=info)

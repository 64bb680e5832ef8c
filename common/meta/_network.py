"""The meta-network's forward pass in NumPy: what a running job's tuner computes.

Training needs Keras; scoring candidates does not. Loading the network in Keras costs rank 0's
host seconds of CPU and most of a GiB before every tuned job, on cores the job shares, and an
MXNet job would need TensorFlow for it. Here the weights come from the model
file (``WEIGHTS``, a NumPy archive inside the ``.keras`` zip) and the same layers run in a few
array operations: Masking, a per-layer Dense embedding (relu), two LSTMs (Keras's gate order
i, f, c, o; masked steps keep the state), the static features concatenated, then the head's
relu, relu, linear Dense layers.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from common.errors import ModelFileError
from common.meta._features import CANDIDATE_FEATURES, SEQ_FEATURES, STATIC_FEATURES

__all__ = ["ENCODER", "HEAD", "WEIGHTS", "Weights", "check_shapes", "encode", "from_npz", "score",
           "to_npz", "weights_of"]

WEIGHTS = "autobyte_weights.npz"  # the member of the .keras zip that scoring reads
ENCODER = ("embed", "lstm1", "lstm2")
HEAD = ("dense1", "dense2", "target")
_COUNTS = {"embed": 2, "lstm1": 3, "lstm2": 3, "dense1": 2, "dense2": 2, "target": 2}

Weights = Mapping[str, tuple[npt.NDArray[np.float64], ...]]  # layer name -> Keras's order


def weights_of(network: Any) -> dict[str, tuple[npt.NDArray[np.float64], ...]]:
    """The weights of a Keras meta-network (``build_network``'s layers), as float64."""
    out: dict[str, tuple[npt.NDArray[np.float64], ...]] = {}
    for part, names in (("encoder", ENCODER), ("head", HEAD)):
        model = network.get_layer(part)
        for name in names:
            out[name] = tuple(np.asarray(w, np.float64) for w in model.get_layer(name)
                              .get_weights())
    return out


def to_npz(weights: Weights) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{f"{name}/{i}": w.astype(np.float32)
                     for name, arrays in weights.items() for i, w in enumerate(arrays)})
    return buf.getvalue()


def from_npz(data: bytes, source: str) -> dict[str, tuple[npt.NDArray[np.float64], ...]]:
    """Weights read back from ``to_npz``'s bytes, their shapes checked against each other and
    the features; ModelFileError names ``source`` and what is wrong."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            arrays = {k: np.asarray(archive[k], np.float64) for k in archive.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ModelFileError(f"{source}: its weights ({WEIGHTS}) are damaged: {exc}") from None
    try:
        weights = {name: tuple(arrays[f"{name}/{i}"] for i in range(count))
                   for name, count in _COUNTS.items()}
    except KeyError as exc:
        raise ModelFileError(f"{source}: its weights ({WEIGHTS}) lack {exc}") from None
    check_shapes(weights, source)
    return weights


def check_shapes(weights: Weights, source: str) -> None:
    """ModelFileError naming ``source`` unless the layers' shapes fit each other and the
    features."""
    width = weights["embed"][0].shape[-1]
    units = weights["lstm1"][1].shape[0]
    dense = weights["dense1"][0].shape[-1]
    expected = {
        "embed": [(SEQ_FEATURES, width), (width,)],
        "lstm1": [(width, 4 * units), (units, 4 * units), (4 * units,)],
        "lstm2": [(units, 4 * units), (units, 4 * units), (4 * units,)],
        "dense1": [(units + STATIC_FEATURES + CANDIDATE_FEATURES, dense), (dense,)],
        "dense2": [(dense, dense), (dense,)],
        "target": [(dense, 1), (1,)],
    }
    for name, shapes in expected.items():
        found = [w.shape for w in weights[name]]
        if found != shapes:
            raise ModelFileError(f"{source}: layer {name} has weights of shapes {found}, the "
                                 f"features need {shapes}; retrain with `autobyte meta train`")


def _sigmoid(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.asarray(0.5 * (np.tanh(0.5 * x) + 1.0))  # 1 / (1 + e^-x), without overflow


def _lstm_step(x: npt.NDArray[np.float64], h: npt.NDArray[np.float64],
               c: npt.NDArray[np.float64], recurrent: npt.NDArray[np.float64]
               ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """One step of a Keras LSTM, ``x`` already projected by its kernel and bias."""
    units = recurrent.shape[0]
    z = x + h @ recurrent
    gates = _sigmoid(z)
    c = gates[:, units:2 * units] * c + gates[:, :units] * np.tanh(z[:, 2 * units:3 * units])
    return gates[:, 3 * units:] * np.tanh(c), c


def encode(weights: Weights, sequence: npt.ArrayLike, static: npt.ArrayLike
           ) -> npt.NDArray[np.float64]:
    """The encoder's job vectors of a batch: ``sequence`` (jobs, steps, SEQ_FEATURES), padded
    with zero rows (masked, as Keras's Masking layer does); ``static`` (jobs, features)."""
    seq = np.asarray(sequence, np.float64)
    stat = np.asarray(static, np.float64)
    mask = np.any(seq != 0.0, axis=-1)
    steps = int(np.flatnonzero(mask.any(axis=0)).max(initial=-1)) + 1  # past it: padding
    kernel, bias = weights["embed"]
    x = np.maximum(seq[:, :steps] @ kernel + bias, 0.0)
    first, second = weights["lstm1"], weights["lstm2"]
    x1 = x @ first[0] + first[2]  # the input projections of every step at once
    units = first[1].shape[0]
    h1 = c1 = h2 = c2 = np.zeros((len(seq), units))
    every = bool(mask[:, :steps].all())
    for t in range(steps):
        n1, m1 = _lstm_step(x1[:, t], h1, c1, first[1])
        n2, m2 = _lstm_step(n1 @ second[0] + second[2], h2, c2, second[1])
        if every:
            h1, c1, h2, c2 = n1, m1, n2, m2
        else:
            on = mask[:, t:t + 1]
            h1, c1 = np.where(on, n1, h1), np.where(on, m1, c1)
            h2, c2 = np.where(on, n2, h2), np.where(on, m2, c2)
    return np.concatenate([h2, stat], axis=1)


def score(weights: Weights, vectors: npt.NDArray[np.float64],
          candidates: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """The head's targets (rows, 1) for job ``vectors`` (one row, or one per candidate) and
    ``candidates`` (rows, CANDIDATE_FEATURES)."""
    cand = np.asarray(candidates, np.float64)
    h = np.concatenate([np.broadcast_to(vectors, (len(cand), vectors.shape[-1])), cand],
                       axis=1)
    for name in HEAD[:-1]:
        kernel, bias = weights[name]
        h = np.maximum(h @ kernel + bias, 0.0)
    kernel, bias = weights[HEAD[-1]]
    return np.asarray(h @ kernel + bias, np.float64)

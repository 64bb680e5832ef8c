"""MXNet's 2-bit gradient compression on AutoByte's blocks, its residuals kept per element.

The native store compresses each push with a residual per native key, so a block's key would
lose its residual when the layout changes. Each block is therefore quantized here first, as
MXNet quantizes (residual += gradient; at or above the threshold send +threshold and subtract
it, at or below -threshold send -threshold and add it, else send 0), with a residual per tensor
element of AutoByte's own that stays with its elements across layouts. What is pushed is then
exactly +-threshold or 0: the native store sends it in 2 bits and its own residual stays zero,
and the servers decompress as with ``dist_sync``. The control key's integers travel as bits,
each bit as 0 or the threshold, which the compression carries exactly (``wire``/``unwire``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Collection, Hashable, Mapping, Sequence
from typing import Any

import mxnet as mx
import numpy
import numpy.typing as npt

from autobyte_mx import _engine
from common.errors import ConfigError, UnsupportedError

__all__ = ["Compression", "parse_compression", "unwire", "wire"]

BITS = 32  # per control slot: its values (and their sums over workers) stay below 2**32


def parse_compression(params: Any) -> float:
    """The threshold of ``{'type': '2bit', 'threshold': t}``; a clear error otherwise."""
    if not isinstance(params, Mapping) or params.get("type") != "2bit":
        kind = params.get("type") if isinstance(params, Mapping) else params
        raise UnsupportedError(f"gradient compression type {kind!r}: AutoByte supports "
                               "{'type': '2bit', 'threshold': t} (MXNet 1.9's only type)")
    unknown = set(params) - {"type", "threshold"}
    if unknown:
        raise ConfigError(f"compression_params has unknown keys {sorted(unknown)}; allowed: "
                          "'type', 'threshold'")
    try:
        threshold = float(params.get("threshold", 0.5))
    except (TypeError, ValueError):
        threshold = math.nan
    if not (threshold > 0 and math.isfinite(threshold)):
        raise ConfigError(f"2-bit compression needs a threshold > 0, got "
                          f"threshold={params.get('threshold')!r}")
    return threshold


def wire(values: Sequence[float], threshold: float) -> npt.NDArray[numpy.float32]:
    """Control values (non-negative integers) as bits, each bit 0 or ``threshold``."""
    out = numpy.zeros(len(values) * BITS, dtype=numpy.float32)
    for slot, value in enumerate(values):
        v = int(value)
        for bit in range(BITS):
            if v >> bit & 1:
                out[slot * BITS + bit] = threshold
    return out


def unwire(summed: npt.ArrayLike, threshold: float) -> list[float]:
    """The sums over workers of the values ``wire`` encoded: each bit's count of workers."""
    counts = numpy.rint(numpy.asarray(summed, dtype=numpy.float64) / numpy.float32(threshold))
    weights = 2.0 ** numpy.arange(BITS)
    return [float(c) for c in counts.reshape(-1, BITS) @ weights]


class Compression:
    """Quantizes blocks in place with per-element residuals (see the module docstring)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = float(numpy.float32(threshold))
        self._residuals: dict[Hashable, Any] = {}

    def check(self, key: Hashable, dtype: Any) -> None:
        if numpy.dtype(dtype) != numpy.float32:
            raise UnsupportedError(f"key {key!r} is {numpy.dtype(dtype).name}: 2-bit "
                                   "compression works on float32 gradients only")

    def quantize(self, group: Any, block: int, skip: Collection[int] = (),
                 priority: int = 0) -> None:
        """Queue the quantization of ``group``'s block ``block`` in its buffer, but for the
        members in ``skip`` (not issued this step: their slots hold other values)."""
        buffer = group.buffers[block]
        pieces, residuals, at = [], [], 0
        for seg in buffer.block.segments:
            if seg.tensor not in skip:
                tensor = group.tensors[seg.tensor]
                residual = self._residuals.get(tensor.key)
                if residual is None:
                    residual = self._residuals[tensor.key] = mx.nd.zeros((tensor.size,))
                pieces.append((seg.start, seg.stop, at))
                residuals.append(residual)
            at += seg.size
        if pieces:
            _engine.push_sync(functools.partial(self._run, buffer.array, pieces, residuals),
                              mutable=[buffer.array, *dict.fromkeys(residuals)],
                              priority=priority, name="autobyte_2bit")

    def _run(self, array: Any, pieces: list[tuple[int, int, int]],
             residuals: list[Any]) -> None:
        data, t = _engine.host_view(array).reshape(-1), self.threshold
        for (start, stop, at), residual in zip(pieces, residuals, strict=True):
            r = _engine.host_view(residual)[start:stop]
            v = data[at:at + stop - start]
            r += v
            up, down = r >= t, r <= -t
            r[up] -= t
            r[down] += t
            v[...] = 0
            v[up] = t
            v[down] = -t

"""The arrays of each key, one per device of this worker, as MXNet's kvstores take them.

Several devices per worker: their gradients are summed on the worker before anything is sent,
as ``dist_sync`` does (its CommCPU reduce), and every device gets the result back. On the
native path with the optimizer on the servers the native store itself does both (``_issue``);
blocks of AutoByte's own buffers take ``local_sum``.

The sum is an engine op of AutoByte's own (numpy on the arrays' host memory), not MXNet's
``add_n``: ``add_n`` takes a temp-space resource, and another op queued on that resource (the
``concat`` that copies a split tensor's result back) may be waiting behind a block's gate that
itself waits for this sum: a deadlock. A device array that is not on the CPU is copied there
first (a plain copy takes no resource).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import mxnet as mx
import numpy

from autobyte_mx import _engine
from autobyte_mx._layout import Tensor, same
from common.errors import ConfigError, UnsupportedError

__all__ = ["DeviceSum", "check_dense", "check_values", "local_sum", "outs", "pairs"]


def pairs(key: Any, value: Any) -> tuple[list[Hashable], list[list[Any]]]:
    """Keys and, per key, its arrays: ``(k, a)``, ``(k, [a0, a1])`` (devices) or
    ``([k1, k2], [a, [b0, b1]])``."""
    if isinstance(key, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(key):
            raise ConfigError(f"{len(key)} keys need as many values, got {value!r}")
        return list(key), [_arrays(k, v) for k, v in zip(key, value, strict=True)]
    return [key], [_arrays(key, value)]


def outs(keys: list[Hashable], out: Any) -> list[list[Any]]:
    """Per key, the arrays its result goes to."""
    if len(keys) == 1:
        return [_arrays(keys[0], out)]
    if not isinstance(out, (list, tuple)) or len(out) != len(keys):
        raise ConfigError(f"{len(keys)} keys need as many outputs, got {out!r}")
    return [_arrays(k, o) for k, o in zip(keys, out, strict=True)]


def check_dense(key: Hashable, value: Any) -> None:
    stype = getattr(value, "stype", "default")
    if stype != "default":
        raise UnsupportedError(f"key {key!r} has a {stype} array: AutoByte supports dense "
                               "gradients only; use kvstore='dist_sync' for sparse models")


def check_values(tensor: Tensor, values: list[Any]) -> None:
    """Check this worker's gradients of ``tensor`` (one per device) once per set of arrays:
    the Trainer passes the same arrays every step."""
    if same(tensor.checked, values):
        return
    for value in values:
        check_dense(tensor.key, value)
        if tuple(value.shape) != tensor.shape:
            raise ConfigError(f"key {tensor.key!r}: value shape {tuple(value.shape)} "
                              f"differs from the initialised shape {tensor.shape}")
    tensor.checked = tuple(values)
    tensor.devices = None


def local_sum(tensor: Tensor, values: list[Any], priority: int) -> Any:
    """This worker's gradient of ``tensor`` (``values`` checked): with several devices, their
    sum, queued now."""
    if len(values) == 1:
        return values[0]
    if tensor.devices is None:
        tensor.devices = DeviceSum(values, tensor.shape, tensor.dtype)
    return tensor.devices.push(priority)


def _arrays(key: Hashable, value: Any) -> list[Any]:
    """One key's arrays, one per device of this worker (an array alone: one device)."""
    arrays = list(value) if isinstance(value, (list, tuple)) else [value]
    if not arrays:
        raise ConfigError(f"key {key!r}: no arrays given")
    return arrays


class DeviceSum:
    """The sum of one key's gradients on this worker's devices, into an array of its own."""

    __slots__ = ("_staged", "_views", "arrays", "out")

    def __init__(self, arrays: Sequence[Any], shape: tuple[int, ...], dtype: Any) -> None:
        self.arrays = tuple(arrays)
        self.out = mx.nd.zeros(shape, dtype=dtype)
        self._staged = [a if a.context.device_type == "cpu" else mx.nd.zeros(shape, dtype=dtype)
                        for a in self.arrays]
        self._views: list[Any] | None = None

    def push(self, priority: int) -> Any:
        """Queue this step's sum; returns the array it lands in."""
        for array, staged in zip(self.arrays, self._staged, strict=True):
            if staged is not array:
                array.copyto(staged)
        _engine.push_sync(self._sum, const=self._staged, mutable=[self.out], priority=priority,
                          name="autobyte_device_sum")
        return self.out

    def _sum(self) -> None:
        if self._views is None:  # the arrays are written by now, so allocated
            self._views = [_engine.host_view(a) for a in (*self._staged, self.out)]
        *parts, out = self._views
        numpy.add(parts[0], parts[1], out=out)
        for part in parts[2:]:
            numpy.add(out, part, out=out)

"""Several devices per worker: their gradients are summed on the worker before anything is sent,
as ``dist_sync`` does (its CommCPU reduce), and every device gets the result back.

The sum is an engine op of AutoByte's own (numpy on the arrays' host memory), not MXNet's
``add_n``: ``add_n`` takes a temp-space resource, and another op queued on that resource (the
``concat`` that copies a split tensor's result back) may be waiting behind a block's gate that
itself waits for this sum: a deadlock. A device array that is not on the CPU is copied there
first (a plain copy takes no resource).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mxnet as mx
import numpy

from autobyte_mx import _engine

__all__ = ["DeviceSum"]


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

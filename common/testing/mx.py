"""Fakes of MXNet's native store, so the kvstore runs in one process without ps-lite.

The MXNet adapter is imported when a fake is made, not with this module: ``common.testing``
itself stays framework-free.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from typing import Any

__all__ = ["FakeCalls", "FakeNative", "RecordingTransport"]


class FakeNative:
    """Native ``dist_sync`` as seen by one of ``workers`` identical workers: a data key's
    pushpull returns ``workers`` times the value, in engine operations (so they wait for
    AutoByte's gates, like the real ones: a copy, then an async op on the array's memory);
    the control key sums one worker."""

    rank, num_workers = 0, 1

    def __init__(self, workers: int = 3) -> None:
        from autobyte_mx import _engine
        from autobyte_mx._layout import CONTROL_KEY

        self.workers = workers
        self.stored: dict[Hashable, Any] = {}
        self.pushed: list[list[Hashable]] = []
        self.controls = 0  # control key exchanges
        self._engine, self._control_key = _engine, CONTROL_KEY

    def init(self, key: Any, value: Any) -> None:
        for k, v in zip(*_lists(key, value), strict=True):
            self.stored[k] = v.copy()

    def pushpull(self, key: Any, value: Any, out: Any = None, priority: int = 0) -> None:
        keys, values = _lists(key, value)
        if keys == [self._control_key]:
            self.controls += 1
        else:
            self.pushed.append(keys)
        outs = values if out is None else _lists(key, out)[1]
        for k, v, target in zip(keys, values, outs, strict=True):
            if target is not v:
                v.copyto(target)
            factor = 1 if k == self._control_key else self.workers
            self._engine.push_callback(functools.partial(self._scale, target, factor),
                                       mutable=[target])

    def pull(self, key: Any, out: Any = None, priority: int = 0) -> None:
        for k, o in zip(*_lists(key, out), strict=True):
            self.stored[k].copyto(o)

    def _barrier(self) -> None:
        pass

    def _scale(self, array: Any, factor: int) -> None:
        """Multiply an array in place, on its memory (inside an engine op: no waiting)."""
        self._engine.host_view(array)[:] *= factor


class FakeCalls:
    """``autobyte_mx._transport.Calls`` on a ``FakeNative``: its ``pushpull`` as MXNet's."""

    def __init__(self, kv: FakeNative) -> None:
        self._kv = kv

    def pushpull(self, keys: list[int], values: list[Any], outs: list[Any],
                 priority: int) -> None:
        self._kv.pushpull(keys, values, out=outs, priority=priority)

    def close(self) -> None:
        pass


class RecordingTransport:
    """``autobyte_mx._transport.Transport`` that keeps each exchanged vector and sends none."""

    def __init__(self) -> None:
        self.pushed: list[list[float]] = []

    def exchange(self, keys: list[Hashable], values: list[Any], outs: Any = None,
                 priority: int = 0) -> None:
        (value,) = values
        self.pushed.append([float(x) for x in value.asnumpy()])


def _lists(key: Any, value: Any) -> tuple[list[Any], list[Any]]:
    return (list(key), list(value)) if isinstance(key, list) else ([key], [value])

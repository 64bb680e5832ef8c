"""Native pushpulls whose C arguments are built once.

``KVStore.pushpull`` converts its keys and arrays to ctypes arrays on every call. AutoByte
issues the same (keys, sources, destinations) every step, with scheduling off once per tensor
(160 calls a step on a MobileNetV2), so ``Calls`` keeps each call's arguments and checks only
that the arrays are the same objects.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from mxnet.base import _LIB, NDArrayHandle, check_call

__all__ = ["Calls", "PushPull", "Transport"]

_MAX_CALLS = 4096  # distinct calls kept; more only when the keys and arrays keep changing


class PushPull:
    """``kv.pushpull(keys, values, out=outs)`` with its arguments converted once."""

    __slots__ = ("_handle", "_keys", "_n", "_outs", "_values", "arrays")

    def __init__(self, kv: Any, keys: Sequence[int], values: Sequence[Any],
                 outs: Sequence[Any]) -> None:
        if not len(keys) == len(values) == len(outs):
            raise ValueError(f"{len(keys)} keys need as many values and outputs, got "
                             f"{len(values)} and {len(outs)}")
        self.arrays = (tuple(values), tuple(outs))  # keeps the handles alive
        self._handle = kv.handle
        self._n = len(keys)
        self._keys = (ctypes.c_int * self._n)(*keys)
        self._values = (NDArrayHandle * self._n)(*[a.handle for a in values])
        self._outs = (NDArrayHandle * self._n)(*[a.handle for a in outs])

    def __call__(self, priority: int) -> None:
        check_call(_LIB.MXKVStorePushPull(self._handle, self._n, self._keys, self._n,
                                          self._keys, self._values, self._outs,
                                          ctypes.c_int(priority)))


class Calls:
    """The prepared pushpulls of one native kvstore, by keys."""

    def __init__(self, kv: Any) -> None:
        self._kv = kv
        self._calls: dict[tuple[int, ...], PushPull] = {}

    def close(self) -> None:
        """Let go of the kvstore (its destructor ends the job's last barrier)."""
        self._kv = None
        self._calls.clear()

    def pushpull(self, keys: Sequence[int], values: Sequence[Any], outs: Sequence[Any],
                 priority: int) -> None:
        """Sum ``values`` over workers into ``outs`` (``values`` again for in place)."""
        index = tuple(keys)
        call = self._calls.get(index)
        if call is None or not _same(call.arrays[0], values) or not _same(call.arrays[1], outs):
            if self._kv is None:
                raise RuntimeError("the kvstore is closed")
            if len(self._calls) >= _MAX_CALLS:
                self._calls.clear()
            call = self._calls[index] = PushPull(self._kv, index, values, outs)
        call(priority)


class Transport:
    """Native pushpulls: prepared calls, or under 2-bit compression a push and a pull
    (``dist_sync`` refuses a pushpull then: "Compression not supported with PushPull"), made
    into the arrays pushed: native ``dist_sync``'s pull into another array can return a stale
    sum under CPU contention with two servers."""

    def __init__(self, kv: Any) -> None:
        self.kv = kv  # the native store, the only reference AutoByte keeps; None once closed
        self._calls = Calls(kv)
        self.compressed = False

    def exchange(self, keys: Sequence[int], values: Sequence[Any],
                 outs: Sequence[Any] | None = None, priority: int = 0) -> None:
        """Sum ``values`` over workers into ``outs`` (``values`` when None)."""
        outs = values if outs is None else outs
        if not self.compressed:
            self._calls.pushpull(keys, values, outs, priority)
        else:
            self.kv.push(list(keys), list(values), priority=priority)
            self.kv.pull(list(keys), out=list(outs), priority=priority)

    def close(self) -> None:
        """Let go of the native store: its destructor ends the job's last barrier, which
        must run before Python tears down, or ps-lite aborts the process."""
        self._calls.close()
        self.kv = None


def _same(kept: tuple[Any, ...], given: Sequence[Any]) -> bool:
    return len(kept) == len(given) and all(a is b for a, b in zip(kept, given, strict=True))

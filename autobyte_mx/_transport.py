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

from autobyte_mx._layout import same

__all__ = ["Calls", "PushPull", "Transport"]

_MAX_CALLS = 4096  # distinct calls kept; more only when the keys and arrays keep changing


class PushPull:
    """``kv.pushpull(keys, values, out=outs)`` with its arguments converted once.

    ``values`` and ``outs`` hold one array per key for each device, device by device: the
    native store sums a key's devices before it sends, as ``dist_sync`` does for a Trainer on
    several devices, and writes the result into each device's output."""

    __slots__ = ("_handle", "_in", "_out", "arrays")

    def __init__(self, kv: Any, keys: Sequence[int], values: Sequence[Any],
                 outs: Sequence[Any]) -> None:
        if not keys or len(values) % len(keys) or len(outs) % len(keys):
            raise ValueError(f"{len(keys)} keys need as many values and outputs for each "
                             f"device, got {len(values)} and {len(outs)}")
        self.arrays = (tuple(values), tuple(outs))  # keeps the handles alive
        self._handle = kv.handle
        self._in = _arguments(keys, values)
        self._out = _arguments(keys, outs)

    def __call__(self, priority: int) -> None:
        (n_in, keys_in, values), (n_out, keys_out, outs) = self._in, self._out
        check_call(_LIB.MXKVStorePushPull(self._handle, n_in, keys_in, n_out, keys_out,
                                          values, outs, ctypes.c_int(priority)))


def _arguments(keys: Sequence[int], arrays: Sequence[Any]) -> tuple[int, Any, Any]:
    """The C arguments of ``arrays``, whose keys are ``keys`` repeated device by device."""
    n = len(arrays)
    tiled = list(keys) * (n // len(keys))
    return n, (ctypes.c_int * n)(*tiled), (NDArrayHandle * n)(*[a.handle for a in arrays])


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
        if call is None or not same(call.arrays[0], values) or not same(call.arrays[1], outs):
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
        """Sum ``values`` over workers and devices (``PushPull``) into ``outs`` (``values``
        when None)."""
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

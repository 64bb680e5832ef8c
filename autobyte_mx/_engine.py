"""Python callbacks as MXNet engine operations (``MXEnginePushAsyncND``/``MXEnginePushSyncND``).

Scheduling has to happen *inside* MXNet's dependency engine: every operation of a step (copy,
gate, network, copy back) is pushed at once, in order, so the engine keeps its read/write
dependencies and the next forward pass waits per layer. Only the gate's completion is
deferred until the scheduler admits the block. An async gate occupies no engine thread while
it waits; its completion may be signalled from any thread.
"""

from __future__ import annotations

import ctypes
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from mxnet.base import _LIB, NDArrayHandle, check_call

__all__ = ["host_view", "push_async", "push_callback", "push_sync"]

log = logging.getLogger(__name__)

_AsyncFunc = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_SyncFunc = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_CompleteFunc = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


class _Context(ctypes.Structure):
    _fields_ = [("dev_type", ctypes.c_int), ("dev_id", ctypes.c_int)]


class _OnComplete(ctypes.Structure):
    """Layout of ``mxnet::engine::CallbackOnComplete`` (function, engine, parameter)."""

    _fields_ = [("fn", ctypes.c_void_p), ("engine", ctypes.c_void_p), ("param", ctypes.c_void_p)]


_CPU = _Context(1, 0)
# FnProperty::kAsync: run in the thread that satisfies the last dependency instead of queueing
# behind compute on MXNet's single CPU worker; gates and callbacks only do bookkeeping.
_ASYNC_PROP = ctypes.c_int(4)
_pending: dict[int, Callable[..., None]] = {}
_ids = itertools.count(1)


def _run_async(_rctx: int, on_complete: int, key: int) -> None:
    record = _OnComplete.from_address(on_complete)
    fn_ptr, engine, param = record.fn, record.engine, record.param  # lives on the C++ stack
    fn = _pending.pop(key)
    fired = False

    def complete() -> None:
        nonlocal fired
        if not fired:
            fired = True
            _CompleteFunc(fn_ptr)(engine, param, None)

    try:
        fn(complete)
    except Exception:
        log.exception("AutoByte engine gate failed; releasing it so the engine cannot hang")
        complete()


def _run_sync(_rctx: int, key: int) -> None:
    fn = _pending.pop(key)
    try:
        fn()
    except Exception:
        log.exception("AutoByte engine callback failed")


_ASYNC = _AsyncFunc(_run_async)
_SYNC = _SyncFunc(_run_sync)


def _handles(arrays: Sequence[Any]) -> Any:
    return (NDArrayHandle * max(1, len(arrays)))(*[a.handle for a in arrays])


def push_async(fn: Callable[[Callable[[], None]], None], *, const: Sequence[Any] = (),
               mutable: Sequence[Any] = (), priority: int = 0, name: str = "autobyte_gate") -> None:
    """Push an op that runs ``fn(complete)`` when its inputs are ready and ends at ``complete()``.

    ``complete`` may be called later, from any thread, at most once (extra calls are ignored).
    """
    key = next(_ids)
    _pending[key] = fn
    check_call(_LIB.MXEnginePushAsyncND(
        _ASYNC, ctypes.c_void_p(key), None, ctypes.byref(_CPU),
        _handles(const), len(const), _handles(mutable), len(mutable),
        ctypes.byref(_ASYNC_PROP), ctypes.c_int(priority), ctypes.c_char_p(name.encode()),
        ctypes.c_bool(False)))


def push_callback(fn: Callable[[], None], *, const: Sequence[Any] = (),
                  mutable: Sequence[Any] = (), priority: int = 0,
                  name: str = "autobyte_callback") -> None:
    """Run ``fn()`` as soon as the inputs are ready, in the thread that made them ready."""

    def run(complete: Callable[[], None]) -> None:
        try:
            fn()
        finally:
            complete()

    push_async(run, const=const, mutable=mutable, priority=priority, name=name)


def push_sync(fn: Callable[[], None], *, const: Sequence[Any] = (), mutable: Sequence[Any] = (),
              priority: int = 0, name: str = "autobyte_callback") -> None:
    """Push an op that runs ``fn()`` on MXNet's CPU worker once its inputs are ready."""
    key = next(_ids)
    _pending[key] = fn
    check_call(_LIB.MXEnginePushSyncND(
        _SYNC, ctypes.c_void_p(key), None, ctypes.byref(_CPU),
        _handles(const), len(const), _handles(mutable), len(mutable),
        None, ctypes.c_int(priority), ctypes.c_char_p(name.encode())))


def host_view(array: Any) -> Any:
    """A numpy array over ``array``'s memory (CPU, dense, already written once).

    Writing through it bypasses the engine: NDArray's own writes (``array[:] = ...``,
    ``mx.nd.array``) first push an empty op and wait for it, and that op queues behind the
    compute already queued on the CPU worker. The caller must know nothing reads or writes
    ``array`` meanwhile (e.g. it has just waited for the array's last op).
    """
    pointer = ctypes.c_void_p()
    check_call(_LIB.MXNDArrayGetData(array.handle, ctypes.byref(pointer)))
    if not pointer.value:
        raise ValueError("host_view needs an allocated array (write it once first)")
    ctype = np.ctypeslib.as_ctypes_type(np.dtype(array.dtype))
    data = (ctype * array.size).from_address(pointer.value)
    return np.ctypeslib.as_array(data).reshape(array.shape)

"""The optimizer on the server: the user's optimizer applied to AutoByte's blocks.

With ``update_on_kvstore`` (Gluon's default for distributed stores) native ``dist_sync``
sends the optimizer to the servers, and each server runs it on every key it holds once all
workers have pushed that key's gradient. AutoByte's keys are blocks: one key may hold several
tensors (fused) or part of one (split), and the partition changes while training runs. So the
servers get a ``ServerOptimizer`` instead, through the same command native ``set_optimizer``
uses. It knows each native key's segments (tensor index, start, stop) and runs the user's
optimizer on each segment's slice, with the optimizer state kept per tensor on the server, so
the state stays with its elements whatever layout is in force. Only element-wise optimizers
qualify (``ELEMENT_WISE``): their update of a slice equals the slice of their update, so the
result is bitwise that of ``dist_sync``. With several servers each key is whole on one server
and an element stays on the same server in every layout (``autobyte_mx._layout`` pins it), so
each server keeps the state of the elements it holds.

A tensor's update count (Adam's bias correction, learning-rate schedules) must rise once per
step however many segments it has: a segment seen again, or one of another layout, starts the
tensor's next step; other segments of the same step reuse its count.

The server keeps what each key last received, so a layout used before holds stale weights when
training comes back to it. The workers then push the current weights once, rank 0's and zeros
from the others, after asking the server to store that round as it comes (``refresh``).

Keys of AutoByte's own (the control key) are summed as without an optimizer (``sums``).

Saving and loading the state needs no push (rank 0 alone calls it, as users call
``trainer.save_states``): to save, a message asks each server to write one component of the
state (Adam's mean, say) into the stored arrays of keys it last updated (``export``, the
weights put aside), rank 0 pulls them, and a last message puts the weights back
(``restore``). To load, the message carries the states (``load``) and every server takes them
whole; a job started anew (a new token, the old one dropped) with the optimizer loaded keeps
its update counts.

Messages come from rank 0 as pickles of this class (the server unpickles whatever
``set_optimizer`` sends); a job's messages share a ``token``, and the server keeps the state of
the job's optimizer in ``_JOBS`` across them. This module is imported by the server inside
``import mxnet``, so it imports only what MXNet has loaded by then and AutoByte's modules that
need nothing else.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mxnet import ndarray as nd
from mxnet import optimizer as opt

from autobyte_mx._states import components

__all__ = ["ELEMENT_WISE", "Block", "Piece", "ServerOptimizer", "check_element_wise"]

# Optimizers whose update and state are element by element and whose state starts from zeros
# (not from the weights): a slice can be updated on its own.
ELEMENT_WISE = ("SGD", "NAG", "Signum", "FTML", "Adam", "AdaGrad", "RMSProp", "AdaDelta", "Ftrl",
                "Adamax", "Nadam")

Piece = tuple[Hashable, int, int, int]  # (tensor index, tensor size, start, stop) in a block
Block = tuple[int, tuple[Piece, ...]]  # (its group's id, its pieces in order)


def check_element_wise(optimizer: Any) -> str | None:
    """Why ``optimizer`` cannot run on AutoByte's blocks, or None when it can."""
    name = type(optimizer).__name__
    if type(optimizer).__module__ != opt.optimizer.__name__ or name not in ELEMENT_WISE:
        return (f"{name} is not one of MXNet's element-wise optimizers "
                f"({', '.join(ELEMENT_WISE)}): its update of a block would differ from its "
                "update of each whole tensor")
    if getattr(optimizer, "multi_precision", False):
        return "multi_precision keeps a float32 copy of each weight, made from the weights"
    return None


@dataclass
class _Job:
    """One job's optimizer on this server: the user's optimizer and its per-tensor state."""

    inner: Any
    blocks: dict[int, Block] = field(default_factory=dict)
    states: dict[Hashable, Any] = field(default_factory=dict)
    # per tensor: the group of its step in progress and the (key, start) of segments seen
    steps: dict[Hashable, tuple[int, set[tuple[int, int]]]] = field(default_factory=dict)
    refresh: set[int] = field(default_factory=set)
    sums: set[int] = field(default_factory=set)
    stored: dict[int, Any] = field(default_factory=dict)  # key -> its stored array (updated)
    saved: dict[int, Any] = field(default_factory=dict)  # key -> its weights, while exporting


_JOBS: dict[str, _Job] = {}


class ServerOptimizer(opt.Optimizer):  # type: ignore[misc]
    """What AutoByte's ``set_optimizer`` sends (see the module docstring)."""

    def __init__(self, inner: Any, token: str, *,
                 blocks: Mapping[int, Block] | None = None,
                 refresh: Iterable[int] = (), sums: Iterable[int] = (),
                 export: tuple[int, Iterable[int]] | None = None, restore: Iterable[int] = (),
                 load: str = "", drop: str = "") -> None:
        super().__init__()
        self.aggregate_num = 0  # one key per call: the Updater must not batch keys
        self.inner = inner
        self.token = token
        self.new_blocks = {int(k): (int(g), tuple(p)) for k, (g, p) in (blocks or {}).items()}
        self.new_refresh = sorted(int(k) for k in refresh)
        self.new_sums = sorted(int(k) for k in sums)
        self.export = None if export is None else (int(export[0]), sorted(int(k) for k in
                                                                          export[1]))
        self.restore = sorted(int(k) for k in restore)
        self.load = load  # base64 of a pickle: {tensor: its state as flat numpy arrays}
        self.drop = drop  # the token of a job this one replaces (an optimizer loaded)

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        _JOBS.pop(self.drop, None)
        job = _JOBS.get(self.token)
        if job is None:
            job = _JOBS[self.token] = _Job(self.inner)
        job.blocks.update(self.new_blocks)
        job.refresh.update(self.new_refresh)
        job.sums.update(self.new_sums)
        if self.export is not None:
            _export(job, *self.export)
        for key in self.restore:  # those this server holds
            saved = job.saved.pop(key, None)
            if saved is not None:
                saved.copyto(job.stored[key])
        if self.load:
            _load(job, self.load)

    def create_state_multi_precision(self, index: Any, weight: Any) -> None:
        return None  # kept per tensor in the job, not per key

    def update_multi_precision(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        self.update(index, weight, grad, state)

    def update(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        job = _JOBS[self.token]
        key = int(index)
        if key not in job.sums:
            job.stored[key] = weight
        if key in job.sums or key in job.refresh:  # stored as it comes: a plain sum
            job.refresh.discard(key)
            grad.copyto(weight)
            return
        block = job.blocks.get(key)
        if block is None:
            raise RuntimeError(f"AutoByte server: key {key} has no layout (the workers' "
                               "messages were lost or came from another job)")
        gid, pieces = block
        length = int(weight.shape[0])
        total = sum(stop - start for _, _, start, stop in pieces)
        if length != total:
            raise RuntimeError(f"AutoByte server: key {key} holds {length} elements, its "
                               f"layout {total}; each block must be whole on one server "
                               "(the workers read another MXNET_KVSTORE_BIGARRAY_BOUND?)")
        inner = job.inner
        inner._set_current_context(weight.context.device_id)
        at = 0
        for tensor, size, start, stop in pieces:
            end = at + stop - start
            state_all = job.states.get(tensor)
            if state_all is None:
                template = nd.zeros((size,), ctx=weight.context, dtype=weight.dtype)
                state_all = job.states[tensor] = inner.create_state(tensor, template)
            mark = (key, start)
            step = job.steps.get(tensor)
            if step is None or step[0] != gid or mark in step[1]:
                step = job.steps[tensor] = (gid, set())  # this tensor's next step
            else:
                inner._index_update_count[tensor] -= 1  # the same step: keep its count
            step[1].add(mark)
            if end - at == length == size:  # a whole tensor: no slices (native's call)
                inner.update(tensor, weight, grad, state_all)
            else:
                inner.update(tensor, weight[at:end], grad[at:end],
                             _slice(state_all, start, stop))
            at = end


def _export(job: _Job, component: int, keys: Iterable[int]) -> None:
    """Write component ``component`` of each piece's state into the stored array of each
    of ``keys`` this server holds, its weights put aside."""
    for key in keys:
        stored = job.stored.get(key)
        if stored is None:
            continue  # on another server
        job.saved.setdefault(key, stored.copy())
        at = 0
        for tensor, _, start, stop in job.blocks[key][1]:
            parts = components(job.states.get(tensor))
            end = at + stop - start
            if component < len(parts):
                parts[component][start:stop].copyto(stored[at:end])
            at = end


def _load(job: _Job, data: str) -> None:
    """Take every tensor's state from ``data`` (rank 0's file), whole."""
    states = pickle.loads(base64.b64decode(data))
    for tensor, parts in states.items():
        if not parts:
            job.states[tensor] = None
            continue
        state = job.inner.create_state(tensor, nd.zeros((parts[0].size,), dtype=parts[0].dtype))
        made = components(state)
        if len(made) != len(parts):
            raise RuntimeError(f"AutoByte server: the state loaded for tensor {tensor!r} has "
                               f"{len(parts)} parts, the optimizer's {len(made)}")
        for array, values in zip(made, parts, strict=True):
            array[:] = values
        job.states[tensor] = state


def _slice(state: Any, start: int, stop: int) -> Any:
    if state is None:
        return None
    if isinstance(state, (tuple, list)):
        return type(state)(_slice(s, start, stop) for s in state)
    return state[start:stop]

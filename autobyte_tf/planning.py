"""The issue order of one step's chunks, fixed when TensorFlow traces the step.

TensorFlow cannot admit chunks at run time the way the shared scheduler does: every collective
is created while the step is traced, and collectives that share an ordering token ("lane") run
in creation order. So the order is planned ahead. Without measurements the plan follows
gradient readiness (backward produces the last layer's gradient first); with measured
per-tensor backward times the shared scheduler, driven by the simulator (``common.sim``),
decides where front layers jump ahead. Chunk ``j`` of the plan goes to lane ``j % lanes``,
so at most ``lanes = credit / partition`` chunks are in flight.

Every worker must build the identical plan (collectives are matched by creation order), so a
plan depends only on values all workers share: the tensors, the config, the worker count and
the backward times that rank 0 broadcast.

This module does not import TensorFlow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from common.config import Config
from common.errors import ConfigError
from common.scheduler import split_sizes
from common.sim import Layer, Profile, plan_order
from common.units import parse_rate

__all__ = ["MAX_LANES", "Plan", "PlannedChunk", "TensorInfo", "lanes_for", "make_plan"]

MAX_LANES = 32  # more concurrent collectives than this only adds executor overhead


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor of an all-reduce call, in the caller's (forward) order."""

    name: str
    nbytes: int
    itemsize: int
    rank: int = 2  # the tensor's rank: a bias (rank <= 1) belongs to the kernel before it


@dataclass(frozen=True, slots=True)
class PlannedChunk:
    """Elements ``[offset, offset + size)`` of tensor ``tensor``'s flat view, on ``lane``."""

    tensor: int
    index: int
    offset: int
    size: int
    lane: int


@dataclass(frozen=True, slots=True)
class Plan:
    """Chunks in issue order; ``chunks_of(i)`` gives tensor i's chunks in index order."""

    config: Config
    lanes: int
    chunks: tuple[PlannedChunk, ...]
    measured: bool

    def chunks_of(self, tensor: int) -> list[PlannedChunk]:
        return sorted((c for c in self.chunks if c.tensor == tensor), key=lambda c: c.index)


def lanes_for(config: Config) -> int:
    """Chunks allowed in flight: credit / partition, at least 1, at most ``MAX_LANES``."""
    return max(1, min(MAX_LANES, config.credit_bytes // config.partition_bytes))


def make_plan(tensors: Sequence[TensorInfo], config: Config, *, workers: int,
              bandwidth: float | str, backward_s: Sequence[float] | None = None) -> Plan:
    """Plan one all-reduce call of ``tensors`` under ``config``.

    ``backward_s`` (one per tensor, seconds) switches from readiness order to the simulator's
    plan. ``bandwidth`` (bits/s per worker link) only matters for the simulator's plan.
    """
    if not tensors:
        raise ConfigError("make_plan needs at least one tensor, got none")
    if backward_s is not None and len(backward_s) != len(tensors):
        raise ConfigError(f"backward_s must have one time per tensor ({len(tensors)}), "
                          f"got {len(backward_s)}")
    pieces = [_pieces(t, config.partition_bytes) for t in tensors]
    order = _readiness_order(pieces)
    if backward_s is not None:
        order = _simulated_order(tensors, config, workers=workers,
                                 bandwidth=parse_rate(bandwidth), backward_s=backward_s,
                                 fallback=order)
    lanes = lanes_for(config)
    chunks = tuple(
        PlannedChunk(tensor=t, index=i, offset=pieces[t][i][0], size=pieces[t][i][1],
                     lane=j % lanes)
        for j, (t, i) in enumerate(order)
    )
    return Plan(config=config, lanes=lanes, chunks=chunks, measured=backward_s is not None)


def _pieces(tensor: TensorInfo, partition_bytes: int) -> list[tuple[int, int]]:
    """(offset, size) in elements, using the shared scheduler's split so indices agree."""
    if tensor.nbytes <= 0 or tensor.itemsize <= 0 or tensor.nbytes % tensor.itemsize:
        raise ConfigError(f"tensor {tensor.name!r}: nbytes must be a positive multiple of "
                          f"itemsize, got nbytes={tensor.nbytes}, itemsize={tensor.itemsize}")
    out, offset = [], 0
    for nbytes in split_sizes(tensor.nbytes, partition_bytes, tensor.itemsize):
        out.append((offset, nbytes // tensor.itemsize))
        offset += nbytes // tensor.itemsize
    return out


def _readiness_order(pieces: Sequence[Sequence[tuple[int, int]]]) -> list[tuple[int, int]]:
    """Last tensor first (its gradient is ready first), chunks front to back."""
    return [(t, i) for t in range(len(pieces) - 1, -1, -1) for i in range(len(pieces[t]))]


def _simulated_order(tensors: Sequence[TensorInfo], config: Config, *, workers: int,
                     bandwidth: float, backward_s: Sequence[float],
                     fallback: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    times = [float(b) if math.isfinite(b) and b > 0 else 0.0 for b in backward_s]
    layers = tuple(Layer(name=t.name, nbytes=t.nbytes, forward_s=b / 2, backward_s=b)
                   for t, b in zip(tensors, times, strict=True))
    profile = Profile(name="measured", layers=layers, batch_size=1)
    # The simulator splits with 4-byte items; map its (layer, index) onto our pieces and put
    # anything it does not name (other item sizes) where readiness order would.
    simulated = plan_order(profile, config, workers=max(2, workers), bandwidth=bandwidth)
    rank = {key: pos for pos, key in enumerate(simulated)}
    late = len(rank)
    keyed = sorted((rank.get(key, late), pos, key) for pos, key in enumerate(fallback))
    return [key for _, _, key in keyed]

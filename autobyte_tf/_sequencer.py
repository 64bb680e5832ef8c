"""The issue order of one step's blocks, fixed when TensorFlow traces the step.

TensorFlow cannot admit blocks at run time the way the plan's scheduler does: every collective
is created while the step is traced, and collectives that share an ordering token ("lane") run
in creation order. So the blocks of the shared layout (``common.plan``) get their order ahead:
without measurements readiness order (backward produces the output side first); with measured
per-tensor backward times the plan's scheduler, driven by the simulator (``common.sim``),
decides where front blocks jump ahead. Block ``j`` of the order goes to lane ``j % lanes``, with
``lanes`` as many of the largest block as the credit holds, so the bytes in flight stay within
the credit.

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
from common.plan import Layout, TensorSpec, issue_order, lanes_for, make_layout
from common.sim import Layer, Profile, plan_order
from common.units import parse_rate

__all__ = ["Plan", "TensorInfo", "make_plan"]


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor of an all-reduce call, in the caller's (forward) order."""

    name: str
    nbytes: int
    itemsize: int
    rank: int = 2  # the tensor's rank: a bias (rank <= 1) belongs to the kernel before it
    dtype: str = "float32"

    def spec(self) -> TensorSpec:
        return TensorSpec(self.name, self.nbytes, self.itemsize, self.dtype)


@dataclass(frozen=True, slots=True)
class Plan:
    """The layout's blocks in issue order (``order`` holds block indices) and their lanes."""

    config: Config
    layout: Layout
    order: tuple[int, ...]
    lanes: int
    measured: bool


def make_plan(tensors: Sequence[TensorInfo], config: Config, *, workers: int,
              bandwidth: float | str, backward_s: Sequence[float] | None = None) -> Plan:
    """Plan one all-reduce call of ``tensors`` under ``config`` (which must schedule).

    ``backward_s`` (one per tensor, seconds) switches from readiness order to the simulator's
    plan. ``bandwidth`` (bits/s per worker link) only matters for the simulator's plan.
    """
    if not tensors:
        raise ConfigError("make_plan needs at least one tensor, got none")
    if backward_s is not None and len(backward_s) != len(tensors):
        raise ConfigError(f"backward_s must have one time per tensor ({len(tensors)}), "
                          f"got {len(backward_s)}")
    specs = [t.spec() for t in tensors]
    layout = make_layout(specs, config, arch="allreduce")
    order = issue_order(layout)
    if backward_s is not None:
        times = [float(b) if math.isfinite(b) and b > 0 else 0.0 for b in backward_s]
        profile = Profile(name="measured", batch_size=1, layers=tuple(
            Layer(name=t.name, nbytes=t.nbytes, forward_s=b / 2, backward_s=b)
            for t, b in zip(tensors, times, strict=True)))
        order = plan_order(profile, config, workers=max(2, workers),
                           bandwidth=parse_rate(bandwidth), tensors=specs)
    return Plan(config=config, layout=layout, order=tuple(order),
                lanes=lanes_for(layout, config), measured=backward_s is not None)

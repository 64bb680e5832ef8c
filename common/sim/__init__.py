"""Discrete-event simulator of data-parallel training that drives the shared plan (common.plan).

    from common.sim import get_profile, simulate
    result = simulate(get_profile("resnet50"), Config(partition_bytes="4MB", credit_bytes="16MB"),
                      workers=8, arch="ps", bandwidth="10gbit")
    result.iteration_s, result.speed, result.lower_bound_s, result.trace

Used for planning (``plan_order``), datasets (``random_profile``), tuner baselines and scale
studies. See ``_engine`` for the timeline and the lower bound, ``_network`` for the links.
"""

from common.sim._bandwidth import BandwidthSchedule
from common.sim._engine import (
    ARCHS,
    DEFAULT_LATENCY_S,
    DEFAULT_OVERHEAD_S,
    SimResult,
    lower_bound,
    plan_order,
    simulate,
)
from common.sim._profiles import (
    DEFAULT_DEVICE_FLOPS,
    MODELS,
    Layer,
    Profile,
    get_profile,
    random_profile,
)

__all__ = [
    "ARCHS",
    "DEFAULT_DEVICE_FLOPS",
    "DEFAULT_LATENCY_S",
    "DEFAULT_OVERHEAD_S",
    "MODELS",
    "BandwidthSchedule",
    "Layer",
    "Profile",
    "SimResult",
    "get_profile",
    "lower_bound",
    "plan_order",
    "random_profile",
    "simulate",
]

"""The timeline: the shared plan (``common.plan``) driven by modelled events.

One iteration runs from the start of step k's backward pass to the start of step k+1's:

1. Backward produces gradients back to front; a block of the plan's layout is ready when the
   last of its layers' gradients is, and goes to the plan's scheduler, which starts blocks as
   the credit allows. Under a parameter server blocks are released in the plan's shared
   ``issue_order`` (as the MXNet adapter releases them); native sends go as they are ready.
   Each start is charged to the network model (``_network``), which returns the block's
   completion time; the completion is an event that calls ``scheduler.done`` at that time.
2. The next forward pass runs front to back; layer i starts only when the compute is free and
   every block holding part of layer i is complete (its parameters are back).

Where the workers' communication runs on the cores that compute (a collective's dispatch, a
key's copies), each block also takes ``block_cpu_s`` of the worker that nothing overlaps: the
step ends that much later per block, whatever the link. On the testbed's shared cores this fits
the runs' ratios to native better than charging it where the block starts (datasets/SCHEMA.md).

Compute is serial on the worker and never waits during backward, so the communication of a
step depends only on when its backward started: with a constant bandwidth every iteration is
the same and one step is the steady state. With a bandwidth schedule, ``steps`` iterations
follow each other on one clock and the result is their mean.

Lower bound (``lower_bound_s``): the iteration time with infinitely fine partitions, no
per-chunk overhead or latency and perfect overlap, with the bottleneck link at full rate
(``comm(x)`` = x bytes over the most loaded link: 2(n-1)/n of them per worker link for ring
all-reduce, max(1, n/s) times them per server link for PS). It is the largest of, for every
layer j with bytes, ``max(B + F_<j, B_>=j + comm(x_j)) + F_>=j`` (j's gradient is ready after
the backward of layers >= j, j's forward waits for it, and the forward of layers < j cannot
start before the whole backward B ends), and ``B_>=m + comm(total) + F_>=m`` for the last
layer m with bytes (no byte leaves before its gradient exists; all are back before its
forward). With a bandwidth schedule the rate is the schedule's time-weighted mean, which
makes it a long-run bound rather than a strict one for a few steps.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from common.config import Config
from common.errors import ConfigError
from common.plan import Layout, Scheduler, Send, TensorSpec, issue_order, make_layout
from common.sim._bandwidth import BandwidthSchedule
from common.sim._network import Transfer, allreduce_model, ps_model
from common.sim._profiles import Profile
from common.stats import comm_factor
from common.units import parse_rate

__all__ = ["ARCHS", "DEFAULT_LATENCY_S", "DEFAULT_OVERHEAD_S", "SimResult", "lower_bound",
           "plan_order", "simulate"]

ARCHS = ("ps", "allreduce")
DEFAULT_OVERHEAD_S = 100e-6  # per chunk: a C++ scheduler core plus an engine op issue
DEFAULT_LATENCY_S = 50e-6  # per message / ring hop: kernel stack plus one switch


@dataclass(frozen=True, slots=True)
class SimResult:
    """``iteration_s``: mean steady-state iteration time; ``speed``: samples/s across all
    workers; ``lower_bound_s``: see the module docstring; ``trace``: the representative
    worker's sends (``common.plan.Send``) in the order the scheduler started them
    (``t_ready``/``t_start``/``t_done`` on the virtual clock); ``step_s``: each
    simulated iteration; ``max_inflight_bytes``: the scheduler's peak bytes in flight."""

    iteration_s: float
    speed: float
    lower_bound_s: float
    trace: tuple[Send, ...]
    step_s: tuple[float, ...]
    max_inflight_bytes: int

    @property
    def efficiency(self) -> float:
        """lower_bound_s / iteration_s: 1.0 is the limit."""
        return self.lower_bound_s / self.iteration_s


def simulate(profile: Profile, config: Config, *, workers: int, arch: str = "allreduce",
             servers: int = 1, bandwidth: float | str | BandwidthSchedule,
             overhead_s: float = DEFAULT_OVERHEAD_S, latency_s: float = DEFAULT_LATENCY_S,
             block_cpu_s: float = 0.0, steps: int = 1, trace: bool = True) -> SimResult:
    """Simulate ``steps`` iterations of ``profile`` under ``config``; see the module docstring.

    ``bandwidth`` is bits/s of each link (a number, a string like "10gbit", or a schedule).
    ``trace=False`` skips keeping the chunks (tuning loops only need the time).
    """
    run = _Run(profile, config, workers=workers, arch=arch, servers=servers,
               bandwidth=bandwidth, overhead_s=overhead_s, latency_s=latency_s,
               keep_trace=trace, block_cpu_s=block_cpu_s)
    step_s = [run.step() for _ in range(_count(steps, "steps", 1, 100_000))]
    iteration = math.fsum(step_s) / len(step_s)
    return SimResult(
        iteration_s=iteration,
        speed=run.workers * profile.batch_size / iteration,
        lower_bound_s=lower_bound(profile, workers=run.workers, arch=run.arch,
                                  servers=run.servers, bandwidth=run.bandwidth),
        trace=tuple(run.order),
        step_s=tuple(step_s),
        max_inflight_bytes=run.scheduler.max_inflight_bytes,
    )


def plan_order(profile: Profile, config: Config, *, workers: int,
               bandwidth: float | str | BandwidthSchedule, arch: str = "allreduce",
               servers: int = 1, overhead_s: float = DEFAULT_OVERHEAD_S,
               latency_s: float = DEFAULT_LATENCY_S,
               tensors: Sequence[TensorSpec] | None = None) -> list[int]:
    """Block indices in the order the scheduler starts them in one step.

    For an adapter that must fix the issue order ahead of time (TensorFlow traces it): with
    measured layer times, front blocks jump ahead exactly where the scheduler would let them.
    ``tensors`` (one per layer with bytes) gives the adapter's own item sizes and dtypes, so
    the simulated layout is the adapter's.
    """
    run = _Run(profile, config, workers=workers, arch=arch, servers=servers,
               bandwidth=bandwidth, overhead_s=overhead_s, latency_s=latency_s,
               keep_trace=True, tensors=tensors)
    run.step()
    return [send.block.index for send in run.order]


def lower_bound(profile: Profile, *, workers: int, arch: str, servers: int = 1,
                bandwidth: float | str | BandwidthSchedule) -> float:
    """The iteration-time bound described in the module docstring."""
    workers = _count(workers, "workers", 1, 1_000_000)
    servers = _count(servers, "servers", 1, 1_000_000)
    rate = _schedule(bandwidth).mean_rate
    per_byte = 8.0 * comm_factor(_arch(arch), workers, servers) / rate
    layers = profile.layers
    total_b = profile.backward_s
    bound = profile.compute_s
    f_before = 0.0  # forward time of the layers before j
    b_from = [0.0] * (len(layers) + 1)  # backward time of the layers j..L-1
    f_from = [0.0] * (len(layers) + 1)
    for j in range(len(layers) - 1, -1, -1):
        b_from[j] = b_from[j + 1] + layers[j].backward_s
        f_from[j] = f_from[j + 1] + layers[j].forward_s
    for j, layer in enumerate(layers):
        if layer.nbytes:
            ready = max(total_b + f_before, b_from[j] + layer.nbytes * per_byte)
            bound = max(bound, ready + f_from[j])
        f_before += layer.forward_s
    last = max(j for j, layer in enumerate(layers) if layer.nbytes)
    return max(bound, b_from[last] + profile.total_bytes * per_byte + f_from[last])


class _Run:
    """One worker's compute timeline and scheduler, on a virtual clock."""

    def __init__(self, profile: Profile, config: Config, *, workers: int, arch: str,
                 servers: int, bandwidth: float | str | BandwidthSchedule, overhead_s: float,
                 latency_s: float, keep_trace: bool,
                 tensors: Sequence[TensorSpec] | None = None, block_cpu_s: float = 0.0) -> None:
        if not isinstance(profile, Profile):
            raise ConfigError(f"profile must be a Profile, got {profile!r}")
        if not isinstance(config, Config):
            raise ConfigError(f"config must be a Config, got {config!r}")
        self.profile = profile
        self.workers = _count(workers, "workers", 1, 1_000_000)
        self.servers = _count(servers, "servers", 1, 1_000_000)
        self.arch = _arch(arch)
        self.bandwidth = _schedule(bandwidth)
        overhead_s = _seconds(overhead_s, "overhead_s")
        latency_s = _seconds(latency_s, "latency_s")
        self.block_cpu_s = _seconds(block_cpu_s, "block_cpu_s")
        self.transfer: Transfer
        self.pull: Transfer | None = None
        if self.arch == "allreduce":
            self.transfer = allreduce_model(workers=self.workers, bandwidth=self.bandwidth,
                                            overhead_s=overhead_s, latency_s=latency_s)
        else:
            self.transfer, self.pull = ps_model(
                workers=self.workers, servers=self.servers, bandwidth=self.bandwidth,
                overhead_s=overhead_s, latency_s=latency_s)
        self.now = 0.0
        # (time, seq, send, last): ``last`` is False for a PS push completing (its pull follows)
        self.events: list[tuple[float, int, Send, bool]] = []
        self.seq = itertools.count()
        self.order: list[Send] = []
        self.keep_trace = keep_trace
        # layer index of each tensor (layers without bytes have none)
        self.layer_of = [i for i, x in enumerate(profile.layers) if x.nbytes]
        self.tensor_at = {layer: t for t, layer in enumerate(self.layer_of)}
        if tensors is None:
            tensors = [TensorSpec(x.name, x.nbytes, 4 if x.nbytes % 4 == 0 else 1)
                       for x in profile.layers if x.nbytes]
        self.tensors = tuple(tensors)
        if [t.nbytes for t in self.tensors] != [profile.layers[i].nbytes for i in self.layer_of]:
            raise ConfigError("tensors must match the profile's layers with bytes, one each")
        self.layouts: dict[tuple[int, bool], tuple[Layout, list[int], list[list[int]]]] = {}
        self.remaining: list[int] = []  # per block: sends not yet complete this step
        self.scheduler = Scheduler(config, start=self._start, clock=self._clock,
                                   keep_trace=False)

    def _clock(self) -> float:
        return self.now

    def _start(self, send: Send) -> None:
        done = self.transfer(send.nbytes, self.now, send.block.index % self.servers)
        heapq.heappush(self.events, (done, next(self.seq), send, self.pull is None))
        if self.keep_trace:
            self.order.append(send)

    def _layout(self, config: Config) -> tuple[Layout, list[int], list[list[int]]]:
        """The plan's layout, its release sequence, and each tensor's blocks."""
        key = (config.partition_bytes, config.scheduling)
        if key not in self.layouts:
            layout = make_layout(self.tensors, config, arch=self.arch)
            if self.arch == "ps" and not layout.native:
                sequence = issue_order(layout, head_bytes=config.credit_bytes)
            else:  # all-reduce: the scheduler's own admission; native: as ready
                sequence = issue_order(layout)
            blocks_of: list[list[int]] = [[] for _ in self.tensors]
            for block in layout.blocks:
                for t in block.tensors:
                    blocks_of[t].append(block.index)
            self.layouts[key] = (layout, sequence, blocks_of)
        return self.layouts[key]

    def _advance(self, until: float, block: int = -1) -> None:
        """Process events up to time ``until``, or, given a ``block``, until it is complete."""
        events, done, remaining, pull = self.events, self.scheduler.done, self.remaining, self.pull
        pop, push, seq = heapq.heappop, heapq.heappush, self.seq
        while events:
            if block < 0:
                if events[0][0] > until:
                    break
            elif not remaining[block]:
                break
            t, _, send, last = pop(events)
            self.now = t
            if last or pull is None:
                done(send)
                remaining[send.block.index] = 0
            else:
                push(events, (pull(send.nbytes, t, send.block.index % self.servers),
                              next(seq), send, True))

    def step(self) -> float:
        """One iteration from the start of backward; returns its length."""
        start = self.now
        config = self.scheduler.begin_step()
        layout, sequence, blocks_of = self._layout(config)
        step = self.scheduler.step
        sends = [Send(block, step) for block in layout.blocks]
        waiting = [len(block.tensors) for block in layout.blocks]
        self.remaining = [1] * len(sends)
        sequenced = self.arch == "ps" and not layout.native
        released = 0
        layers, tensor_at = self.profile.layers, self.tensor_at
        t = start
        for i in range(len(layers) - 1, -1, -1):
            t += layers[i].backward_s
            tensor = tensor_at.get(i)
            if tensor is None:
                continue
            self._advance(t)
            self.now = t
            ready = []
            for b in blocks_of[tensor]:
                waiting[b] -= 1
                if waiting[b] == 0:
                    ready.append(b)
            if sequenced:  # release in the shared sequence, as far as it is ready
                while released < len(sequence) and waiting[sequence[released]] == 0:
                    self.scheduler.ready(sends[sequence[released]])
                    released += 1
            elif ready:
                self.scheduler.ready(*(sends[b] for b in ready))
        for i, layer in enumerate(layers):
            tensor = tensor_at.get(i)
            if tensor is not None:
                for b in blocks_of[tensor]:
                    if self.remaining[b]:
                        self._advance(t, b)
            t = max(t, self.now) + layer.forward_s
        self._advance(t)  # nothing is left: every block finished before its forward
        t += self.block_cpu_s * len(sends)
        self.now = t
        return t - start


def _schedule(bandwidth: float | str | BandwidthSchedule) -> BandwidthSchedule:
    if isinstance(bandwidth, BandwidthSchedule):
        return bandwidth
    if isinstance(bandwidth, str) and ":" in bandwidth:
        return BandwidthSchedule.parse(bandwidth)
    return BandwidthSchedule.constant(parse_rate(bandwidth, "bandwidth"))


def _arch(arch: str) -> str:
    text = str(arch).strip().lower().replace("-", "").replace("_", "")
    if text not in ARCHS:
        raise ConfigError(f"arch must be one of {list(ARCHS)}, but got arch={arch!r}")
    return text


def _count(value: int, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{name} must be an int between {low} and {high}, "
                          f"but got {name}={value!r}")
    return value


def _seconds(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name} must be a finite number of seconds >= 0, "
                          f"but got {name}={value!r}")
    return float(value)

"""The timeline: the real ``common.scheduler.Scheduler`` driven by modelled events.

One iteration runs from the start of step k's backward pass to the start of step k+1's:

1. Backward produces gradients back to front; when layer i's backward ends, its task is split
   and made ready in the scheduler, which starts chunks as the credit allows. Each start is
   charged to the network model (``_network``), which returns the chunk's completion time; the
   completion is an event that calls ``scheduler.done`` at that virtual time.
2. The next forward pass runs front to back; layer i starts only when the compute is free and
   every chunk of layer i is complete (its parameters are back).

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
from dataclasses import dataclass

from common.config import Config
from common.errors import ConfigError
from common.scheduler import Chunk, Scheduler, Task, split_sizes
from common.sim._bandwidth import BandwidthSchedule
from common.sim._network import Transfer, allreduce_model, comm_factor, ps_model
from common.sim._profiles import Profile
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
    worker's chunks in the order the scheduler started them (``t_ready``/``t_start``/``t_done``
    on the virtual clock; ``key`` holds the scheduler's priority key); ``step_s``: each
    simulated iteration; ``max_inflight_bytes``: the scheduler's peak bytes in flight."""

    iteration_s: float
    speed: float
    lower_bound_s: float
    trace: tuple[Chunk, ...]
    step_s: tuple[float, ...]
    max_inflight_bytes: int

    @property
    def efficiency(self) -> float:
        """lower_bound_s / iteration_s: 1.0 is the limit."""
        return self.lower_bound_s / self.iteration_s


def simulate(profile: Profile, config: Config, *, workers: int, arch: str = "allreduce",
             servers: int = 1, bandwidth: float | str | BandwidthSchedule,
             overhead_s: float = DEFAULT_OVERHEAD_S, latency_s: float = DEFAULT_LATENCY_S,
             steps: int = 1, trace: bool = True) -> SimResult:
    """Simulate ``steps`` iterations of ``profile`` under ``config``; see the module docstring.

    ``bandwidth`` is bits/s of each link (a number, a string like "10gbit", or a schedule).
    ``trace=False`` skips keeping the chunks (tuning loops only need the time).
    """
    run = _Run(profile, config, workers=workers, arch=arch, servers=servers,
               bandwidth=bandwidth, overhead_s=overhead_s, latency_s=latency_s,
               keep_trace=trace)
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
               latency_s: float = DEFAULT_LATENCY_S) -> list[tuple[int, int]]:
    """(layer, chunk index) in the order the scheduler starts the chunks of one step.

    For an adapter that must fix the issue order ahead of time (TensorFlow traces it): with
    measured layer times, front layers jump ahead exactly where the scheduler would let them.
    Layers without bytes do not appear.
    """
    run = _Run(profile, config, workers=workers, arch=arch, servers=servers,
               bandwidth=bandwidth, overhead_s=overhead_s, latency_s=latency_s,
               keep_trace=True)
    run.step()
    return [(chunk.task.layer, chunk.index) for chunk in run.order]


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
                 latency_s: float, keep_trace: bool) -> None:
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
        self.transfer: Transfer
        self.pull: Transfer | None = None
        if self.arch == "allreduce":
            self.transfer = allreduce_model(workers=self.workers, bandwidth=self.bandwidth,
                                            overhead_s=overhead_s, latency_s=latency_s)
        else:
            self.transfer, self.pull = ps_model(
                workers=self.workers, servers=self.servers, bandwidth=self.bandwidth,
                overhead_s=overhead_s, latency_s=latency_s)
        self.kind = "allreduce" if self.arch == "allreduce" else "pushpull"
        self.now = 0.0
        # (time, seq, chunk, last): ``last`` is False for a PS push completing (its pull follows)
        self.events: list[tuple[float, int, Chunk, bool]] = []
        self.seq = itertools.count()
        self.order: list[Chunk] = []
        self.keep_trace = keep_trace
        self.remaining = [0] * len(profile.layers)
        self.tasks = [Task(x.name, i, x.nbytes, self.kind, itemsize=4 if x.nbytes % 4 == 0 else 1)
                      if x.nbytes else None for i, x in enumerate(profile.layers)]
        self.scheduler = Scheduler(config, start=self._start, clock=self._clock,
                                   keep_trace=False)

    def _clock(self) -> float:
        return self.now

    def _start(self, chunk: Chunk) -> None:
        done = self.transfer(chunk.nbytes, self.now, chunk.tag)
        heapq.heappush(self.events, (done, next(self.seq), chunk, self.pull is None))
        if self.keep_trace:
            self.order.append(chunk)

    def _advance(self, until: float, layer: int = -1) -> None:
        """Process events up to time ``until``, or, given a ``layer``, until all its chunks
        are complete."""
        events, done, remaining, pull = self.events, self.scheduler.done, self.remaining, self.pull
        pop, push, seq = heapq.heappop, heapq.heappush, self.seq
        while events:
            if layer < 0:
                if events[0][0] > until:
                    break
            elif not remaining[layer]:
                break
            t, _, chunk, last = pop(events)
            self.now = t
            if last or pull is None:
                done(chunk)
                remaining[chunk.task.layer] -= 1
            else:
                push(events, (pull(chunk.nbytes, t, chunk.tag), next(seq), chunk, True))

    def _server_bases(self, config: Config) -> list[int]:
        """Round-robin server of each layer's first chunk, counting chunks in forward order."""
        bases, count = [], 0
        for task in self.tasks:
            bases.append(count)
            if task is not None:
                count += (len(split_sizes(task.nbytes, config.partition_bytes, task.itemsize))
                          if config.scheduling else 1)
        return bases

    def step(self) -> float:
        """One iteration from the start of backward; returns its length."""
        start = self.now
        config = self.scheduler.begin_step()
        bases = self._server_bases(config) if self.arch == "ps" else None
        servers, layers, tasks = self.servers, self.profile.layers, self.tasks
        split, ready, remaining = self.scheduler.split, self.scheduler.ready, self.remaining
        t = start
        for i in range(len(layers) - 1, -1, -1):
            t += layers[i].backward_s
            task = tasks[i]
            if task is None:
                continue
            self._advance(t)
            self.now = t
            chunks = split(task)
            for chunk in chunks:
                chunk.tag = 0 if bases is None else (bases[i] + chunk.index) % servers
            remaining[i] = len(chunks)
            ready(*chunks)
        for i, layer in enumerate(layers):
            if remaining[i]:
                self._advance(t, i)
            t = max(t, self.now) + layer.forward_s
        self._advance(t)  # nothing is left: every layer's chunks finished before its forward
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

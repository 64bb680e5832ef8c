"""Step boundaries: config agreement, sampled steps, plans and retraces.

Every worker must switch configuration (and plan) at the same step, because collectives are
matched by creation order. Half a window before every ``window_steps``-th step boundary each
worker puts its vector of the step agreement (``common.agreement``: rank 0's decision for that
boundary and, once, its measured per-tensor backward times) where the next steps' gradient
all-reduce sums it (``broadcast``: in the strategy, a few extra elements of that all-reduce),
and every worker takes the sum at the boundary: no collective or thread of its own, and no
wait. A worker whose plan changed switches its step function at that same step: to the trace it
already made for that plan (``TRACE_CACHE`` of them are kept, so going back costs nothing) or to
a new trace; between changes nothing but a step counter runs in Python.

Sampled steps stamp when each gradient is ready: a window's second step when rank 0's
``SampleBudget`` allows (every window while the job is unsettled, else at most one a second;
it rides in the agreement, since every worker must run the same trace) or the window begins a
new configuration; every ``sample_every`` steps if given; and the step after a sampled step
that traced. They run a trace of their own, kept beside the plan's plain one:
a stamp behind a flag in every trace cost every step a branch per gradient (the demo cnn at
3gbit ran 3-6% slower than MultiWorkerMirroredStrategy for its eight), and a plan's second
trace is paid once, at its first sampled step.
Rank 0's measured layer times shape the plans traced after they arrive (no retrace of their
own: on a large model a trace takes seconds).
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from autobyte_tf._sequencer import Plan, TensorInfo, make_plan
from autobyte_tf._stats import ReadyTimes
from common.agreement import Agreement, vector_length
from common.config import Config
from common.control import TuningAgent
from common.stats import (
    AHEAD_SETTLE_S,
    SampleBudget,
    backward_times,
    layers_by_rank,
    per_layer,
    ring_bytes,
)

__all__ = ["Controller", "SteppedFunction", "decision_lead"]

log = logging.getLogger(__name__)

TRACE_CACHE = 16  # traced step functions kept per step function (a trace holds its graph):
#                   a plain and a sampled one for each of the last eight plans


def decision_lead(window_steps: int) -> int:
    """Steps a tuning decision must come due after the window it was decided on: rank 0
    sends it half a window before the boundary it applies at (``_send_offset``) and hears of
    a window only after its last step."""
    return window_steps - _send_offset(window_steps) + 1


def _send_offset(window_steps: int) -> int:
    """The step within a window at which the agreement for the next boundary starts."""
    return window_steps // 2


Vector = NDArray[np.float64]
Broadcast = Callable[[Vector], Callable[[], Vector]]


@dataclass(frozen=True, slots=True)
class _Step:
    sample: bool
    rebuild: bool


class Controller:
    """Holds the configuration in force, plans per call signature, and the step protocol.

    ``broadcast`` starts sending rank 0's float64 vector (``vector_length`` long) to every
    worker and returns a function that waits for the result; it is called at the same steps
    on every worker, and the steps in between run on every worker. ``agent`` (live tuning) is
    fed every step and asked half a window before each boundary for a decision due by it.
    """

    def __init__(self, *, config: Config, rank: int, workers: int, bandwidth: float,
                 broadcast: Broadcast,
                 sample_every: int | None = None, agent: TuningAgent | None = None,
                 stamping: bool = False) -> None:
        self._agreement = Agreement(rank=rank, workers=workers, config=config,
                                    due=None if agent is None else agent.due)
        self.rank, self.workers = rank, workers
        self._bandwidth = bandwidth
        self._broadcast = broadcast
        self._inflight: tuple[Callable[[], Vector], tuple[TensorInfo, ...] | None] | None = None
        self._sample_every = sample_every  # None: as the agreement says, once a window at most
        # rank 0's, deciding half a window ahead; its first check is a change (the start)
        self._budget = SampleBudget(settle_s=AHEAD_SETTLE_S)
        self._sample_window = True  # this window samples (the job's first does)
        self._plans: dict[tuple[tuple[TensorInfo, ...], bool], Plan] = {}
        self._times: dict[tuple[TensorInfo, ...], tuple[float, ...]] = {}
        self._main: tuple[TensorInfo, ...] | None = None
        self._stamping = stamping
        self._sampling = False
        self._traced = False
        self._stamps = ReadyTimes()
        self._local_times: tuple[float, ...] | None = None
        self._times_sent = False
        self._resample = False
        self.step = 0
        self.agent = agent
        self._wire_bytes = 0  # bytes this worker sends per step for the gradients
        self._layer_of: list[int] = []  # layer of each gradient tensor, for the tuner
        self._owner: object | None = None

    # -- what the cross-device op asks while tracing ------------------------------------------
    @property
    def config(self) -> Config:
        return self._agreement.config

    @property
    def measured_plan(self) -> bool:
        """Rank 0's measured layer times are known: plans traced from now on use them."""
        return self._main is not None and self._main in self._times

    @property
    def scheduling(self) -> bool:
        return self._agreement.config.scheduling

    @property
    def main_call(self) -> tuple[TensorInfo, ...] | None:
        """The largest all-reduce call traced (the gradients'), which carries the agreement."""
        return self._main

    @property
    def vector_length(self) -> int:
        """Length of the agreement's vector while ``main_call`` is in force."""
        return vector_length(len(self._main) if self._main is not None else 0)

    @property
    def trace_key(self) -> tuple[object, ...]:
        """What a traced step depends on: the knobs in force (native ignores partition and
        credit)."""
        c = self._agreement.config
        if not c.scheduling:
            return (False,)
        return (c.partition_bytes, c.credit_bytes, True)

    def note_trace(self) -> None:
        """The step about to run traces anew (its time is warm-up, not steady state)."""
        self._traced = True

    def note_call(self, tensors: tuple[TensorInfo, ...]) -> None:
        """An all-reduce of ``tensors`` is traced; the largest call is the gradients', whose
        layers and bytes the statistics describe."""
        self._traced = True
        if self._main is None or _bytes(tensors) > _bytes(self._main):
            self._main = tensors
            nbytes = [t.nbytes for t in tensors]
            self._wire_bytes = ring_bytes(sum(nbytes), self.workers)
            self._layer_of = layers_by_rank([t.rank for t in tensors])
            if self.agent is not None:
                self.agent.set_layer_bytes([int(b) for b in per_layer(nbytes, self._layer_of)])

    def plan_for(self, tensors: tuple[TensorInfo, ...]) -> Plan:
        """The plan for one all-reduce call; the largest call (the gradients) gets measured
        times once rank 0 has broadcast them, every other call keeps readiness order."""
        self.note_call(tensors)
        times = self._times.get(tensors)
        key = (tensors, times is not None)
        plan = self._plans.get(key)
        if plan is None or plan.config != self.config:
            plan = make_plan(tensors, self.config, workers=self.workers,
                             bandwidth=self._bandwidth, backward_s=times)
            self._plans[key] = plan
        return plan

    def stamps(self) -> ReadyTimes | None:
        """Where gradient-ready stamps go, while a sampled step runs (and traces); None: the
        step runs no stamps."""
        return self._stamps if self._sampling else None

    @property
    def sampling(self) -> bool:
        """The step about to run samples (and runs its plan's sampled trace)."""
        return self._sampling

    def sample(self, on: bool) -> None:
        """Whether the step about to run samples (never, for a controller that does not
        stamp)."""
        self._sampling = on and self._stamping

    # -- the step protocol ----------------------------------------------------------------------
    def reconfigure(self, config: Config | None = None, **changes: Any) -> None:
        """Ask for ``config`` with ``changes`` from the first boundary whose agreement has
        not started on (rank 0's request wins)."""
        self._agreement.request(config, **changes)

    def begin(self, owner: object | None = None) -> _Step:
        """Start a step of ``owner`` (a step function). A new owner (another model) starts
        its own measurements; every worker sees the same owners in the same order."""
        if owner is not self._owner:
            self._owner = owner
            self._main, self._local_times, self._times_sent = None, None, False
        rebuild = False
        w = self.config.window_steps
        offset = _send_offset(w)
        if self.step > 0 and self.step % w == 0:
            rebuild = self._take()
        if self.step % w == offset:  # what is sent now is in force from the next boundary
            self._send(due_at=self.step + w - offset)
        every = self._sample_every or w
        sample = self._resample or (self.step % every == 1 % every and
                                    (self._sample_every is not None or self._sample_window))
        self._traced = False
        self._stamps.clear()
        return _Step(sample=sample, rebuild=rebuild)

    def end(self, step: _Step, seconds: float, samples: int) -> None:
        traced = self._traced
        self._resample = step.sample and traced  # a tracing step's times are not steady state
        layer_times, busy = None, 0.0
        if not traced:
            self._budget.stepped(seconds)
        measured = self._stamps.measured(self._main) \
            if step.sample and not traced and self._main is not None else None
        if measured is not None:
            relative, busy = measured
            layer_times = self._local_times = tuple(backward_times(relative, from_start=True))
        if self.agent is not None:
            if layer_times is not None:
                layer_times = tuple(per_layer(layer_times, self._layer_of))
            # a traced step's bytes took a trace's time; only a sampled step times its link
            # (the window's rate comes from those: one carried over would miss a link change)
            self.agent.record_step(self.step, samples, seconds, layer_backward_s=layer_times,
                                   bytes_up=0 if traced else self._wire_bytes,
                                   bytes_down=0 if traced else self._wire_bytes,
                                   comm_s=min(busy, seconds), warmup=traced)
        self.step += 1

    def _take(self) -> bool:
        """Take the agreement started half a window ago; True if this step must use a new
        plan."""
        if self._inflight is None:
            return False
        wait, main = self._inflight
        self._inflight = None
        started = time.perf_counter()
        vector = wait()
        log.debug("step %d: waited %.1f ms for the agreement", self.step,
                  (time.perf_counter() - started) * 1e3)
        return self._apply(vector, main)

    def _send(self, *, due_at: int) -> None:
        main = self._main
        payload = None
        if self.rank == 0 and self._local_times is not None and not self._times_sent and \
                main is not None:
            payload = [round(t * 1e6) for t in self._local_times]  # microseconds
            self._times_sent = True
        sample = self.rank == 0 and self._sample_every is None and \
            self._budget.due(self.config)
        vector = np.array(self._agreement.vector(
            self.step, due_at=due_at, payload=payload,
            payload_len=0 if main is None else len(main), sample=sample), dtype=np.float64)
        if self.workers > 1:
            self._inflight = (self._broadcast(vector), main)
        else:
            self._inflight = (lambda: vector, main)

    def _apply(self, vector: Vector, main: tuple[TensorInfo, ...] | None) -> bool:
        agreed = self._agreement.take([float(x) for x in vector])
        new = agreed.config
        self._sample_window = agreed.sample or new is not None
        if new is not None:
            log.info("step %d: AutoByte switches to %s", self.step, new.describe())
            self._budget.note(new)
            if self.agent is not None:
                self.agent.set_config(new, step=self.step)
        if agreed.payload is not None and main is not None:  # for ``plan_for``
            self._times[main] = tuple(t / 1e6 for t in agreed.payload)
        return new is not None


def _bytes(tensors: tuple[TensorInfo, ...]) -> int:
    return sum(t.nbytes for t in tensors)


class SteppedFunction:
    """A step function that keeps the step protocol: agree, pick the trace, run, record.

    ``build`` makes a fresh step callable (a new trace). Traces are kept per plan, the
    ``TRACE_CACHE`` most recently used ones, so a switch back to a plan used before reuses its
    trace. ``samples`` reads this worker's running sample count. A read costs 1% of a 14 ms
    step, so once two steps in a row had the same samples, it is read at the end of each
    window and after a new trace only, the steps between given that count; a read that finds
    another total gets the difference, and reads follow every step until they agree again.
    """

    def __init__(self, controller: Controller, build: Callable[[], Callable[..., Any]],
                 samples: Callable[[], int], *, can_sample: Callable[[], bool]) -> None:
        self._controller = controller
        self._build = build
        self._samples = samples
        self._can_sample = can_sample
        self._fns: collections.OrderedDict[tuple[object, ...], Callable[..., Any]] = \
            collections.OrderedDict()
        self._count = samples()
        self._assumed = 0  # samples given to them
        self._per_step: int | None = None
        self._last = -1  # samples of the last step read

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        controller = self._controller
        step = controller.begin(self)
        controller.sample(step.sample and self._can_sample())
        key = (*controller.trace_key, controller.sampling)
        fn = self._fns.get(key)
        traced = fn is None
        if fn is None:
            fn = self._fns[key] = self._build()
            controller.note_trace()
            while len(self._fns) > TRACE_CACHE:
                self._fns.popitem(last=False)
        else:
            self._fns.move_to_end(key)
        started = time.perf_counter()
        out = fn(*args, **kwargs)
        seconds = time.perf_counter() - started
        window = controller.config.window_steps
        if self._per_step is None or traced or controller.step % window == window - 1:
            count = self._samples()
            samples = count - self._count - self._assumed
            # steps of another size (a short last batch): read every step until they agree
            self._per_step = samples if samples == self._last else None
            self._count, self._assumed, self._last = count, 0, samples
        else:
            samples = self._per_step
            self._assumed += samples
        controller.end(_Step(sample=controller.sampling, rebuild=step.rebuild), seconds, samples)
        return out

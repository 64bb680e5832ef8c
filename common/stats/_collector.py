"""The per-worker statistics collector: cheap to call every step, emits one Window per window.

``record_step`` runs on the training thread every step, so it only adds numbers into
preallocated slots (per-layer times into one numpy buffer, in place); all allocation happens
once per window when the Window is built. Windows are aligned to buckets of ``window_steps``
steps (steps ``[k*W, (k+1)*W)``) so every worker closes the same windows, and a configuration
change closes the current window early, so a window never mixes two configurations.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from common.config import Config
from common.errors import ConfigError, ControlError
from common.stats._summary import TrainingStats
from common.stats._window import ARCHITECTURES, Window

__all__ = ["StatsCollector", "busy_time", "comm_factor"]

log = logging.getLogger(__name__)


class StatsCollector:
    """Accumulates one worker's steps into Windows and hands each to ``on_window``.

    The first step after construction and after every ``set_config`` is counted as warm-up
    (``warmup_steps``) and left out of the speed: it retraces, allocates or waits for peers.
    """

    __slots__ = (
        "_arch", "_bucket", "_bytes_down", "_bytes_up", "_comm_s", "_config", "_elapsed",
        "_end_step", "_first", "_last", "_last_layers", "_last_window", "_layer_bytes",
        "_layer_steps", "_layer_sum", "_links_timed", "_max", "_min", "_model", "_num_workers",
        "_on_window", "_rank", "_samples", "_steps", "_timed_down", "_timed_up", "_totals",
        "_wall", "_warm", "_warm_s", "_warmup_left", "_window_steps",
        "warmup_after_change",
    )

    _first: int
    _last: int
    _steps: int
    _warm: int
    _warm_s: float
    _samples: int
    _elapsed: float
    _comm_s: float
    _min: float
    _max: float
    _bytes_up: int
    _bytes_down: int
    _timed_up: int  # of the steps that timed their link (comm_s > 0)
    _timed_down: int
    _layer_steps: int
    _wall: float

    def __init__(self, *, rank: int, num_workers: int, config: Config, model: str = "unknown",
                 arch: str = "allreduce", window_steps: int | None = None,
                 warmup_after_change: int = 1,
                 on_window: Callable[[Window], None] | None = None) -> None:
        if num_workers < 1 or not 0 <= rank < num_workers:
            raise ConfigError(f"rank must be in [0, num_workers) and num_workers >= 1, got "
                              f"rank={rank}, num_workers={num_workers}")
        if arch not in ARCHITECTURES:
            raise ConfigError(f"arch must be one of {list(ARCHITECTURES)}, got arch={arch!r}")
        steps = config.window_steps if window_steps is None else window_steps
        if steps < 1:
            raise ConfigError(f"window_steps must be >= 1, got window_steps={steps}")
        if warmup_after_change < 0:
            raise ConfigError(f"warmup_after_change must be >= 0, got {warmup_after_change=}")
        self._rank, self._num_workers = rank, num_workers
        self._model, self._arch = model, arch
        self._window_steps = steps
        self._config = config
        self._on_window = on_window
        self.warmup_after_change = warmup_after_change
        self._warmup_left = warmup_after_change
        self._layer_sum: npt.NDArray[np.float64] = np.zeros(0)
        self._layer_bytes: Sequence[int] = ()
        self._bucket = -1
        self._end_step = 0
        self._last_window: Window | None = None
        self._last_layers: tuple[float, ...] | None = None  # of the last window that had any
        self._links_timed = False  # a step has timed its link: a window without one has no rate
        self._totals = [0, 0, 0, 0.0]  # steps, sampled, warm-up steps, warm-up seconds
        self._reset()

    @property
    def config(self) -> Config:
        return self._config

    @property
    def window_steps(self) -> int:
        return self._window_steps

    def set_config(self, config: Config, *, step: int | None = None) -> None:
        """The adapter switched to ``config`` (from ``step`` on): close the open window."""
        self.flush()
        self._config = config
        self._warmup_left = self.warmup_after_change

    def set_layer_bytes(self, layer_bytes: Sequence[int]) -> None:
        """Gradient bytes per layer in forward order; usually fixed, so given once."""
        self._layer_bytes = tuple(int(b) for b in layer_bytes)

    @property
    def end_step(self) -> int:
        return self._end_step

    def set_end_step(self, step: int) -> None:
        """The job ends at ``step`` (0: unknown); every window from now on says so."""
        if step < 0:
            raise ConfigError(f"end step must be >= 0 (0: unknown), got step={step!r}")
        self._end_step = int(step)

    def record_step(self, step: int, samples: int, step_time_s: float, *,
                    layer_backward_s: Sequence[float] | npt.NDArray[np.float64] | None = None,
                    bytes_up: int = 0, bytes_down: int = 0, comm_s: float = 0.0,
                    warmup: bool = False) -> None:
        """One finished step on this worker. Cheap: a few additions, no allocation.

        layer_backward_s: backward time per layer in forward order, on steps the adapter
            sampled (None otherwise). bytes_up/bytes_down: bytes this worker sent/received
            in the step. comm_s: time its links were busy, if known (gives truer B_u/B_d).
        warmup: the adapter knows this step is not steady state (it traced or compiled):
            counted apart like the warm-up after a change, left out of the speed.
        """
        bucket = step // self._window_steps
        if bucket != self._bucket:
            if self._first >= 0:
                self.flush()
            self._bucket = bucket
        if self._first < 0:
            self._first = step
            self._wall = time.time()
        self._last = step
        totals = self._totals
        totals[0] += 1
        if warmup or self._warmup_left > 0:
            totals[2] += 1
            totals[3] += step_time_s
            self._warmup_left = max(0, self._warmup_left - 1)
            self._warm += 1
            self._warm_s += step_time_s
        else:
            self._steps += 1
            self._samples += samples
            self._elapsed += step_time_s
            if step_time_s < self._min:
                self._min = step_time_s
            if step_time_s > self._max:
                self._max = step_time_s
        self._bytes_up += bytes_up
        self._bytes_down += bytes_down
        if comm_s > 0:
            self._comm_s += comm_s
            self._timed_up += bytes_up
            self._timed_down += bytes_down
            self._links_timed = True
        if layer_backward_s is not None:
            if len(layer_backward_s) != self._layer_sum.shape[0]:
                self._layer_sum = np.zeros(len(layer_backward_s))
                self._layer_steps = 0
            np.add(self._layer_sum, layer_backward_s, out=self._layer_sum)
            self._layer_steps += 1
            totals[1] += 1
        if step % self._window_steps == self._window_steps - 1:
            self.flush()

    def flush(self) -> Window | None:
        """Close the open window now (end of training, reconfiguration); None when empty."""
        if self._first < 0:
            return None
        try:
            window = self._build()
        except ControlError as exc:  # e.g. a NaN step time: drop the window, never the job
            log.warning("dropped statistics window from step %d: %s", self._first, exc)
            self._reset()
            return None
        self._reset()
        self._last_window = window
        if window.layer_backward_s:
            self._last_layers = window.layer_backward_s
        if self._on_window is not None:
            self._on_window(window)
        return window

    def summary(self) -> TrainingStats:
        """Totals so far and the rates of the latest window (``TrainingStats``)."""
        steps, sampled, warm, warm_s = self._totals
        last = self._last_window
        if self._steps or last is None:
            count, elapsed, samples, nbytes = (self._steps, self._elapsed, self._samples,
                                               self._bytes_up)
        else:
            count, elapsed, samples, nbytes = last.steps, last.elapsed_s, last.samples, \
                last.bytes_up
        layers = self._last_layers  # sampled steps are not in every window
        if self._layer_steps:
            layers = tuple((self._layer_sum / self._layer_steps).tolist())
        return TrainingStats(
            steps=int(steps), window=count, config=self._config,
            step_time_s=elapsed / count if count else float("nan"),
            samples_per_s=samples / elapsed if elapsed > 0 else float("nan"),
            bytes_per_s=nbytes / elapsed if elapsed > 0 else float("nan"),
            layer_bytes=tuple(self._layer_bytes), layer_backward_s=layers,
            sampled_steps=int(sampled), warmup_steps=int(warm), warmup_s=float(warm_s))

    def _build(self) -> Window:
        # The link's rate: the bytes of the steps that timed it over their busy time; from an
        # adapter that times no link, bytes over step time
        if self._comm_s > 0:
            up, down, busy = self._timed_up, self._timed_down, self._comm_s
        elif self._links_timed:
            up, down, busy = 0, 0, 0.0  # not timed this window: no rate, not a stale one
        else:
            up, down, busy = self._bytes_up, self._bytes_down, self._elapsed
        layer_times: tuple[float, ...] = ()
        if self._layer_steps:
            mean = np.round(self._layer_sum / self._layer_steps, 7)  # 0.1 us: short JSON
            if np.isfinite(mean).all():
                layer_times = tuple(mean.tolist())
        return Window(
            rank=self._rank, num_workers=self._num_workers,
            window=self._first, first_step=self._first,
            last_step=self._last, steps=self._steps, warmup_steps=self._warm,
            config=self._config, model=self._model, arch=self._arch,
            samples=self._samples, elapsed_s=self._elapsed,
            step_time_min_s=self._min if self._steps else 0.0,
            step_time_max_s=self._max if self._steps else 0.0,
            bytes_up=self._bytes_up, bytes_down=self._bytes_down,
            bandwidth_up=8.0 * up / busy if busy > 0 else 0.0,
            bandwidth_down=8.0 * down / busy if busy > 0 else 0.0,
            layer_backward_s=layer_times, layer_steps=self._layer_steps,
            layer_bytes=tuple(self._layer_bytes), wall_time=self._wall,
            warmup_s=self._warm_s, end_step=self._end_step,
        )

    def _reset(self) -> None:
        self._first = self._last = -1
        self._steps = self._warm = self._samples = 0
        self._elapsed = self._comm_s = self._warm_s = 0.0
        self._min, self._max = float("inf"), 0.0
        self._bytes_up = self._bytes_down = self._timed_up = self._timed_down = 0
        self._layer_sum[:] = 0.0
        self._layer_steps = 0
        self._wall = 0.0


def busy_time(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of ``(start, done)`` intervals: the time a link was busy with
    transfers that overlap (an adapter's ``comm_s``)."""
    total, end = 0.0, float("-inf")
    for start, done in sorted(intervals):
        if done <= end:
            continue
        total += done - max(start, end)
        end = done
    return total


def comm_factor(arch: str, workers: int, servers: int) -> float:
    """Bytes the busiest link carries per byte of one worker's gradient: a ring all-reduce
    sends 2(n-1)/n of it over each worker's link; a parameter server's link carries every
    worker's push (n/servers, at least 1). Adapters report their bytes times this over their
    busy time, so a window's B_u, B_d is that link's rate, as the simulator and the
    meta-network's features take it."""
    if arch == "allreduce":
        return 2.0 * (workers - 1) / workers
    return max(1.0, workers / servers)

"""One window of the whole job: the same window of every worker merged, as the tuner sees it.

The fields follow the AutoByte paper's Table II: S_c, S_p, n, l, model, architecture, B_d and
B_u (n each), T (layer-wise backward time, n rows of l), V (n), plus per-layer gradient bytes.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from common.config import Config
from common.errors import ControlError
from common.stats._window import Window

__all__ = ["OBSERVATION_VERSION", "Observation", "merge_windows"]

OBSERVATION_VERSION = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class Observation:
    """A merged window. ``ranks[i]`` is the worker of row i in every per-worker field.

    speed is the job's throughput: the sum of the per-worker speeds V (each worker trains on
    its own samples). step_time_s is the mean step time of the slowest worker (what the
    synchronous job waits for). samples_per_step: samples one step processes across all
    workers (the global batch; 0 when unknown). warmup_steps, warmup_s: the steps left out
    of the speed (the first after a switch: a retrace, new buffers) and the time they took, of
    the slowest worker: what the switch into this window cost beyond steady-state steps.
    end_step: the step the job ends at (0: no worker knows).
    """

    window: int
    first_step: int
    last_step: int
    steps: int
    config: Config
    model: str
    arch: str
    num_workers: int
    num_layers: int
    ranks: tuple[int, ...]
    speed_per_worker: tuple[float, ...]
    bandwidth_up: tuple[float, ...]
    bandwidth_down: tuple[float, ...]
    layer_backward_s: tuple[tuple[float, ...], ...]
    layer_bytes: tuple[int, ...]
    step_time_s: float
    samples_per_step: float = 0.0
    warmup_steps: int = 0
    warmup_s: float = 0.0
    end_step: int = 0

    @property
    def speed(self) -> float:
        return float(sum(self.speed_per_worker))

    @property
    def partition_bytes(self) -> int:
        return self.config.partition_bytes

    @property
    def credit_bytes(self) -> int:
        return self.config.credit_bytes

    @property
    def complete(self) -> bool:
        """Every worker reported this window."""
        return len(self.ranks) == self.num_workers

    @property
    def link_rate(self) -> float | None:
        """The window's link rate (bits/s over the link's busy time): the median of its
        workers' measured rates both ways; None when none was measured."""
        rates = [r for r in (*self.bandwidth_up, *self.bandwidth_down) if r > 0]
        return statistics.median(rates) if rates else None

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["config"] = self.config.to_dict()
        for name in ("ranks", "speed_per_worker", "bandwidth_up", "bandwidth_down",
                     "layer_bytes"):
            data[name] = list(data[name])
        data["layer_backward_s"] = [list(row) for row in self.layer_backward_s]
        data["speed"] = self.speed
        return {"version": OBSERVATION_VERSION, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Observation:
        if data.get("version") != OBSERVATION_VERSION:
            raise ControlError(f"unsupported observation version {data.get('version')!r}; "
                               f"expected {OBSERVATION_VERSION}")
        try:
            fields = {f.name: data[f.name] for f in dataclasses.fields(cls)
                      if f.name in data or f.default is dataclasses.MISSING}
            fields["config"] = Config.from_dict(fields["config"])
            for name in ("ranks", "layer_bytes"):
                fields[name] = tuple(int(v) for v in fields[name])
            for name in ("samples_per_step", "warmup_s"):
                if name in fields:
                    fields[name] = float(fields[name])
            for name in ("warmup_steps", "end_step"):
                if name in fields:
                    fields[name] = int(fields[name])
            for name in ("speed_per_worker", "bandwidth_up", "bandwidth_down"):
                fields[name] = tuple(float(v) for v in fields[name])
            fields["layer_backward_s"] = tuple(
                tuple(float(v) for v in row) for row in fields["layer_backward_s"])
            return cls(**fields)
        except (KeyError, TypeError, ValueError) as exc:
            raise ControlError(f"malformed observation: {exc}") from None


def merge_windows(windows: Sequence[Window]) -> Observation:
    """Merge one window id's Windows from several workers (any order, one per rank).

    Raises ControlError when they disagree on what must be shared: window id, configuration,
    worker count, model or architecture (a worker on another configuration would be a bug
    in the agreement on the switch step, never something to average over).
    """
    if not windows:
        raise ControlError("merge_windows needs at least one window, got none")
    rows = sorted(windows, key=lambda w: w.rank)
    first = rows[0]
    ranks = [w.rank for w in rows]
    if len(set(ranks)) != len(ranks):
        raise ControlError(f"two windows from the same worker: ranks={ranks}")
    for w in rows[1:]:
        for name in ("window", "config", "num_workers", "model", "arch"):
            if getattr(w, name) != getattr(first, name):
                raise ControlError(
                    f"workers disagree on {name}: rank {first.rank} has "
                    f"{getattr(first, name)!r}, rank {w.rank} has {getattr(w, name)!r}")
    layer_bytes = next((w.layer_bytes for w in rows if w.layer_bytes), ())
    measured = [w for w in rows if w.steps]
    return Observation(
        window=first.window,
        first_step=min(w.first_step for w in rows),
        last_step=max(w.last_step for w in rows),
        steps=min(w.steps for w in rows),
        config=first.config, model=first.model, arch=first.arch,
        num_workers=first.num_workers,
        num_layers=max(w.num_layers for w in rows),
        ranks=tuple(ranks),
        speed_per_worker=tuple(w.speed for w in rows),
        bandwidth_up=tuple(w.bandwidth_up for w in rows),
        bandwidth_down=tuple(w.bandwidth_down for w in rows),
        layer_backward_s=tuple(w.layer_backward_s for w in rows),
        layer_bytes=layer_bytes,
        step_time_s=max((w.elapsed_s / w.steps for w in measured), default=0.0),
        samples_per_step=sum(w.samples / w.steps for w in measured),
        warmup_steps=max(w.warmup_steps for w in rows),
        warmup_s=max(w.warmup_s for w in rows),
        end_step=max(w.end_step for w in rows),
    )

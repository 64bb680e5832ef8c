"""One worker's statistics for one window of steps: the AutoByte paper's Table II, per worker.

A Window is what a worker sends to the coordinator, so it is a plain value with a versioned
JSON form. Rates are in bits per second and sizes in bytes, as everywhere in AutoByte.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from common.config import Config
from common.errors import ControlError

__all__ = ["ARCHITECTURES", "WINDOW_SCHEMA", "WINDOW_VERSION", "Window"]

WINDOW_SCHEMA = "autobyte.stats.window"
WINDOW_VERSION = 1
ARCHITECTURES = ("ps", "allreduce")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Window:
    """Statistics of ``steps`` measured steps on one worker under one configuration.

    window: id shared by all workers (the window's first step: workers step in lockstep and
        switch configuration at the same step), so the coordinator can merge across workers.
    steps: measured steps; ``warmup_steps`` more ran but were left out of the speed (the first
        step after a reconfiguration retraces or allocates and is not representative); they
        took ``warmup_s`` seconds (what a switch costs, beyond steady-state steps).
    speed: samples/s on this worker (V); ``bandwidth_up``/``bandwidth_down`` are B_u, B_d in
        bit/s: ``bytes_up``/``bytes_down`` over the time spent moving them (over the window
        when the adapter reports no busy time), where the bytes are the gradient's times
        ``common.stats.comm_factor`` (what the busiest link carries per worker), so B_u, B_d
        is that link's rate.
    layer_backward_s: mean backward time per layer in forward order (this worker's row of T),
        from ``layer_steps`` sampled steps; empty when the adapter sampled none.
    layer_bytes: gradient bytes per layer in forward order (l entries when known).
    end_step: the step the job ends at, when the adapter knows it (0: unknown), so a tuner
        does not start a switch the job ends before it can pay back.
    """

    rank: int
    num_workers: int
    window: int
    first_step: int
    last_step: int
    steps: int
    warmup_steps: int
    config: Config
    model: str
    arch: str
    samples: int
    elapsed_s: float
    step_time_min_s: float
    step_time_max_s: float
    bytes_up: int
    bytes_down: int
    bandwidth_up: float
    bandwidth_down: float
    layer_backward_s: tuple[float, ...] = ()
    layer_steps: int = 0
    layer_bytes: tuple[int, ...] = ()
    wall_time: float = 0.0
    warmup_s: float = 0.0
    end_step: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.num_workers:
            raise ControlError(f"rank must be in [0, num_workers={self.num_workers}), "
                               f"got rank={self.rank}")
        if self.arch not in ARCHITECTURES:
            raise ControlError(f"arch must be one of {list(ARCHITECTURES)}, got arch={self.arch!r}")
        if self.steps < 0 or self.last_step < self.first_step:
            raise ControlError(f"bad step range: first_step={self.first_step}, "
                               f"last_step={self.last_step}, steps={self.steps}")
        for name in ("elapsed_s", "bandwidth_up", "bandwidth_down", "warmup_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ControlError(f"{name} must be finite and >= 0, got {name}={value!r}")

    @property
    def speed(self) -> float:
        """Samples per second over the measured steps (V for this worker); 0 when none."""
        return self.samples / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def partition_bytes(self) -> int:
        return self.config.partition_bytes

    @property
    def credit_bytes(self) -> int:
        return self.config.credit_bytes

    @property
    def num_layers(self) -> int:
        """l: backward layers, from whichever per-layer record the adapter gave."""
        return max(len(self.layer_bytes), len(self.layer_backward_s))

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["config"] = self.config.to_dict()
        data["layer_backward_s"] = list(self.layer_backward_s)
        data["layer_bytes"] = list(self.layer_bytes)
        data["speed"] = self.speed
        return {"schema": WINDOW_SCHEMA, "version": WINDOW_VERSION, **data}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Window:
        """Parse and validate a dict from ``to_dict`` (e.g. off the wire); ControlError if bad."""
        if not isinstance(data, Mapping):
            raise ControlError(f"a window must be a JSON object, got {type(data).__name__}")
        if data.get("schema") != WINDOW_SCHEMA or data.get("version") != WINDOW_VERSION:
            raise ControlError(f"unsupported window schema {data.get('schema')!r} version "
                               f"{data.get('version')!r}; expected {WINDOW_SCHEMA!r} "
                               f"version {WINDOW_VERSION}")
        try:
            fields: dict[str, Any] = {}
            for f in dataclasses.fields(cls):
                if f.name not in data:
                    if f.default is dataclasses.MISSING:
                        raise ControlError(f"window is missing field {f.name!r}")
                    continue
                fields[f.name] = data[f.name]
            fields["config"] = _config(fields["config"])
            for name in ("rank", "num_workers", "window", "first_step", "last_step", "steps",
                         "warmup_steps", "samples", "bytes_up", "bytes_down", "layer_steps",
                         "end_step"):
                if name in fields:
                    fields[name] = _as_int(fields[name], name)
            for name in ("elapsed_s", "step_time_min_s", "step_time_max_s", "bandwidth_up",
                         "bandwidth_down", "wall_time", "warmup_s"):
                if name in fields:
                    fields[name] = _as_float(fields[name], name)
            fields["model"] = str(fields["model"])
            fields["arch"] = str(fields["arch"])
            fields["layer_backward_s"] = _floats(fields.get("layer_backward_s", ()),
                                                 "layer_backward_s")
            fields["layer_bytes"] = _ints(fields.get("layer_bytes", ()), "layer_bytes")
            return cls(**fields)
        except ControlError:
            raise
        except (TypeError, ValueError, KeyError) as exc:
            raise ControlError(f"malformed window: {exc}") from None


@functools.lru_cache(maxsize=64)
def _cached_config(items: tuple[tuple[str, Any], ...]) -> Config:
    return Config.from_dict(dict(items))


def _config(data: Any) -> Config:
    """Config.from_dict, cached: every window of a job repeats the same few configurations."""
    if not isinstance(data, Mapping):
        raise ControlError(f"config must be a JSON object, got {type(data).__name__}")
    try:
        return _cached_config(tuple(sorted(data.items())))
    except TypeError:  # unhashable values: let Config report them
        return Config.from_dict(data)


def _floats(values: Any, name: str) -> tuple[float, ...]:
    """A list of finite numbers, checked in one numpy pass (the coordinator parses n of these,
    l long, per window on rank 0's GIL, so a Python loop per element would cost milliseconds)."""
    array = _array(values, name, "if")
    if not np.isfinite(array).all():
        raise ControlError(f"{name} must hold finite numbers only")
    return tuple(float(v) for v in array.tolist())


def _ints(values: Any, name: str) -> tuple[int, ...]:
    array = _array(values, name, "i")
    if (array < 0).any():
        raise ControlError(f"{name} must hold non-negative integers only")
    return tuple(array.tolist())


def _array(values: Any, name: str, kinds: str) -> npt.NDArray[Any]:
    if not isinstance(values, list | tuple):
        raise ControlError(f"{name} must be a list, got {type(values).__name__}")
    if not values:
        return np.zeros(0, dtype=np.int64)
    try:
        array = np.asarray(values)
    except ValueError:
        raise ControlError(f"{name} must be a flat list of numbers") from None
    if array.ndim != 1 or array.dtype.kind not in kinds:
        raise ControlError(f"{name} must be a flat list of numbers of kind {kinds!r}, got "
                           f"dtype {array.dtype} with shape {array.shape}")
    return array


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ControlError(f"{name} must be an integer, got {name}={value!r}")
    return value


def _as_float(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ControlError(f"{name} must be a finite number, got {name}={value!r}")
    return float(value)

"""Layer profiles: what the simulator needs to know about a model.

A ``Profile`` is the model's trainable layers in forward order, each with its gradient size in
bytes and its forward and backward compute time for one worker's batch. The shipped profiles
take the exact parameter counts of the real architectures (``_arch``) and derive compute times
from FLOPs:

    forward_s  = flops_per_sample * batch_size / device_flops * compute_scale
    backward_s = 2 * forward_s   (gradients w.r.t. inputs and weights: two products per one)

``DEFAULT_DEVICE_FLOPS`` = 10 TFLOP/s is the sustained fp32 rate of a V100-class GPU at about
70% utilisation, which puts ResNet-50 at batch 32 near 80 ms per iteration, as measured in
practice. ``compute_scale`` (or ``device_flops``) stretches it for slower or faster devices.
Measured profiles (the adapters stamp per-layer backward times) are built with ``Profile``
directly.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.errors import ConfigError
from common.sim._arch import ARCHITECTURES

__all__ = ["DEFAULT_DEVICE_FLOPS", "MODELS", "Layer", "Profile", "get_profile", "random_profile"]

DEFAULT_DEVICE_FLOPS = 10e12
BYTES_PER_PARAM = 4  # fp32 gradients
MODELS = tuple(ARCHITECTURES)


@dataclass(frozen=True, slots=True)
class Layer:
    """One trainable layer: gradient bytes and compute seconds for one worker's batch."""

    name: str
    nbytes: int
    forward_s: float
    backward_s: float

    def __post_init__(self) -> None:
        if isinstance(self.nbytes, bool) or not isinstance(self.nbytes, int) or self.nbytes < 0:
            raise ConfigError(f"layer {self.name!r}: nbytes must be an int >= 0, "
                              f"got nbytes={self.nbytes!r}")
        for field in ("forward_s", "backward_s"):
            value = getattr(self, field)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ConfigError(f"layer {self.name!r}: {field} must be a finite number >= 0, "
                                  f"got {field}={value!r}")


@dataclass(frozen=True, slots=True)
class Profile:
    """A model's layers in forward order (index 0 is nearest the input)."""

    name: str
    layers: tuple[Layer, ...]
    batch_size: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        if not self.layers or not all(isinstance(x, Layer) for x in self.layers):
            raise ConfigError(f"profile {self.name!r}: layers must be a non-empty sequence of "
                              f"Layer, got {len(self.layers)} item(s)")
        if not any(x.nbytes for x in self.layers):
            raise ConfigError(f"profile {self.name!r}: at least one layer must have bytes > 0")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) \
                or self.batch_size < 1:
            raise ConfigError(f"profile {self.name!r}: batch_size must be an int >= 1, "
                              f"got batch_size={self.batch_size!r}")

    @property
    def total_bytes(self) -> int:
        return sum(x.nbytes for x in self.layers)

    @property
    def forward_s(self) -> float:
        return math.fsum(x.forward_s for x in self.layers)

    @property
    def backward_s(self) -> float:
        return math.fsum(x.backward_s for x in self.layers)

    @property
    def compute_s(self) -> float:
        """Forward plus backward time of one iteration without communication."""
        return self.forward_s + self.backward_s

    def scaled(self, compute_scale: float) -> Profile:
        """The same model on a device ``compute_scale`` times slower (bytes unchanged)."""
        scale = _positive(compute_scale, "compute_scale")
        return dataclasses.replace(self, layers=tuple(
            dataclasses.replace(x, forward_s=x.forward_s * scale, backward_s=x.backward_s * scale)
            for x in self.layers))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "batch_size": self.batch_size,
                "layers": [dataclasses.asdict(x) for x in self.layers]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        try:
            layers = tuple(Layer(**x) for x in data["layers"])
            return cls(name=str(data["name"]), layers=layers, batch_size=data["batch_size"])
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"not a profile: {exc}") from None


def get_profile(name: str, *, compute_scale: float = 1.0, batch_size: int = 32,
                device_flops: float = DEFAULT_DEVICE_FLOPS) -> Profile:
    """A shipped profile: exact per-layer gradient bytes, compute times from FLOPs."""
    key = str(name).strip().lower().replace("-", "").replace("_", "")
    if key not in ARCHITECTURES:
        raise ConfigError(f"model must be one of {list(MODELS)}, but got model={name!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be an int >= 1, but got batch_size={batch_size!r}")
    per_flop = _positive(compute_scale, "compute_scale") * batch_size \
        / _positive(device_flops, "device_flops")
    layers = tuple(Layer(spec.name, spec.params * BYTES_PER_PARAM, spec.flops * per_flop,
                         2 * spec.flops * per_flop) for spec in ARCHITECTURES[key]())
    return Profile(name=key, layers=layers, batch_size=batch_size)


def random_profile(rng: np.random.Generator, *, layers: tuple[int, int] = (8, 160),
                   total_bytes: tuple[float, float] = (4e6, 600e6),
                   compute_s: tuple[float, float] = (0.01, 1.0),
                   batch_size: int = 32, name: str = "random") -> Profile:
    """A plausible unseen model for datasets: ``layers`` count, total gradient bytes and
    iteration compute time drawn uniformly (log-uniformly for bytes and time) from the ranges.

    Layer sizes are log-normal with a trend towards the output (late layers are wider, as in
    CNNs) and a few very large ones (classifier heads); compute is spread with its own
    log-normal weights, so bytes and compute are not proportional. Deterministic given ``rng``.
    """
    if not (1 <= layers[0] <= layers[1]):
        raise ConfigError(f"layers must be a (low, high) range with 1 <= low <= high, "
                          f"got layers={layers!r}")
    for label, (low, high) in (("total_bytes", total_bytes), ("compute_s", compute_s)):
        if not 0 < low <= high:
            raise ConfigError(f"{label} must be a (low, high) range with 0 < low <= high, "
                              f"got {label}={(low, high)!r}")
    count = int(rng.integers(layers[0], layers[1] + 1))
    total = math.exp(rng.uniform(math.log(total_bytes[0]), math.log(total_bytes[1])))
    compute = math.exp(rng.uniform(math.log(compute_s[0]), math.log(compute_s[1])))
    position = np.linspace(0.0, 1.0, count)
    size_w = np.exp(rng.normal(0.0, 1.2, count) + rng.uniform(0.0, 3.0) * position)
    if count > 2 and rng.random() < 0.5:
        size_w[-int(rng.integers(1, 4)):] *= rng.uniform(5.0, 50.0)
    time_w = np.exp(rng.normal(0.0, 0.7, count))
    nbytes = np.maximum(1, np.round(size_w / size_w.sum() * total / BYTES_PER_PARAM))
    forward = time_w / time_w.sum() * compute / 3.0
    return Profile(name=name, batch_size=batch_size, layers=tuple(
        Layer(f"layer{i}", int(b) * BYTES_PER_PARAM, float(f), float(2 * f))
        for i, (b, f) in enumerate(zip(nbytes, forward, strict=True))))


def _positive(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a finite number > 0, but got {name}={value!r}")
    return float(value)

"""The step agreement: rank 0's decision, taken by every worker at the same step.

Collectives (TensorFlow) and keys (ps-lite) are matched by the order the workers issue them, so
a new configuration must start at the same step everywhere. Each adapter can sum a vector over
the workers beside its own traffic (a ps-lite key; a few elements riding the gradients'
all-reduce). Rank 0 writes its decision into the vector and the others write zeros, so the sum
is rank 0's decision (and whether the next window samples a step: TensorFlow's sampled steps
run a trace of their own, whose collectives every worker must run alike). Every worker also
adds its configuration's fingerprint, its step and a one, whose sums show workers that
disagree, which would otherwise deadlock or corrupt the layout.

Every value is a non-negative integer below ``2**36``, sent as two base-4096 digits, so each
slot's sum is exact in float32 and survives MXNet's 2-bit compression as bits.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from common.config import Config
from common.errors import ConfigError

__all__ = ["HEADER", "SUMMED", "Agreed", "Agreement", "fingerprint", "vector_length"]

_BASE = 4096
_LIMIT = _BASE**3  # the largest value sent is one less
_STEP_MOD = 4096
(_COUNT, _FP_ALL, _STEP_ALL, _FP0, _STEP0, _HAS_CONFIG, _P, _P_LO, _C, _C_LO, _SCHED,
 _HAS_PAYLOAD, _SAMPLE) = range(13)
HEADER = 13
SUMMED = (_COUNT, _FP_ALL, _STEP_ALL)  # the slots every worker writes


def vector_length(payload_len: int = 0) -> int:
    """Floats of an agreement carrying ``payload_len`` integers."""
    return HEADER + 2 * payload_len


def fingerprint(config: Config) -> int:
    """A small number (< 65521) that differs when the communicated knobs differ, or the window
    (the adapters agree at window boundaries: workers with different windows would not meet)."""
    text = (f"{config.partition_bytes}:{config.credit_bytes}:{int(config.scheduling)}:"
            f"{config.window_steps}")
    return zlib.crc32(text.encode()) % 65521


@dataclass(frozen=True, slots=True)
class Agreed:
    """What the summed vector said: the configuration switched to (None: no switch), rank
    0's payload, if it sent one, and whether rank 0 asked for a sampled step."""

    config: Config | None
    payload: tuple[int, ...] | None
    sample: bool = False


class Agreement:
    """One worker's side: the configuration in force, rank 0's pending request, the codec.

    ``due(step)`` (``TuningAgent.due``) gives the tuner's decision due at a step; it is asked
    on every rank, so every agent drains its inbox, and only rank 0's answer is sent.
    """

    def __init__(self, *, rank: int, workers: int, config: Config,
                 due: Callable[[int], Config | None] | None = None) -> None:
        self.rank, self.workers = rank, workers
        self._config = config
        self._due = due
        self._pending: Config | None = None

    @property
    def config(self) -> Config:
        """The configuration in force (the same on every worker)."""
        return self._config

    def request(self, config: Config | None = None, **changes: Any) -> None:
        """Ask for ``config`` (the one in force when None) with ``changes`` from the next
        agreement on; only rank 0's request is sent, and it wins over the tuner's decision."""
        if config is not None and not isinstance(config, Config):
            raise ConfigError(f"reconfigure needs a Config (common.config), got {config!r}")
        base = self._config if config is None else config
        self._pending = base.replace(**changes) if changes else base

    def vector(self, step: int, *, due_at: int | None, payload: Sequence[int] | None = None,
               payload_len: int = 0, sample: bool = False) -> list[float]:
        """This worker's vector at ``step`` for the switch at ``due_at`` (None: a check of the
        workers' agreement alone, proposing nothing); ``payload`` (rank 0's, ``payload_len``
        integers, e.g. measured layer times) rides once when given; ``sample`` is rank 0's."""
        proposal = None
        if due_at is not None:
            due = self._due(due_at) if self._due is not None else None
            proposal = self._pending if self._pending is not None else due
            self._pending = None
        values = [0] * vector_length(payload_len)
        mine = fingerprint(self._config)
        values[_COUNT], values[_FP_ALL], values[_STEP_ALL] = 1, mine, step % _STEP_MOD
        if self.rank == 0:
            values[_FP0], values[_STEP0] = mine, step % _STEP_MOD
            values[_SAMPLE] = int(sample)
            if proposal is not None:
                values[_HAS_CONFIG] = 1
                _put(values, _P, proposal.partition_bytes)
                _put(values, _C, proposal.credit_bytes)
                values[_SCHED] = int(proposal.scheduling)
            if payload is not None:
                if len(payload) != payload_len:
                    raise ValueError(f"payload of {len(payload)} values, the vector holds "
                                     f"{payload_len}")
                values[_HAS_PAYLOAD] = 1
                for i, value in enumerate(payload):
                    _put(values, HEADER + 2 * i, value)
        return [float(v) for v in values]

    def take(self, summed: Sequence[float]) -> Agreed:
        """Check the workers agree and switch to rank 0's proposal; ConfigError if they
        disagree (a key layout or collective order split across workers)."""
        v = [round(x) for x in summed]
        if len(v) < HEADER or (len(v) - HEADER) % 2:
            raise ValueError(f"an agreement vector has {HEADER} + 2n values, got {len(v)}")
        if v[_COUNT] != self.workers:
            raise ConfigError(f"the step agreement summed {v[_COUNT]} workers, expected "
                              f"{self.workers}: a worker is not running AutoByte, or runs "
                              "another layout")
        if v[_FP_ALL] != self.workers * v[_FP0]:
            raise ConfigError(
                "workers disagree on the AutoByte configuration (partition_bytes, "
                f"credit_bytes, scheduling, window_steps): rank {self.rank} has "
                f"{self._config.describe()}, window_steps={self._config.window_steps} "
                f"(fingerprint {fingerprint(self._config)}), rank 0 has fingerprint {v[_FP0]}; "
                "give every worker the same AUTOBYTE_* variables and keyword arguments")
        if v[_STEP_ALL] != self.workers * v[_STEP0]:
            raise ConfigError(
                f"workers are at different steps (rank {self.rank} differs from rank 0): every "
                "worker must run the same steps, pushing the same keys in each")
        payload = tuple(_get(v, i) for i in range(HEADER, len(v), 2)) \
            if v[_HAS_PAYLOAD] else None
        sample = bool(v[_SAMPLE])
        if not v[_HAS_CONFIG]:
            return Agreed(None, payload, sample)
        new = self._config.replace(partition_bytes=_get(v, _P), credit_bytes=_get(v, _C),
                                   scheduling=bool(v[_SCHED]))
        if new == self._config:
            return Agreed(None, payload, sample)
        self._config = new
        return Agreed(new, payload, sample)


def _put(values: list[int], at: int, value: int) -> None:
    values[at], values[at + 1] = divmod(max(0, min(int(value), _LIMIT - 1)), _BASE)


def _get(values: Sequence[int], at: int) -> int:
    return values[at] * _BASE + values[at + 1]

"""The control key: rank 0's configuration decision and a consistency check, summed by ps-lite.

Every step each worker pushes a small float32 vector to one key and pulls the sum. Rank 0
fills the proposal slots (the others write zeros), so the sum *is* rank 0's proposal, and all
workers read it back and apply it at the same later step. Every worker also adds its own
configuration fingerprint and step counter; a sum that is not ``num_workers`` times rank 0's
value means the workers disagree, which would otherwise corrupt or deadlock the key layout.

Values are split into base-4096 digits so each slot stays exact in float32.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from common.config import Config
from common.errors import ConfigError

__all__ = ["SLOTS", "ControlMessage", "decode", "encode", "fingerprint"]

_BASE = 4096
(_HAS, _P_HI, _P_LO, _C_HI, _C_LO, _SCHED, _FP0, _FP_ALL, _STEP0, _STEP_ALL, _COUNT,
 _HEAD_HAS, _HEAD_HI, _HEAD_LO) = range(14)
SLOTS = 14
_STEP_MOD = 4096


def fingerprint(config: Config) -> int:
    """A small number (< 65521) that differs when the communicated knobs differ."""
    text = f"{config.partition_bytes}:{config.credit_bytes}:{int(config.scheduling)}"
    return zlib.crc32(text.encode()) % 65521


@dataclass(frozen=True, slots=True)
class ControlMessage:
    """What the summed control vector says: rank 0's proposal, if any, and its plan head."""

    partition_bytes: int | None
    credit_bytes: int | None
    scheduling: bool | None
    head_bytes: int | None = None

    def apply_to(self, config: Config) -> Config | None:
        """The proposed config built on ``config``; None when nothing was proposed."""
        if self.partition_bytes is None:
            return None
        new = config.replace(partition_bytes=self.partition_bytes,
                             credit_bytes=self.credit_bytes, scheduling=self.scheduling)
        return None if new == config else new


def encode(*, rank: int, config: Config, step: int, proposal: Config | None,
           head_bytes: int | None = None) -> list[float]:
    """This worker's control vector. ``head_bytes``: rank 0's measured plan head (``_plan``)."""
    values = [0.0] * SLOTS
    mine = fingerprint(config)
    values[_FP_ALL] = float(mine)
    values[_STEP_ALL] = float(step % _STEP_MOD)
    values[_COUNT] = 1.0
    if rank == 0:
        values[_FP0] = float(mine)
        values[_STEP0] = float(step % _STEP_MOD)
        if head_bytes is not None:
            values[_HEAD_HAS] = 1.0
            values[_HEAD_HI], values[_HEAD_LO] = divmod(max(0, min(head_bytes, 2**40)), _BASE)
        if proposal is not None:
            values[_HAS] = 1.0
            values[_P_HI], values[_P_LO] = divmod(proposal.partition_bytes, _BASE)
            values[_C_HI], values[_C_LO] = divmod(proposal.credit_bytes, _BASE)
            values[_SCHED] = 1.0 if proposal.scheduling else 0.0
    return values


def decode(values: list[float], *, num_workers: int, rank: int, config: Config) -> ControlMessage:
    """Check agreement and return rank 0's proposal; ConfigError if the workers disagree."""
    v = [round(x) for x in values]
    if v[_COUNT] != num_workers:
        raise ConfigError(f"control key summed {v[_COUNT]} workers, expected {num_workers}: "
                          "a worker is not running AutoByte, or runs a different key layout")
    if v[_FP_ALL] != num_workers * v[_FP0]:
        raise ConfigError(
            "workers disagree on the AutoByte configuration (partition_bytes, credit_bytes, "
            f"scheduling): rank {rank} has {config.describe()} (fingerprint "
            f"{fingerprint(config)}), rank 0 has fingerprint {v[_FP0]}; give every worker the "
            "same AUTOBYTE_* variables and keyword arguments")
    if v[_STEP_ALL] != num_workers * v[_STEP0]:
        raise ConfigError(
            f"workers are at different steps (rank {rank} differs from rank 0): every worker "
            "must call pushpull for the same keys every step")
    head = v[_HEAD_HI] * _BASE + v[_HEAD_LO] if v[_HEAD_HAS] else None
    if not v[_HAS]:
        return ControlMessage(None, None, None, head)
    return ControlMessage(v[_P_HI] * _BASE + v[_P_LO], v[_C_HI] * _BASE + v[_C_LO],
                          bool(v[_SCHED]), head)

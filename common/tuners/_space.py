"""The search space: native, and (partition size, credit multiple) pairs.

Partition sizes are bytes; the credit is a whole multiple of the partition (the paper's 1x..16x),
so every point is a valid Config (credit >= partition). The default partitions are the powers
of two from 64 KiB to 64 MiB: below 64 KiB the per-block overhead dominates on every model we
ship, and a 64 MiB block already holds most models whole. Native (the framework's own path,
``scheduling`` off) is a point too, the first of ``configs()``; iterating the space yields the
scheduled pairs only. Where a model needs numbers for native it reads ``NATIVE_BYTES``, a
partition past any valid one, at 1x (``encode``, ``features``): for all-reduce that is what
native is, one pack of every gradient sent after the backward pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

from common.config import MAX_PARTITION_BYTES, MIN_PARTITION_BYTES, Config
from common.errors import ConfigError
from common.units import format_bytes, parse_bytes

__all__ = ["DEFAULT_CREDIT_MULTIPLES", "DEFAULT_PARTITIONS", "MAX_CREDIT_MULTIPLE", "NATIVE_BYTES",
           "SearchSpace"]

DEFAULT_PARTITIONS: tuple[int, ...] = tuple(2**k * 1024 for k in range(6, 17))
MAX_CREDIT_MULTIPLE = 16
DEFAULT_CREDIT_MULTIPLES: tuple[int, ...] = tuple(range(1, MAX_CREDIT_MULTIPLE + 1))
NATIVE_BYTES = 2 * MAX_PARTITION_BYTES  # native's partition and credit, to a model of speed


class SearchSpace:
    """Partition sizes (bytes, or strings like "4MiB") x credit multiples (ints in 1..16)."""

    def __init__(self, *, partitions: Iterable[int | str] = DEFAULT_PARTITIONS,
                 credit_multiples: Iterable[int] = DEFAULT_CREDIT_MULTIPLES,
                 native: bool = True) -> None:
        sizes = sorted({parse_bytes(p, "partitions") for p in partitions})
        if not sizes:
            raise ConfigError("partitions must hold at least one size, got none")
        for size in sizes:
            if not MIN_PARTITION_BYTES <= size <= MAX_PARTITION_BYTES:
                raise ConfigError(
                    f"partitions must be between {format_bytes(MIN_PARTITION_BYTES)} and "
                    f"{format_bytes(MAX_PARTITION_BYTES)}, but got a partition of {size} bytes")
        multiples = list(credit_multiples)
        for m in multiples:
            if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= MAX_CREDIT_MULTIPLE:
                raise ConfigError(f"credit_multiples must be ints between 1 and "
                                  f"{MAX_CREDIT_MULTIPLE}, but got {m!r}")
        if not multiples:
            raise ConfigError("credit_multiples must hold at least one multiple, got none")
        self.native = bool(native)
        self.partitions: tuple[int, ...] = tuple(sizes)
        self.credit_multiples: tuple[int, ...] = tuple(sorted(set(multiples)))
        self._log_low = math.log2(self.partitions[0])
        self._log_span = math.log2(self.partitions[-1]) - self._log_low or 1.0
        self._m_low = self.credit_multiples[0]
        self._m_span = (self.credit_multiples[-1] - self._m_low) or 1

    def __len__(self) -> int:
        """The scheduled pairs (``configs()`` has one more with native)."""
        return len(self.partitions) * len(self.credit_multiples)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        """(partition bytes, credit multiple), partition-major, both ascending."""
        for p in self.partitions:
            for m in self.credit_multiples:
                yield p, m

    def __contains__(self, config: object) -> bool:
        if isinstance(config, Config) and not config.scheduling:
            return self.native
        return isinstance(config, Config) and self.point(config) in set(self)

    def config(self, partition: int, multiple: int, base: Config | None = None) -> Config:
        """The Config for one point, scheduled; other fields come from ``base`` (defaults
        otherwise), which may be native (where jobs start)."""
        base = base or Config()
        return base.replace(partition_bytes=partition, credit_bytes=partition * multiple,
                            scheduling=True)

    def native_config(self, base: Config | None = None) -> Config:
        return (base or Config()).replace(scheduling=False)

    def configs(self, base: Config | None = None) -> list[Config]:
        """Every point as a Config: native first (when in the space), then the pairs."""
        native = [self.native_config(base)] if self.native else []
        return native + [self.config(p, m, base) for p, m in self]

    @staticmethod
    def encode(config: Config) -> tuple[int, int]:
        """(partition, credit) bytes a model of speed reads; native is one pack past the
        largest partition."""
        if not config.scheduling:
            return NATIVE_BYTES, NATIVE_BYTES
        return config.partition_bytes, config.credit_bytes

    @staticmethod
    def point(config: Config) -> tuple[int, int]:
        """(partition, credit multiple rounded to a whole number) of any Config."""
        return config.partition_bytes, max(1, round(config.credit_multiple))

    def features(self, config: Config) -> tuple[float, float]:
        """Coordinates in [0, 1]^2 for a model of the objective: log2 of the partition
        (speed changes by factors as the partition doubles) and the credit multiple."""
        partition, credit = self.encode(config)
        return ((math.log2(partition) - self._log_low) / self._log_span,
                (credit / partition - self._m_low) / self._m_span)

    def __repr__(self) -> str:
        return (f"SearchSpace(partitions={[format_bytes(p) for p in self.partitions]}, "
                f"credit_multiples={list(self.credit_multiples)}, native={self.native})")

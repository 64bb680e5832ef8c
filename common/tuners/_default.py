"""P3's fixed choice: 160 KB partitions, a credit of one partition (stop-and-wait). No search,
no overhead; the baseline every tuner must beat."""

from __future__ import annotations

from common.config import Config
from common.tuners._base import Tuner

__all__ = ["P3_PARTITION_BYTES", "DefaultTuner"]

P3_PARTITION_BYTES = 160 * 1024


class DefaultTuner(Tuner):
    name = "default"

    def propose(self) -> Config:
        return self.base.replace(partition_bytes=P3_PARTITION_BYTES,
                                 credit_bytes=P3_PARTITION_BYTES, scheduling=True)

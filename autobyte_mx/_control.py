"""The step agreement's channel in MXNet: one ps-lite key every worker pushpulls each step.

``common.agreement`` makes and reads the vector; this key carries it. Rank 0's plan head
(``_pace``) rides as its payload. The vector is written around the engine (``_engine.host_view``):
the last exchange was waited for, and an engine write would wait for the step's queued backward
pass, holding back every gradient push of the step until then. Under 2-bit compression the
values go as bits that compression keeps exact (``_compression.wire``).
"""

from __future__ import annotations

from typing import Any

import mxnet as mx
import numpy
import numpy.typing as npt

from autobyte_mx import _engine
from autobyte_mx._compression import unwire, wire
from autobyte_mx._layout import CONTROL_KEY
from autobyte_mx._transport import Transport
from common.agreement import Agreed, Agreement

__all__ = ["ControlKey"]


class ControlKey:
    """Sends this worker's agreement vector each step and takes the sum a step later."""

    def __init__(self, agreement: Agreement, *, transport: Transport,
                 threshold: float | None) -> None:
        self._agreement = agreement
        self._transport = transport
        self._threshold = threshold  # 2-bit compression's, or None
        self._array: Any = None
        self._view: Any = None
        self._sent = False

    def handshake(self, kv: Any) -> None:
        """Once, before any other key: create the key and check the workers agree."""
        first = self._wire(self._agreement.vector(0, due_at=0, payload_len=1))
        self._array = mx.nd.zeros(first.shape)
        kv.init(CONTROL_KEY, self._array)
        self._array[:] = mx.nd.array(first)
        self._transport.exchange([CONTROL_KEY], [self._array])
        self._agreement.take(self._unwire(self._array.asnumpy()))
        self._view = _engine.host_view(self._array)

    def send(self, step: int, *, head_bytes: int | None, priority: int) -> None:
        """Step ``step``'s vector, for the switch at the next step."""
        payload = None if head_bytes is None else [head_bytes]
        self._view[:] = self._wire(self._agreement.vector(step, due_at=step + 1,
                                                          payload=payload, payload_len=1))
        self._transport.exchange([CONTROL_KEY], [self._array], priority=priority)
        self._sent = True

    def take(self) -> Agreed | None:
        """The sum of the last vector sent (waits for it); None before the first."""
        if not self._sent:
            return None
        return self._agreement.take(self._unwire(self._array.asnumpy()))

    def _wire(self, values: list[float]) -> npt.NDArray[numpy.float32]:
        if self._threshold is None:
            return numpy.asarray(values, dtype=numpy.float32)
        return wire(values, self._threshold)

    def _unwire(self, summed: npt.NDArray[numpy.float32]) -> list[float]:
        if self._threshold is None:
            return [float(x) for x in summed]
        return unwire(summed, self._threshold)


"""AutoByte's own buffers and native sub-keys for every tensor, one layout per partition size.

The native kvstore keeps CPU arrays given to ``init`` by reference and writes into them later,
and slices of one NDArray share one engine variable (so they serialise). Each chunk therefore
gets its own buffer and its own native key. Key numbers are handed out in the same order on
every worker (tensors in registration order, layouts in the order they are adopted), so the
layouts agree without any exchange. Key 0 is the control key.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from common.scheduler import split_sizes

__all__ = ["CONTROL_KEY", "WHOLE", "Piece", "Tensor"]

CONTROL_KEY = 0
WHOLE = 0  # layout id of "one piece per tensor" (scheduling off)


@dataclass(slots=True)
class Piece:
    sub_key: int
    start: int  # element offsets into the flattened tensor
    stop: int
    buffer: Any  # mx.nd.NDArray, 1-D, owned by AutoByte


@dataclass(slots=True, eq=False)
class Tensor:
    """A user key: its shape, dtype and forward-order layer, and its pieces per layout."""

    key: Hashable
    name: str
    shape: tuple[int, ...]
    dtype: Any
    itemsize: int
    layer: int
    layouts: dict[int, list[Piece]] = field(default_factory=dict)
    views: dict[int, tuple[Any, list[Any]]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def spans(self, layout: int) -> list[tuple[int, int]]:
        """Element ranges of the pieces under ``layout`` (a partition size, or WHOLE)."""
        if layout == WHOLE:
            return [(0, self.size)]
        spans, start = [], 0
        for size in split_sizes(self.nbytes, layout, self.itemsize):
            stop = start + size // self.itemsize
            spans.append((start, stop))
            start = stop
        return spans

    def slices(self, array: Any, layout: int) -> list[Any]:
        """Flat views of ``array`` for the pieces, cached per array object (slicing costs)."""
        cached = self.views.get(layout)
        if cached is None or cached[0] is not array:
            flat = array.reshape((-1,))
            pieces = self.layouts[layout]
            views = [flat] if len(pieces) == 1 else [flat[p.start:p.stop] for p in pieces]
            cached = self.views[layout] = (array, views)
        return cached[1]

"""AutoByte's own buffers and native keys: one of each per block of ``common.plan``'s layout.

A ``Group`` is a set of tensors laid out together under one layout id (a partition size, or
``WHOLE`` for native one-key-per-tensor): ``common.plan.make_layout`` cuts their stream into
blocks, and each block gets one 1-D NDArray and one native key. Every member tensor's segments
map to slices of those NDArrays (``Slot``); copies into slices of one NDArray serialise on its
engine variable, which is cheap next to a network round. The native kvstore keeps CPU arrays
given to ``init`` by reference and writes into them later, so user arrays never become keys.

Key numbers are handed out in the order groups are created, which is the same program point
on every worker (a tensor's init, a step boundary, a key's first push in a layout), so the
workers' keys agree without any exchange. Key 0 is the control key.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy

from common.config import Config
from common.plan import Block, Layout, Segment, TensorSpec, make_layout

__all__ = ["CONTROL_KEY", "WHOLE", "Buffer", "Group", "Groups", "Slot", "Tensor", "block_name",
           "layout_id"]

CONTROL_KEY = 0
WHOLE = 0  # layout id of "each tensor whole, one key each" (scheduling off)


@dataclass(slots=True, eq=False)
class Tensor:
    """A user key: its shape, dtype and forward-order layer.

    ``home`` is the ``Group`` whose slots hold the sum it last received. A ``pull`` reads it
    there, so a pull before the next push sees the sum whatever layouts came in between.
    ``weight`` is the caller's weight array when the optimizer runs on the server; a whole
    tensor's result then goes straight into it, and ``home`` is None.
    """

    key: Hashable
    name: str
    shape: tuple[int, ...]
    dtype: Any
    itemsize: int
    layer: int
    home: Group | None = None
    whole: Group | None = None  # its own native key (the layout of scheduling off), once made
    checked: tuple[Any, ...] = ()  # the last gradient arrays checked (shape, storage)
    devices: Any = None  # with several devices per worker, their gradients' DeviceSum
    weight: Any = None
    views: dict[tuple[int, int], tuple[Any, list[Any]]] = field(default_factory=dict)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * self.itemsize

    def spec(self) -> TensorSpec:
        return TensorSpec(self.name, self.nbytes, self.itemsize, numpy.dtype(self.dtype).name)


@dataclass(frozen=True, slots=True)
class Buffer:
    """One block's native key and AutoByte-owned NDArray."""

    key: int
    block: Block
    array: Any
    name: str


@dataclass(frozen=True, slots=True)
class Slot:
    """One segment of a member tensor: ``view`` is its slice of the block's buffer."""

    block: int
    segment: Segment
    view: Any


def layout_id(config: Config) -> int:
    """The id of the layout ``config`` asks for: its partition size, or WHOLE when off."""
    return config.partition_bytes if config.scheduling else WHOLE


def block_name(names: Sequence[str], block: Block) -> str:
    """Readable: the first member's name, and ``+N`` for N more members fused with it."""
    members = block.tensors
    extra = f"+{len(members) - 1}" if len(members) > 1 else ""
    return names[members[0]] + extra


class Group:
    """``tensors`` (forward order) under layout ``layout_id``; see the module docstring.

    ``zeros(size, dtype)`` makes a buffer; ``first_key`` is the first native key to use (the
    group takes ``len(buffers)`` consecutive keys).
    """

    def __init__(self, *, gid: int, tensors: Sequence[Tensor], config: Config, first_key: int,
                 zeros: Callable[[int, Any], Any]) -> None:
        self.gid = gid
        self.layout_id = layout_id(config)
        self.epoch = 0  # the layout epoch whose weights its server keys hold (optimizer there)
        self.tensors = tuple(tensors)
        self.layout: Layout = make_layout([t.spec() for t in self.tensors], config, arch="ps")
        self.index = {t.key: i for i, t in enumerate(self.tensors)}
        names = [t.name for t in self.tensors]
        self.buffers: list[Buffer] = []
        for offset, block in enumerate(self.layout.blocks):
            dtype = self.tensors[block.segments[0].tensor].dtype
            size = sum(s.size for s in block.segments)
            self.buffers.append(Buffer(first_key + offset, block, zeros(size, dtype),
                                       block_name(names, block)))
        self.slots: list[list[Slot]] = [[] for _ in self.tensors]
        self.members: list[tuple[int, ...]] = []
        for block, buffer in zip(self.layout.blocks, self.buffers, strict=True):
            at = 0
            for seg in block.segments:
                whole_buffer = at == 0 and seg.size == buffer.array.shape[0]
                view = buffer.array if whole_buffer else buffer.array[at:at + seg.size]
                self.slots[seg.tensor].append(Slot(block.index, seg, view))
                at += seg.size
            self.members.append(block.tensors)
        self.blocks_of: list[tuple[int, ...]] = [tuple(s.block for s in slots)
                                                 for slots in self.slots]

    @property
    def keys(self) -> list[int]:
        return [b.key for b in self.buffers]

    @property
    def arrays(self) -> list[Any]:
        return [b.array for b in self.buffers]

    @property
    def names(self) -> list[str]:
        return [b.name for b in self.buffers]

    def pieces(self) -> dict[int, tuple[int, tuple[tuple[Hashable, int, int, int], ...]]]:
        """Native key -> (this group's id, its (tensor key, tensor size, start, stop) in
        order): what the optimizer on the server needs to update a block tensor by tensor."""
        return {b.key: (self.gid, tuple((self.tensors[s.tensor].key, self.tensors[s.tensor].size,
                                         s.start, s.stop) for s in b.block.segments))
                for b in self.buffers}

    def fill(self, value_of: Callable[[Tensor], Any]) -> None:
        """Queue copies of each member's ``value_of(tensor)`` into its slots (members
        without one keep what their slots hold)."""
        for member, tensor in enumerate(self.tensors):
            value = value_of(tensor)
            if value is not None:
                self.copy_in(member, value)

    def _views(self, member: int, array: Any, role: int) -> list[Any]:
        """Flat views of ``array`` for the member's slots, cached per array object (one for
        inputs, ``role`` 0, one for outputs, 1: slicing costs more than the copy's push)."""
        tensor = self.tensors[member]
        cached = tensor.views.get((self.gid, role))
        if cached is None or cached[0] is not array:
            flat = array.reshape((-1,))
            slots = self.slots[member]
            whole = len(slots) == 1 and slots[0].segment.size == tensor.size
            views = [flat] if whole else [flat[s.segment.start:s.segment.stop] for s in slots]
            cached = tensor.views[self.gid, role] = (array, views)
        return cached[1]

    def copy_in(self, member: int, value: Any) -> None:
        """Queue the copies of ``value`` (the member's gradient) into its slots."""
        for view, slot in zip(self._views(member, value, 0), self.slots[member], strict=True):
            view.copyto(slot.view)

    def flat(self, member: int, target: Any) -> Any:
        """``target`` as one flat view (cached) for a member kept whole in one block: what
        the native store's own copy back needs (its shapes must match)."""
        (view,) = self._views(member, target, 1)
        return view

    def flat_in(self, member: int, value: Any) -> Any:
        """``value`` as one flat view (cached), for a member kept whole, pushed as it is."""
        (view,) = self._views(member, value, 0)
        return view

    def copy_out(self, member: int, targets: Sequence[Any], concat: Callable[..., Any]) -> None:
        """Queue the copy of the member's slots into ``targets[0]`` (one op: ``concat`` for
        several slots), and from there into the other devices' ``targets``."""
        if not targets:
            return
        slots, first = self.slots[member], targets[0]
        if len(slots) == 1:
            slots[0].view.copyto(self._views(member, first, 1)[0])
        else:
            concat(*[s.view for s in slots], dim=0, out=first.reshape((-1,)))
        for target in targets[1:]:
            first.copyto(target)


class Groups:
    """Every group made so far, by layout id and member keys, and the next free native key.

    ``zeros(size, dtype)`` makes a buffer; ``init(groups)`` gives new groups' keys to the
    native kvstore (a barrier: at the same program point on every worker). A group made once
    is kept, so switching back to a layout costs nothing.
    """

    def __init__(self, *, zeros: Callable[[int, Any], Any],
                 init: Callable[[list[Group]], None]) -> None:
        self._zeros = zeros
        self._init = init
        self._groups: dict[tuple[int, tuple[Hashable, ...]], Group] = {}
        self._mains: dict[tuple[int, frozenset[Hashable], int], Group] = {}
        self._order = 0
        self._next_key = CONTROL_KEY + 1

    def __len__(self) -> int:
        return len(self._groups)

    def __iter__(self) -> Iterator[Group]:
        return iter(self._groups.values())

    def get(self, config: Config, tensors: Sequence[Tensor], *, init: bool = True) -> Group:
        """The group of ``tensors`` (forward order) under ``config``'s layout; a new one's
        keys are initialised unless ``init`` is False (the caller fills and inits it)."""
        index = (layout_id(config), tuple(t.key for t in tensors))
        group = self._groups.get(index)
        if group is None:
            group = Group(gid=len(self._groups), tensors=tensors, config=config,
                          first_key=self._next_key, zeros=self._zeros)
            self._next_key += len(group.buffers)
            self._groups[index] = group
            if init:
                self._init([group])
        return group

    def whole(self, tensor: Tensor, *, init: bool = True) -> Group:
        """The tensor's own native key (the layout of scheduling off)."""
        return self.get(_NATIVE, [tensor], init=init)

    def of(self, tensor: Tensor, main: Group | None, config: Config) -> Group:
        """``main`` if it holds the tensor, else the tensor's own group under ``config``."""
        if main is not None and tensor.key in main.index:
            return main
        return self.get(config, [tensor])

    def main(self, config: Config, expected: frozenset[Hashable] | None,
             tensors: Mapping[Hashable, Tensor]) -> Group | None:
        """The group of the ``expected`` keys (those pushed every step) in forward order, or
        None with scheduling off; cached per layout, key set and forward order."""
        if not config.scheduling or not expected:
            return None
        index = (config.partition_bytes, expected, self._order)
        group = self._mains.get(index)
        if group is None:
            members = sorted((tensors[k] for k in expected if k in tensors),
                             key=lambda t: t.layer)
            if not members:
                return None
            group = self._mains[index] = self.get(config, members)
        return group

    def order_changed(self) -> None:
        """Tensors were added or the forward order changed: main groups are looked up anew."""
        self._order += 1


_NATIVE = Config(scheduling=False)

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

With the optimizer on several servers (``Groups.pin``), each tensor's elements are pinned to
servers when it is first laid out (``pins_for``: a tensor the native store would keep whole
goes to the server holding the fewest elements so far, a larger one is spread evenly as the
native store spreads it), every layout cuts blocks within one server's elements, no block
reaches the size the native store would spread, and each block gets a key the native store
sends to its server, so an element's optimizer state never has to move.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy

from common.config import Config
from common.errors import ConfigError
from common.plan import Block, Layout, Pin, Segment, TensorSpec, make_layout

__all__ = ["CONTROL_KEY", "WHOLE", "Buffer", "Group", "Groups", "Slot", "Tensor", "Tensors",
           "block_name", "layout_id", "pins_for", "same", "server_of"]

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
    pins: tuple[Pin, ...] = ()  # its elements' servers, with the optimizer on several servers
    pushed: Group | None = None  # the group of its last push (the optimizer on the servers)
    updates: int = 0  # its pushes so far: the servers' update count (the optimizer there)
    views: dict[tuple[int, int], tuple[tuple[Any, ...], list[Any]]] = field(default_factory=dict)

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


class Tensors(dict[Hashable, Tensor]):
    """The keys initialised so far (key -> ``Tensor``, in registration order) and their
    forward order: the hint's position (``forward``, by name), then registration order, the
    same on every worker."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] | None = None  # the Trainer's parameter names, by key
        self.forward: dict[str, int] = {}

    def of(self, key: Hashable) -> Tensor:
        try:
            return self[key]
        except KeyError:
            raise ConfigError(f"key {key!r} was never initialised (init or broadcast it "
                              f"first); known keys: {sorted(map(str, self))}") from None

    def add(self, key: Hashable, value: Any) -> Tensor:
        if key in self:
            raise ConfigError(f"key {key!r} is already initialised")
        names = self.names
        name = names[key] if names is not None and isinstance(key, int) else str(key)
        tensor = self[key] = Tensor(key, name, tuple(value.shape), value.dtype,
                                    numpy.dtype(value.dtype).itemsize, layer=len(self))
        return tensor

    def order(self) -> None:
        """Give every tensor its forward-order layer."""
        hinted = len(self.forward)
        ranked = sorted(enumerate(self.values()),
                        key=lambda it: (self.forward.get(it[1].name, hinted), it[0]))
        for layer, (_, tensor) in enumerate(ranked):
            tensor.layer = layer


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


def server_of(key: int, servers: int) -> int:
    """The server the native store sends a key of fewer elements than its bound to."""
    return (key * 9973) % servers


def pins_for(size: int, servers: int, max_items: int, load: list[int]) -> tuple[Pin, ...]:
    """A new tensor's ranges by server (see the module docstring); ``load`` (elements per
    server so far) is updated."""
    if size <= max_items:
        server = load.index(min(load))
        load[server] += size
        return ((0, size, server),)
    cuts = [math.floor(size / servers * i + 0.5) for i in range(servers + 1)]  # as ps-lite rounds
    for server in range(servers):
        load[server] += cuts[server + 1] - cuts[server]
    return tuple((cuts[s], cuts[s + 1], s) for s in range(servers) if cuts[s + 1] > cuts[s])


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

    ``zeros(size, dtype)`` makes a buffer; ``new_key(server)`` hands out a native key for a
    block on ``server``; ``max_items`` bounds a block where tensors are pinned.
    """

    def __init__(self, *, gid: int, tensors: Sequence[Tensor], config: Config,
                 new_key: Callable[[int], int], zeros: Callable[[int, Any], Any],
                 max_items: int | None = None) -> None:
        self.gid = gid
        self.layout_id = layout_id(config)
        self.epoch = 0  # the layout epoch whose weights its server keys hold (optimizer there)
        self.tensors = tuple(tensors)
        pinned = max_items is not None
        self.layout: Layout = make_layout([t.spec() for t in self.tensors], config, arch="ps",
                                          pins=[t.pins for t in self.tensors] if pinned else None,
                                          max_items=max_items)
        self.index = {t.key: i for i, t in enumerate(self.tensors)}
        names = [t.name for t in self.tensors]
        self.buffers: list[Buffer] = []
        for block in self.layout.blocks:
            dtype = self.tensors[block.segments[0].tensor].dtype
            size = sum(s.size for s in block.segments)
            self.buffers.append(Buffer(new_key(block.server), block, zeros(size, dtype),
                                       block_name(names, block)))
        # fixed once made; the native path reads them for every tensor of every step
        self.keys: list[int] = [b.key for b in self.buffers]
        self.arrays: list[Any] = [b.array for b in self.buffers]
        self.names: list[str] = [b.name for b in self.buffers]
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
        for slots in self.slots:  # in element order (pinned blocks interleave servers)
            slots.sort(key=lambda slot: slot.segment.start)
        self.blocks_of: list[tuple[int, ...]] = [tuple(s.block for s in slots)
                                                 for slots in self.slots]

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

    def _views(self, member: int, arrays: Sequence[Any], role: int) -> list[Any]:
        """Flat views of ``arrays`` (one per device) for the member's slots, device by device,
        cached per array objects (one list for inputs, ``role`` 0, one for outputs, 1: slicing
        costs more than the copy's push)."""
        tensor = self.tensors[member]
        cached = tensor.views.get((self.gid, role))
        if cached is None or not same(cached[0], arrays):
            slots = self.slots[member]
            whole = len(slots) == 1 and slots[0].segment.size == tensor.size
            views = []
            for array in arrays:
                flat = array.reshape((-1,))
                views += [flat] if whole else [flat[s.segment.start:s.segment.stop]
                                               for s in slots]
            cached = tensor.views[self.gid, role] = (tuple(arrays), views)
        return cached[1]

    def copy_in(self, member: int, value: Any) -> None:
        """Queue the copies of ``value`` (the member's gradient) into its slots."""
        for view, slot in zip(self._views(member, [value], 0), self.slots[member], strict=True):
            view.copyto(slot.view)

    def views_out(self, member: int, targets: Sequence[Any]) -> list[Any]:
        """``targets`` (one per device) as flat views (cached), one per slot of a member alone
        in its blocks: what the native store's own copy back needs (its shapes must match)."""
        return self._views(member, targets, 1)

    def views_in(self, member: int, values: Sequence[Any]) -> list[Any]:
        """``values`` (one per device) as flat views (cached), one per slot of a member alone
        in its blocks, pushed as they are."""
        return self._views(member, values, 0)

    def copy_out(self, member: int, targets: Sequence[Any], concat: Callable[..., Any]) -> None:
        """Queue the copy of the member's slots into ``targets[0]`` (one op: ``concat`` for
        several slots), and from there into the other devices' ``targets``."""
        if not targets:
            return
        slots, first = self.slots[member], targets[0]
        if len(slots) == 1:
            slots[0].view.copyto(self._views(member, [first], 1)[0])
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
        self._servers = 1
        self._max_items: int | None = None
        self._load = [0]
        self._next_keys = [CONTROL_KEY + 1]

    def pin(self, servers: int, max_items: int) -> None:
        """Pin tensors to ``servers`` from now on, blocks of at most ``max_items`` elements
        (the module docstring says why); before the first group."""
        if self._groups:
            raise ValueError("tensors are pinned to servers before the first group is made")
        self._servers, self._max_items, self._load = servers, max_items, [0] * servers
        self._next_keys = [self._first_key(s, CONTROL_KEY + 1) for s in range(servers)]

    def _first_key(self, server: int, at: int) -> int:
        while server_of(at, self._servers) != server:
            at += 1
        return at

    def _new_key(self, server: int) -> int:
        key = self._next_keys[server]
        self._next_keys[server] = self._first_key(server, key + 1)
        return key

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
            if self._max_items is not None:
                for tensor in tensors:
                    tensor.pins = tensor.pins or pins_for(tensor.size, self._servers,
                                                          self._max_items, self._load)
            group = Group(gid=len(self._groups), tensors=tensors, config=config,
                          new_key=self._new_key, zeros=self._zeros, max_items=self._max_items)
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


def same(kept: Sequence[Any], given: Sequence[Any]) -> bool:
    """``given`` holds the very arrays of ``kept`` (the Trainer passes the same every step).
    Asked about four times per tensor per step (160 tensors on a MobileNetV2), so one device,
    the common case, is one comparison."""
    n = len(kept)
    if n != len(given):
        return False
    if n == 1:
        return kept[0] is given[0]
    return all(map(operator.is_, kept, given))

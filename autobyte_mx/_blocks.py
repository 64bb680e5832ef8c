"""A round's closed blocks as MXNet engine operations, and their timings back for statistics.

For each block, in this order: a gate (an async engine op that mutates the block's buffer, so
it waits for every member's copy in, and ends only when the scheduler admits the block), one
native pushpull for all the blocks closed together, and a completion callback; then the copy
back of every member whose blocks are all closed. Members of a flushed block that were not
issued travel with what their slots hold (every worker sends the same keys) and get their
slots back afterwards, so their last sum stays where a ``pull`` reads it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import mxnet as mx

from autobyte_mx import _engine
from autobyte_mx._sequencer import Round
from common.plan import Send

__all__ = ["block_rows", "push_blocks"]

Row = tuple[int, str, int, int, int, float, float, float]


def push_blocks(rnd: Round, blocks: list[int], *, pushpull: Callable[[list[int], list[Any]],
                                                                     None],
                gate_fired: Callable[[Round, int, Callable[[], None]], None],
                done: Callable[[Send], None], priority: int, comm_priority: int,
                prepare: Callable[[Round, int], None] | None = None) -> None:
    """Push the ops of ``rnd``'s ``blocks`` (just closed); see the module docstring.
    ``prepare(rnd, block)`` queues ops on a block's data before its gate (compression)."""
    group = rnd.group
    saved = [(slot.view.copy(), slot.view) for b in blocks for m in rnd.missing(b)
             for slot in group.slots[m] if slot.block == b]
    if prepare is not None:
        for block in blocks:
            prepare(rnd, block)
    arrays = [group.buffers[b].array for b in blocks]
    for block, array in zip(blocks, arrays, strict=True):
        _engine.push_async(functools.partial(gate_fired, rnd, block), mutable=[array],
                           priority=priority)
    pushpull([group.buffers[b].key for b in blocks], arrays)
    for block, array in zip(blocks, arrays, strict=True):
        _engine.push_callback(functools.partial(done, rnd.sends[block]), const=[array],
                              priority=comm_priority)
    for copy, view in saved:
        copy.copyto(view)
    for member in rnd.finished_members(blocks):
        group.copy_out(member, rnd.targets[member], mx.nd.concat)
        group.tensors[member].home = group


def block_rows(trace: Iterable[Send]) -> Iterable[Row]:
    """Recorder rows (step, block name, block index, issue position, bytes, ready, start,
    done) of finished sends; a block is ready when its gate fired (its data in place)."""
    for send in trace:
        rnd, block = send.tag, send.block.index
        assert isinstance(rnd, Round) and send.t_start is not None and send.t_done is not None
        ready = rnd.t_gate[block]
        yield (send.step, rnd.group.buffers[block].name, block, rnd.position[block],
               send.nbytes, send.t_start if ready is None else ready, send.t_start,
               send.t_done)

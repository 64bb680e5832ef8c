"""The worker's side of the optimizer on the servers (``update_on_kvstore``; ``_server`` runs it).

Rank 0 tells the servers about new blocks, keys to refresh and the state to export, restore or
load. The servers keep what each key last received, so a layout used before holds stale
weights when training comes back to it: at a switch every group the new layout uses is
refreshed with the current weights before its first push. A layout's groups carry the epoch
(one per switch) they were last brought up to date in.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import mxnet as mx
import numpy
from mxnet.kvstore.kvstore import _get_kvstore_server_command_type

from autobyte_mx import _states
from autobyte_mx._checks import big_array_bound
from autobyte_mx._layout import CONTROL_KEY, Group, Groups, Tensor
from autobyte_mx._server import ServerOptimizer, check_element_wise
from autobyte_mx._transport import Transport
from autobyte_mx._watchdog import Watchdog
from common.errors import ConfigError, UnsupportedError

__all__ = ["RemoteOptimizer"]


class RemoteOptimizer:
    """The user's optimizer on the servers, once ``set`` (``active``)."""

    def __init__(self, transport: Transport, *, rank: int, servers: int, groups: Groups,
                 tensors: Mapping[Hashable, Tensor], watchdog: Watchdog,
                 settle: Callable[[int], None], quiesce: Callable[[], None],
                 priority: int) -> None:
        self._transport = transport
        self._rank = rank
        self._servers = servers
        self._groups = groups
        self._tensors = tensors
        self._watchdog = watchdog
        self._settle = settle  # waits until every block issued up to a step has finished
        self._quiesce = quiesce  # sends every open block and waits for all to finish
        self._priority = priority
        self.optimizer: Any = None
        self._token = ""  # names this job's optimizer in the servers' messages
        self.epoch = 0  # rises with every switch of layout

    @property
    def active(self) -> bool:
        return self.optimizer is not None

    def set(self, optimizer: Any, *, compressed: bool) -> None:
        """Run ``optimizer`` on the servers (``compressed``: 2-bit compression is on)."""
        if compressed:
            raise UnsupportedError(
                "AutoByte runs 2-bit gradient compression with the optimizer on the workers "
                "only (a layout used before gets its server weights back through a push, which "
                "compression would quantize); create the Trainer with update_on_kvstore=False")
        if not isinstance(optimizer, mx.optimizer.Optimizer):
            raise ConfigError("set_optimizer needs an mxnet.optimizer.Optimizer, got "
                              f"optimizer={optimizer!r}")
        why = check_element_wise(optimizer)
        if why is not None:
            raise UnsupportedError(f"AutoByte cannot run this optimizer on the server: {why}; "
                                   "create the Trainer with update_on_kvstore=False (the "
                                   "optimizer then runs on the workers)")
        if self._servers > 1 and self._tensors:
            raise ConfigError(
                f"with {self._servers} servers set_optimizer must come before the first init "
                "(gluon.Trainer and Module call it so): each element's optimizer state stays "
                "on one server, chosen when its tensor is first laid out")
        self.optimizer = optimizer
        self._token = uuid.uuid4().hex
        if self._servers > 1:
            self._groups.pin(self._servers, big_array_bound() - 1)
        self._send(blocks=self._pieces(self._groups))

    def initialised(self, groups: list[Group]) -> None:
        """New groups' server keys start from the current weights (rank 0's)."""
        if self._rank == 0:
            for group in groups:
                group.fill(lambda t: t.weight)
            self._send(blocks=self._pieces(groups))
        for group in groups:
            group.epoch = self.epoch

    def pushed(self, step: int, tensor: Tensor, targets: list[Any], group: Group) -> None:
        """The Trainer pulls into the weights: note them, and bring a stale group's server
        keys up to date first (a key made at the step boundary is fresh)."""
        if targets:
            tensor.weight = targets[0]
        tensor.pushed = group
        tensor.updates += 1
        if group.epoch != self.epoch:
            self._refresh([group], step)

    def switching(self) -> None:
        """A new layout from the next step on: groups made from now on are fresh in it."""
        self.epoch += 1

    def switched(self, step: int, main: Group | None, expected: frozenset[Hashable] | None, *,
                 same: bool) -> None:
        """The new layout's first step (``main``: its group of the expected keys): refresh at
        once every group it will use. A switch that keeps the groups (``same``: a new credit,
        or native to native) refreshes nothing: their server keys took every update, and the
        last step's rounds may still be on their way."""
        wholes = {t.key: t.whole for t in self._tensors.values() if t.whole is not None}
        if same:
            for group in [*wholes.values(), *([] if main is None else [main])]:
                if group.epoch == self.epoch - 1:
                    group.epoch = self.epoch
            return
        if main is not None:
            groups = [main]
        else:
            groups = [g for k, g in wholes.items() if expected is None or k in expected]
        stale = [g for g in groups if g.epoch != self.epoch]
        if stale:
            self._refresh(stale, step)

    def save(self, fname: str, dump_optimizer: bool) -> None:
        """Write the servers' optimizer state as MXNet's Updater writes its own; rank 0 only,
        as the servers hold one state for every worker."""
        self._check_states()
        if self._rank != 0:
            raise ConfigError("with the optimizer on the servers save_optimizer_states runs on "
                              f"rank 0 only (this is rank {self._rank}): the servers hold one "
                              "state for every worker; call trainer.save_states on rank 0")
        self._quiesce()
        states = self._states()
        optimizer = _states.counted(self.optimizer, {t.key: t.updates for t in
                                                     self._tensors.values()})
        _states.write(fname, states, optimizer if dump_optimizer else None)

    def load(self, fname: str) -> None:
        """Give the servers the state in ``fname`` (an Updater's file, from this kvstore or a
        Trainer with the optimizer on the workers); with its optimizer, that one runs on."""
        self._check_states()
        states, optimizer = _states.read(fname)
        if optimizer is not None:
            why = check_element_wise(optimizer)
            if why is not None:
                raise UnsupportedError(f"{fname}: AutoByte cannot run its optimizer on the "
                                       f"server: {why}")
        data = _states.wire(states, {k: t.size for k, t in self._tensors.items()})
        self._quiesce()
        if optimizer is not None:
            old, self.optimizer = self._token, optimizer
            self._token = uuid.uuid4().hex  # the servers start a job with it, counts included
            self._send(blocks=self._pieces(self._groups), drop=old)
        self._send(load=data)

    def _check_states(self) -> None:
        if self.optimizer is None:
            raise UnsupportedError("the optimizer state lives in the Trainer on each worker "
                                   "(update_on_kvstore=False): use trainer.save_states and "
                                   "trainer.load_states")

    def _states(self) -> dict[Hashable, Any]:
        """Rank 0 reads the state of every tensor pushed so far, one component at a time,
        through the keys of its last push (``_server``: export, pull, restore)."""
        tensors = [t for t in self._tensors.values() if t.pushed is not None]
        templates = {t.key: self.optimizer.create_state(t.key, mx.nd.zeros(t.shape,
                                                                         dtype=t.dtype))
                     for t in tensors}
        flats = {t.key: [numpy.zeros(t.size, dtype=t.dtype) for _ in
                         _states.components(templates[t.key])] for t in tensors}
        groups = list({id(t.pushed): t.pushed for t in tensors if t.pushed}.values())
        keys = [k for g in groups for k in g.keys]
        for component in range(max((len(f) for f in flats.values()), default=0)):
            self._send(export=(component, keys))
            outs = [mx.nd.zeros(a.shape, dtype=a.dtype) for g in groups for a in g.arrays]
            with self._watchdog.blocking("the servers' optimizer state"):
                self._transport.kv.pull(keys, out=outs)
                values = iter([o.asnumpy() for o in outs])
            for group in groups:
                for buffer in group.buffers:
                    _take(group, buffer.block.segments, next(values), flats, component)
            self._send(restore=keys)
        return {t.key: _states.shaped(templates[t.key], [mx.nd.array(f, dtype=t.dtype)
                                                          .reshape(t.shape)
                                                          for f in flats[t.key]])
                for t in tensors}

    def _refresh(self, groups: list[Group], step: int) -> None:
        """Give the server's keys of ``groups`` the current weights: rank 0 pushes them, the
        others zeros, and the server stores that round as it comes. The earlier steps'
        rounds finish first (the server would store one of them instead, and take the
        weights for a gradient); the refresh is waited for, so no later push of these keys
        (from another array) can overtake it."""
        self._settle(step - 1)
        keys = [k for g in groups for k in g.keys]
        arrays = [a for g in groups for a in g.arrays]
        self._send(refresh=keys)
        for group in groups:
            if self._rank == 0:
                group.fill(lambda t: t.weight)
            else:
                for array in group.arrays:
                    array[:] = 0
        self._transport.kv.pushpull(keys, arrays, priority=self._priority)
        with self._watchdog.blocking("the server's weights of a layout used before"):
            for array in arrays:
                array.wait_to_read()
        for group in groups:
            group.epoch = self.epoch

    def _send(self, *, blocks: Mapping[int, Any] | None = None, refresh: Sequence[int] = (),
              **states: Any) -> None:
        if self._rank != 0:
            return
        message = ServerOptimizer(self.optimizer, self._token, blocks=blocks, refresh=refresh,
                                  sums=[CONTROL_KEY], **states)
        with self._watchdog.blocking("a message to the server"):
            self._transport.kv._send_command_to_servers(_get_kvstore_server_command_type("kController"),
                                              pickle.dumps(message, 0).decode("ascii"))

    @staticmethod
    def _pieces(groups: Any) -> dict[int, Any]:
        return {k: v for g in groups for k, v in g.pieces().items()}


def _take(group: Group, segments: Sequence[Any], values: Any,
          flats: Mapping[Hashable, list[Any]], component: int) -> None:
    """Copy one exported key's ``values`` into the flat states of the tensors whose last push
    it carried (others' pieces may be of a key that never reached the server)."""
    at = 0
    for seg in segments:
        tensor = group.tensors[seg.tensor]
        parts = flats.get(tensor.key)
        if parts is not None and tensor.pushed is group and component < len(parts):
            parts[component][seg.start:seg.stop] = values[at:at + seg.size]
        at += seg.size

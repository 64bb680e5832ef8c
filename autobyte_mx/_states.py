"""The optimizer's state on the servers, saved and loaded in the file format of MXNet's Updater.

A file written here is what ``trainer.save_states`` writes with the optimizer on the workers
(``{key: state}``, or ``(states, optimizer)`` with ``dump_optimizer``), so either kind of job
loads the other's file. How the state travels to and from the servers is in ``_server``.
"""

from __future__ import annotations

import base64
import copy
import pickle
from collections.abc import Hashable, Mapping
from typing import Any

from common.errors import ConfigError

__all__ = ["components", "counted", "read", "shaped", "wire", "write"]


def components(state: Any) -> list[Any]:
    """A state's arrays: none (plain SGD), one (momentum) or several (Adam's mean and var)."""
    if state is None:
        return []
    return list(state) if isinstance(state, (tuple, list)) else [state]


def shaped(template: Any, parts: list[Any]) -> Any:
    """``template``'s structure (``create_state``'s result) holding ``parts``."""
    if isinstance(template, (tuple, list)):
        return type(template)(parts)
    return None if template is None else parts[0]


def counted(optimizer: Any, updates: Mapping[Hashable, int]) -> Any:
    """A copy of ``optimizer`` with the update counts the servers' copy has reached: one
    update a push of each key (``updates``), from ``begin_num_update``."""
    made = copy.copy(optimizer)
    begin = optimizer.begin_num_update
    counts = {k: begin + n for k, n in updates.items() if n}
    # MXNet keeps the counts per device and reads those of the device it updates on
    devices = getattr(optimizer, "_all_index_update_counts", None) or {0: {}}
    made._all_index_update_counts = {d: dict(counts) for d in devices}
    made._index_update_count = next(iter(made._all_index_update_counts.values()))
    made.num_update = max([begin, *counts.values()])
    return made


def write(fname: str, states: Mapping[Hashable, Any], optimizer: Any = None) -> None:
    with open(fname, "wb") as f:
        f.write(pickle.dumps(states if optimizer is None else (states, optimizer)))


def read(fname: str) -> tuple[dict[Hashable, Any], Any]:
    """The states and the optimizer (None when the file has none) of an Updater's file."""
    with open(fname, "rb") as f:
        data = pickle.loads(f.read())
    if isinstance(data, tuple) and len(data) == 2:
        return dict(data[0]), data[1]
    return dict(data), None


def wire(states: Mapping[Hashable, Any], sizes: Mapping[Hashable, int]) -> str:
    """The states of the keys in ``sizes`` (their elements) as the servers take them: flat
    arrays, base64 of a pickle."""
    flat = {}
    for key, size in sizes.items():
        if key not in states:
            continue
        parts = [p.asnumpy().ravel() for p in components(states[key])]
        if any(p.size != size for p in parts):
            raise ConfigError(f"the state of key {key!r} holds {[p.size for p in parts]} "
                              f"elements, its weight {size}: the file is of another model")
        flat[key] = parts
    return base64.b64encode(pickle.dumps(flat, protocol=4)).decode("ascii")

"""Which process runs where, with which environment: pure planning, nothing is started.

Placement (``default_placement``), for H hosts:

- MXNet, H > workers: scheduler and every server on host 0, worker i on host 1 + i, so the
  servers' link is separate from the workers' links (the paper's PS setup).
- MXNet, H <= workers: scheduler on host 0, server j on host j mod H, worker i on host i mod H.
- TensorFlow: worker i on host i mod H.

An explicit ``placement`` mapping (process name -> host index) overrides any of these.

MXNet worker i is always ps-lite's rank i (``kv.rank``), so AUTOBYTE_RANK, DMLC_WORKER_ID and
the process name agree with what the adapter sees (see ``_align_with_pslite_ranks``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence

from common.config import NUM_WORKERS_ENV, RANK_ENV, ROLE_ENV
from common.errors import ConfigError

__all__ = ["FRAMEWORKS", "ProcessSpec", "default_placement", "plan"]

FRAMEWORKS = ("mxnet", "tensorflow")


@dataclasses.dataclass(frozen=True)
class ProcessSpec:
    """One process of a job: ``env`` holds only the variables the launcher sets."""

    name: str
    role: str
    host: int
    address: str
    port: int
    env: Mapping[str, str]


def process_names(framework: str, workers: int, servers: int) -> list[str]:
    names = ["scheduler", *(f"server{j}" for j in range(servers))] if framework == "mxnet" else []
    return names + [f"worker{i}" for i in range(workers)]


def default_placement(framework: str, workers: int, servers: int, hosts: int) -> dict[str, int]:
    if framework == "tensorflow":
        return {f"worker{i}": i % hosts for i in range(workers)}
    if hosts > workers:
        place = {"scheduler": 0, **{f"server{j}": 0 for j in range(servers)}}
        return place | {f"worker{i}": 1 + i for i in range(workers)}
    place = {"scheduler": 0, **{f"server{j}": j % hosts for j in range(servers)}}
    return place | {f"worker{i}": i % hosts for i in range(workers)}


def _pslite_before(a: tuple[str, int], b: tuple[str, int]) -> int:
    """ps-lite's scheduler sorts nodes by hostname descending, then port ascending."""
    if a[0] != b[0]:
        return -1 if a[0] > b[0] else 1
    return a[1] - b[1]


def _align_with_pslite_ranks(workers: int, place: dict[str, int], port_of: dict[str, int],
                             addresses: Sequence[str]) -> None:
    """Relabel worker slots so that worker i is the node ps-lite will call rank i (kv.rank).

    Ports on one host are handed out in worker order, then the (address, port) slots are
    sorted the way ps-lite's scheduler sorts them. With the testbed's descending addresses and
    the default placement this changes nothing; it matters for explicit placements and ssh
    hosts, where worker i may then run elsewhere than placed (names follow kv.rank).
    """
    names = [f"worker{i}" for i in range(workers)]
    by_host: dict[int, list[str]] = {}
    for name in names:
        by_host.setdefault(place[name], []).append(name)
    for group in by_host.values():
        for name, port in zip(group, sorted(port_of[n] for n in group), strict=True):
            port_of[name] = port
    def before(a: tuple[int, int], b: tuple[int, int]) -> int:
        return _pslite_before((addresses[a[0]], a[1]), (addresses[b[0]], b[1]))

    order = sorted(((place[n], port_of[n]) for n in names), key=functools.cmp_to_key(before))
    for name, (host, port) in zip(names, order, strict=True):
        place[name], port_of[name] = host, port


def validate(framework: str, workers: int, servers: int) -> None:
    if framework not in FRAMEWORKS:
        raise ConfigError(f"framework must be one of {list(FRAMEWORKS)}, got {framework=}")
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 1024:
        raise ConfigError(f"workers must be an int between 1 and 1024, got {workers=}")
    low = 1 if framework == "mxnet" else 0
    if isinstance(servers, bool) or not isinstance(servers, int) or not low <= servers <= 256:
        raise ConfigError(f"servers must be an int between {low} and 256 for {framework}, "
                          f"got {servers=}")


def plan(*, framework: str, workers: int, servers: int, addresses: Sequence[str],
         ports: Sequence[int], placement: Mapping[str, int] | None = None) -> list[ProcessSpec]:
    """Specs for every process of the job; ``ports`` has one port per process, in order."""
    validate(framework, workers, servers)
    if framework == "tensorflow":
        servers = 0
    names = process_names(framework, workers, servers)
    if len(ports) < len(names):
        raise ConfigError(f"need {len(names)} ports, got {len(ports)}")
    place = default_placement(framework, workers, servers, len(addresses))
    for name, index in (placement or {}).items():
        if name not in place:
            raise ConfigError(f"placement names unknown process {name!r}; processes: {names}")
        if not 0 <= index < len(addresses):
            raise ConfigError(f"placement[{name!r}] must be a host index 0..{len(addresses) - 1}"
                              f", got {index}")
        place[name] = index
    port_of = dict(zip(names, ports, strict=False))
    if framework == "mxnet":
        _align_with_pslite_ranks(workers, place, port_of, addresses)
    common = {NUM_WORKERS_ENV: str(workers), "PYTHONUNBUFFERED": "1"}
    specs = []
    if framework == "mxnet":
        root = addresses[place["scheduler"]]
        common |= {
            "DMLC_PS_ROOT_URI": root, "DMLC_PS_ROOT_PORT": str(port_of["scheduler"]),
            "DMLC_NUM_SERVER": str(servers), "DMLC_NUM_WORKER": str(workers),
        }
    cluster = [f"{addresses[place[f'worker{i}']]}:{port_of[f'worker{i}']}"
               for i in range(workers)]
    for name in names:
        role = name.rstrip("0123456789")
        rank = int(name[len(role):] or 0)
        address = addresses[place[name]]
        env = dict(common) | {RANK_ENV: str(rank), ROLE_ENV: role}
        if framework == "mxnet":
            env |= {"DMLC_ROLE": role, "DMLC_NODE_HOST": address}
            if role != "scheduler":
                env["PORT"] = str(port_of[name])
            if role == "worker":
                env["DMLC_WORKER_ID"] = str(rank)
        else:
            env["TF_CONFIG"] = json.dumps(
                {"cluster": {"worker": cluster}, "task": {"type": "worker", "index": rank}})
        specs.append(ProcessSpec(name=name, role=role, host=place[name], address=address,
                                 port=port_of[name], env=env))
    return specs

"""Which process runs where, with which environment: pure planning, nothing is started.

Placement (``default_placement``), for H hosts:

- MXNet, H > workers: scheduler and every server on host 0, worker i on host 1 + i, so the
  servers' link is separate from the workers' links (the paper's PS setup).
- MXNet, H <= workers: scheduler on host 0, server j on host j mod H, worker i on host i mod H.
- TensorFlow: worker i on host i mod H.

An explicit ``placement`` mapping (process name -> host index) overrides any of these.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence

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
    common = {"AUTOBYTE_NUM_WORKERS": str(workers), "PYTHONUNBUFFERED": "1"}
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
        env = dict(common, AUTOBYTE_RANK=str(rank), AUTOBYTE_ROLE=role)
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

"""TF_CONFIG and XLA checks, done before TensorFlow starts its collective runtime.

MultiWorkerMirroredStrategy silently runs as a lone worker when TF_CONFIG is missing and fails
deep inside gRPC when it is malformed; AutoByte says what is wrong first. This module does not
import TensorFlow.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass

from common.errors import ConfigError

__all__ = ["ClusterInfo", "check_no_auto_jit", "file_barrier", "parse_tf_config"]

_HOW = ("set TF_CONFIG as for MultiWorkerMirroredStrategy, e.g. "
        '{"cluster": {"worker": ["host1:port", "host2:port"]}, '
        '"task": {"type": "worker", "index": 0}}, or start the job with '
        "`autobyte launch --framework tensorflow`")


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """This worker's rank among ``workers`` (chief, if any, counts as rank 0)."""

    rank: int
    workers: int


def parse_tf_config(environ: Mapping[str, str] | None = None) -> ClusterInfo:
    """Validate TF_CONFIG and return this process's place in the cluster."""
    env = os.environ if environ is None else environ
    raw = env.get("TF_CONFIG")
    if raw is None or not raw.strip():
        raise ConfigError(f"TF_CONFIG is not set: AutoByteStrategy needs the cluster; {_HOW}")
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"TF_CONFIG is not valid JSON ({exc}): TF_CONFIG={raw!r}; "
                          f"{_HOW}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"TF_CONFIG must be a JSON object, got TF_CONFIG={raw!r}; {_HOW}")
    cluster, task = data.get("cluster"), data.get("task")
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise ConfigError(f"TF_CONFIG needs a 'cluster' object and a 'task' object, got "
                          f"TF_CONFIG={raw!r}; {_HOW}")
    chief = _addresses(cluster, "chief")
    workers = _addresses(cluster, "worker")
    if len(chief) > 1:
        raise ConfigError(f"TF_CONFIG cluster may name at most one chief, got {chief}")
    if not chief and not workers:
        raise ConfigError(f"TF_CONFIG cluster names no 'worker' (or 'chief') addresses: "
                          f"TF_CONFIG={raw!r}; {_HOW}")
    kind, index = task.get("type"), task.get("index", 0)
    roles = {"chief": chief, "worker": workers}
    if kind not in roles or not roles[kind]:
        allowed = sorted(r for r in roles if roles[r])
        raise ConfigError(f"TF_CONFIG task type must be one of {allowed}, got type={kind!r}")
    if isinstance(index, bool) or not isinstance(index, int) or not \
            0 <= index < len(roles[kind]):
        raise ConfigError(f"TF_CONFIG task index must be an int in [0, {len(roles[kind])}) for "
                          f"type {kind!r}, got index={index!r}")
    rank = index if kind == "chief" else len(chief) + index
    return ClusterInfo(rank=rank, workers=len(chief) + len(workers))


def check_no_auto_jit(environ: Mapping[str, str] | None = None) -> None:
    """XLA auto-clustering would try to compile the gradient-ready stamps (Python ops)."""
    env = os.environ if environ is None else environ
    flags = env.get("TF_XLA_FLAGS", "")
    for flag in flags.split():
        name, _, value = flag.partition("=")
        if name.lstrip("-") == "tf_xla_auto_jit" and value not in ("", "0", "-1"):
            raise ConfigError(
                f"TF_XLA_FLAGS={flags!r} turns on XLA auto-clustering, which cannot run "
                "AutoByteStrategy's Python ops (gradient-ready stamps) or its per-chunk "
                "collectives; unset tf_xla_auto_jit (or set it to 0)")


def _addresses(cluster: Mapping[str, object], role: str) -> list[str]:
    value = cluster.get(role, [])
    if isinstance(value, dict):  # TF also accepts {index: address}
        value = [value[k] for k in sorted(value, key=lambda k: int(k))]
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ConfigError(f"TF_CONFIG cluster[{role!r}] must be a list of 'host:port' strings, "
                          f"got {value!r}")
    for address in value:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"TF_CONFIG cluster[{role!r}] address must be 'host:port' with a "
                              f"port in 1..65535, got {address!r}")
    return value


def file_barrier(directory: str | os.PathLike[str], rank: int, workers: int, *,
                 timeout: float = 60.0) -> None:
    """Wait until all ``workers`` processes (sharing a filesystem) have called this.

    For a process that makes several MultiWorkerMirroredStrategy-based strategies: each one
    re-initialises TensorFlow's collective runtime, so every worker must have made all of them
    before any worker runs a collective. ``directory`` is fresh and shared by the job.
    """
    from pathlib import Path

    folder = Path(directory)
    (folder / f"ready{rank}").touch()
    deadline = time.monotonic() + timeout
    while len(list(folder.glob("ready*"))) < workers:
        if time.monotonic() > deadline:
            raise ConfigError(f"worker {rank}: only {len(list(folder.glob('ready*')))} of "
                              f"{workers} workers reached the barrier in {folder} within "
                              f"{timeout:g} s")
        time.sleep(0.05)

"""Who owns which testbed: one JSON record per testbed under ``/run/autobyte``.

The record is written *before* any namespace exists and removed *after* the last one is gone,
so a namespace carrying our name pattern without a live owner is a crashed run's leftover and
safe to delete. Owners are identified by pid plus the process start time, so a recycled pid is
not mistaken for the owner. Records of ``autobyte testbed up`` are ``persistent``: their owner
exits on purpose and only ``autobyte testbed down`` removes them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common.errors import TestbedError
from common.testbed import _net

__all__ = [
    "RUN_DIR",
    "claim",
    "owner_alive",
    "process_start_time",
    "read_record",
    "record_path",
    "records",
    "remove_record",
    "sweep",
    "write_record",
]

log = logging.getLogger(__name__)

RUN_DIR = Path("/run/autobyte")
NAME_RE = re.compile(r"^[a-z][a-z0-9]{1,9}$")


def process_start_time(pid: int) -> str | None:
    """Start time of ``pid`` in clock ticks since boot (field 22 of /proc/pid/stat)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def record_path(name: str) -> Path:
    return RUN_DIR / f"{name}.json"


def write_record(record: dict[str, Any]) -> Path:
    """Write atomically (tmp + rename), so a reader never sees half a record."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    path = record_path(record["name"])
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True))
    tmp.replace(path)
    return path


def claim(name: str) -> bool:
    """Create ``name``'s record file exclusively; False if another run holds the name."""
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(record_path(name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    return True


def read_record(name_or_path: str | Path) -> dict[str, Any]:
    text = str(name_or_path)
    path = Path(text) if ("/" in text or text.endswith(".json")) else record_path(text)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        known = ", ".join(r["name"] for r in records()) or "none"
        raise TestbedError(f"no testbed state at {path}; running testbeds: {known}") from None
    except (OSError, ValueError) as exc:
        raise TestbedError(f"cannot read testbed state {path}: {exc}") from exc
    if not isinstance(data, dict) or "name" not in data or "hosts" not in data:
        raise TestbedError(f"{path} is not a testbed state file")
    return data


def remove_record(name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        record_path(name).unlink()


def records() -> Iterator[dict[str, Any]]:
    if not RUN_DIR.is_dir():
        return
    for path in sorted(RUN_DIR.glob("*.json")):
        with contextlib.suppress(TestbedError):
            yield read_record(path)


def owner_alive(record: dict[str, Any]) -> bool:
    if record.get("persistent"):
        return True
    pid = int(record.get("owner_pid", 0))
    return pid > 0 and process_start_time(pid) == record.get("owner_start")


def _netns_of(name: str, existing: list[str]) -> list[str]:
    """Our namespaces for testbed ``name``: ``<name>-sw`` and ``<name>-h<i>``."""
    pattern = re.compile(rf"^{re.escape(name)}-(sw|h\d+)$")
    return [ns for ns in existing if pattern.match(ns)]


def destroy(name: str) -> list[str]:
    """Delete every namespace of testbed ``name`` (hosts first), then its record.

    Returns what could not be deleted (empty on success); the record stays in that case so a
    later sweep retries.
    """
    failed: list[str] = []
    namespaces = _netns_of(name, _net.list_netns())
    for ns in sorted(namespaces, key=lambda n: n.endswith("-sw")):
        try:
            _net.delete_netns(ns)
        except TestbedError as exc:
            log.warning("testbed %s: %s", name, exc)
            failed.append(ns)
    if not failed:
        remove_record(name)
    return failed


def sweep(base: str) -> list[str]:
    """Remove leftovers of crashed runs whose names start with ``base``; return their names.

    A leftover is a record whose owner is dead (and not persistent), or a namespace that
    matches our pattern but has no record at all.
    """
    existing = _net.list_netns()
    _remove_stale_claims(base)
    recorded = {r["name"]: r for r in records() if str(r["name"]).startswith(base)}
    pattern = re.compile(rf"^({re.escape(base)}[a-z0-9]*)-(?:sw|h\d+)$")
    orphans = {m.group(1) for ns in existing if (m := pattern.match(ns))} - set(recorded)
    dead = {name for name, r in recorded.items() if not owner_alive(r)}
    cleared = []
    for name in sorted(dead | orphans):
        log.warning("testbed: removing leftovers of crashed run %s", name)
        if not destroy(name):
            cleared.append(name)
    return cleared


def _remove_stale_claims(base: str, age_s: float = 60.0) -> None:
    """Empty record files: a run that died between claiming its name and writing the record."""
    if not RUN_DIR.is_dir():
        return
    now = time.time()
    for path in RUN_DIR.glob(f"{base}*.json"):
        with contextlib.suppress(OSError):
            stat = path.stat()
            if stat.st_size == 0 and now - stat.st_mtime > age_s:
                path.unlink()

"""The decision log: one JSON line per event of a job's tuning, for ``autobyte report``.

Records (each has ``type``, ``v`` and ``time``):
  job       once at start: num_workers, the initial config, tuner and trigger names.
  window    per merged window: step range, config in force, observed speed (total and per
            worker), the whole merged observation (Table II features, ``Observation.to_dict``,
            so logs of real runs are meta-network training data), the prediction for the
            config in force, the candidates with their predictions, the action (stay / switch
            / explore / wait / skip), why, gain, error, whether adaptation was requested, and
            the decision id and target step if any.
  event     anything else worth a line (coordinator stopped, worker said bye, tuner error).

Lines are flushed as written so a crashed job still leaves a readable log; readers skip
lines they cannot parse and say how many.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from common.config import LOG_DIR_ENV, environment

__all__ = ["LOG_VERSION", "DecisionLog", "default_log_path", "read_log"]

log = logging.getLogger(__name__)

LOG_VERSION = 1


def default_log_path(job: str | None = None) -> Path:
    """``$AUTOBYTE_LOG_DIR`` (default ./autobyte-logs) / decisions-<job>.jsonl."""
    directory = Path(environment(LOG_DIR_ENV) or "autobyte-logs")
    name = job or time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}"
    return directory / f"decisions-{name}.jsonl"


class DecisionLog:
    """Appends records to a JSONL file; ``path=None`` keeps nothing. Thread-safe, idempotent
    ``close``."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = None if path is None else Path(path)
        self._file: IO[str] | None = None
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")

    def write(self, type_: str, record: Mapping[str, Any]) -> None:
        if self._file is None:
            return
        line = json.dumps({"type": type_, "v": LOG_VERSION, "time": time.time(), **record},
                          separators=(",", ":"), default=_jsonable)
        with self._lock:
            if self._file is not None:
                self._file.write(line + "\n")
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> DecisionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_log(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All parseable records of a log, in order; unreadable lines are skipped and counted."""
    records, bad = [], 0
    for line in _lines(Path(path)):
        try:
            record = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(record, dict) and "type" in record:
            records.append(record)
        else:
            bad += 1
    if bad:
        log.warning("%s: skipped %d unreadable line(s)", path, bad)
    return records


def _lines(path: Path) -> Iterator[str]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield line


def _jsonable(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if isinstance(value, tuple | set | frozenset):
        return list(value)
    raise TypeError(f"cannot write {type(value).__name__} to the decision log")

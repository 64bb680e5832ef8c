"""Progress lines between a job's processes and the command that watches them.

A worker prints ``AUTOBYTE-PROGRESS {json}`` on stdout; the launcher streams it (prefixed with
the process name) and ``parse`` finds it again in any line. JSON only, one object a line.
"""

from __future__ import annotations

import json
import sys
from typing import Any

__all__ = ["MARK", "emit", "parse"]

MARK = "AUTOBYTE-PROGRESS "


def emit(kind: str, **fields: Any) -> None:
    """Print one progress record (``kind`` plus ``fields``) and flush."""
    sys.stdout.write(MARK + json.dumps({"kind": kind, **fields}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def parse(line: str) -> dict[str, Any] | None:
    """The record in ``line`` (anything may precede the mark), or None."""
    at = line.find(MARK)
    if at < 0:
        return None
    try:
        record = json.loads(line[at + len(MARK):])
    except ValueError:
        return None
    return record if isinstance(record, dict) and "kind" in record else None

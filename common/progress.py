"""Progress lines between a job's processes and the command that watches them.

A worker prints ``AUTOBYTE-PROGRESS {json}`` on stdout; the launcher streams it (prefixed with
the process name) and ``parse`` finds it again in any line. JSON only, one object a line.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

__all__ = ["MARK", "emit", "parse", "worker_args"]

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


def worker_args(argv: list[str] | None, description: str | None) -> argparse.Namespace:
    """The command line of a demo worker (both adapters' ``demo`` modules), logging at INFO."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=32, help="per worker")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    return args

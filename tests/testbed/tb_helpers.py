"""Helpers shared by the testbed and launcher tests (imported by name: tests have no
packages, and pytest puts this folder on sys.path)."""

from __future__ import annotations

import os
import re
import secrets
import string
import subprocess

import pytest

from common.testbed import _registry

BASE = "t" + "".join(secrets.choice(string.ascii_lowercase) for _ in range(4))
os.environ["AUTOBYTE_TESTBED_PREFIX"] = BASE

IS_ROOT = os.geteuid() == 0
root_only = [
    pytest.mark.testbed,
    pytest.mark.skipif(not IS_ROOT, reason="needs root: network namespaces and tc (run the "
                       "testbed tests as root to cover shaped links)"),
]


def our_netns() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.startswith(BASE))


def our_records() -> list[str]:
    return sorted(p.name for p in _registry.RUN_DIR.glob(f"{BASE}*.json"))


def root_links() -> set[str]:
    """Links in the root namespace that look like ours (names the testbed uses inside its
    namespaces, or our base); other engineers' links are ignored."""
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    names = {line.split(":")[1].strip().split("@")[0] for line in out.splitlines()}
    return {n for n in names if n.startswith(BASE) or re.fullmatch(r"eth0|br0|p\d+", n)}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

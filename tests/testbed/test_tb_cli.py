"""``autobyte testbed`` and ``autobyte launch --testbed`` from separate processes (root)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tb_helpers import BASE, our_netns, root_only

pytestmark = [*root_only, pytest.mark.usefixtures("no_leaks")]


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "common.cli", *args], capture_output=True,
                          text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_cli_up_rate_status_launch_down() -> None:
    name = f"{BASE}cli"
    try:
        up = _cli("testbed", "up", "--hosts", "3", "--rate", "100mbit", "--name", name)
        assert f"state: /run/autobyte/{name}.json" in up.stdout
        assert our_netns() == sorted([f"{name}-sw", *(f"{name}-h{i}" for i in range(3))])

        _cli("testbed", "rate", "--testbed", name, "--host", "2", "--up", "1gbit")
        _cli("testbed", "rate", "--testbed", name, "--schedule", "300mbit:0.05", "--once",
             "--host", "h1")
        status = _cli("testbed", "status", "--testbed", name).stdout
        rows = {line.split()[0]: line for line in status.splitlines()[1:]}
        assert "up 100mbit" in rows["h0"] and "down 100mbit" in rows["h0"]
        assert "up 300mbit" in rows["h1"] and "down 300mbit" in rows["h1"]
        assert "up 1gbit" in rows["h2"] and "down 100mbit" in rows["h2"]

        job = _cli("launch", "--framework", "tensorflow", "--workers", "2", "--testbed", name,
                   "--", sys.executable, "-c",
                   "import os, json; print(json.loads(os.environ['TF_CONFIG'])['cluster'])")
        lines = sorted(job.stdout.splitlines())
        assert lines[0].startswith("[worker0] {'worker': ['10.2")
        cluster = json.loads(lines[0].split(" ", 1)[1].replace("'", '"'))["worker"]
        assert [c.rsplit(":", 1)[0] for c in cluster] == [rows["h0"].split()[1],
                                                            rows["h1"].split()[1]]

        failing = _cli("launch", "--framework", "mxnet", "--workers", "1", "--testbed", name,
                       "--quiet", "--", "sh", "-c", 'test "$DMLC_ROLE" != worker || exit 5',
                       check=False)
        assert failing.returncode == 5
        assert "worker0 failed with exit code 5" in failing.stderr
    finally:
        down = _cli("testbed", "down", name, check=False)
    assert down.returncode == 0 and f"testbed {name}: down" in down.stdout


def test_cli_errors_name_the_problem() -> None:
    missing = _cli("testbed", "rate", "--testbed", f"{BASE}none", "--rate", "1gbit", check=False)
    assert missing.returncode == 2
    assert f"no testbed state at /run/autobyte/{BASE}none.json" in missing.stderr
    bad = _cli("testbed", "up", "--hosts", "2", "--rate", "fast", check=False)
    assert bad.returncode == 2 and "rate must be a number with an optional unit" in bad.stderr

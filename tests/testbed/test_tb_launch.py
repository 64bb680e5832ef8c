"""The launcher on loopback (no root needed): failure propagation, timeout, signals, cleanup.

Every launched process (and a grandchild it forks) records its pid in a temp dir, so the
tests can check that nothing survives the launch.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tb_helpers import CHILD, IS_ROOT, child_pids, pid_alive

from common.launch import launch


def _wait_for_files(directory: Path, count: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while len(list(directory.glob("*.pid"))) < count:
        assert time.monotonic() < deadline, "launched processes did not start"
        time.sleep(0.05)


def test_worker_failure_stops_the_job_and_returns_its_code(tmp_path: Path) -> None:
    env = {"PIDS": str(tmp_path), "EXPECT": "4", "EXIT_worker1": "3"}
    out = io.StringIO()
    result = launch(framework="mxnet", command=[sys.executable, "-c", CHILD], workers=2,
                    env=env, stream=out, timeout=60, grace=2.0)
    assert result.returncode == 3
    assert result.failed == "worker1"
    assert not result.timed_out
    assert set(result.processes) == {"scheduler", "server0", "worker0", "worker1"}
    assert result.processes["worker1"].returncode == 3
    assert result.processes["worker0"].returncode == -signal.SIGTERM
    pids = child_pids(tmp_path)
    assert len(pids) == 8
    assert not [p for p in pids if pid_alive(p)], "processes survived the failed job"
    assert "[worker1] hello from worker1\n" in out.getvalue()
    assert result.processes["server0"].output == "hello from server0\n"


def test_success_streams_prefixed_output_and_stops_lingering_servers(tmp_path: Path) -> None:
    env = {"PIDS": str(tmp_path), "EXPECT": "3", "EXIT_worker0": "0", "EXIT_worker1": "0"}
    out = io.StringIO()
    result = launch(framework="mxnet", command=[sys.executable, "-c", CHILD], workers=2,
                    env=env, stream=out, timeout=60, linger=0.5, grace=2.0)
    assert result.returncode == 0 and result.failed is None
    lines = sorted(out.getvalue().splitlines())
    assert lines == ["[scheduler] hello from scheduler", "[server0] hello from server0",
                     "[worker0] hello from worker0", "[worker1] hello from worker1"]
    assert not [p for p in child_pids(tmp_path) if pid_alive(p)]


def test_every_process_gets_the_job_secret_and_control_endpoint() -> None:
    show = [sys.executable, "-c", "import os; print(os.environ['AUTOBYTE_SECRET'], "
            "os.environ['AUTOBYTE_CONTROL_ENDPOINT'], os.environ['AUTOBYTE_NUM_WORKERS'])"]
    first = launch(framework="mxnet", command=show, workers=2, stream=None, timeout=60)
    second = launch(framework="tensorflow", command=show, workers=2, stream=None, timeout=60)
    seen = [{p.output for p in r.processes.values()} for r in (first, second)]
    assert [len(s) for s in seen] == [1, 1], "processes of one job must agree"
    (secret1, endpoint, count), (secret2, _, _) = (s.pop().split() for s in seen)
    assert len(secret1) == 64 and secret1 != secret2, "each job gets its own secret"
    assert endpoint.startswith("tcp://127.0.0.1:") and count == "2"
    external = launch(framework="tensorflow", command=[sys.executable, "-c", (
        "import os; print('AUTOBYTE_CONTROL_ENDPOINT' in os.environ, "
        "os.environ['AUTOBYTE_SECRET'])")], workers=1, stream=None,
        env={"AUTOBYTE_COORDINATOR": "tcp://10.0.0.1:5599", "AUTOBYTE_SECRET": "s3cret"})
    assert external.processes["worker0"].output == "False s3cret\n"


def test_timeout_stops_everything(tmp_path: Path) -> None:
    env = {"PIDS": str(tmp_path), "EXPECT": "2"}
    result = launch(framework="tensorflow", command=[sys.executable, "-c", CHILD], workers=2,
                    env=env, stream=None, timeout=2.0, grace=2.0)
    assert result.timed_out and result.returncode == 124 and result.failed is None
    assert not [p for p in child_pids(tmp_path) if pid_alive(p)]


def test_missing_command_fails_cleanly(tmp_path: Path) -> None:
    from common.errors import LaunchError

    with pytest.raises(LaunchError, match="cannot start scheduler"):
        launch(framework="mxnet", command=[str(tmp_path / "nope")], workers=1, stream=None)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_and_sigterm_stop_every_process(tmp_path: Path, sig: signal.Signals,
                                               code: int) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    pids = tmp_path / "pids"
    pids.mkdir()
    cli = subprocess.Popen(
        [sys.executable, "-m", "common.cli", "launch", "--framework", "mxnet", "--workers", "2",
         "--quiet", "--", sys.executable, str(script)],
        env={**os.environ, "PIDS": str(pids), "EXPECT": "4"}, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_files(pids, 4)
        cli.send_signal(sig)
        _, err = cli.communicate(timeout=30)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == code, err
    assert not [p for p in child_pids(pids) if pid_alive(p)], "processes survived the signal"


@pytest.mark.skipif(not IS_ROOT, reason="needs root to switch to the unprivileged user nobody")
def test_real_non_root_run_falls_back_to_loopback_and_still_launches(tmp_path: Path) -> None:
    script = textwrap.dedent("""
        import sys
        from common.launch import launch
        from common.testbed import Testbed
        with Testbed(hosts=3, rate="1gbit") as tb:
            tb.set_rate("100mbit")
            r = launch(framework="mxnet", workers=2, testbed=tb, stream=None, timeout=60,
                       command=["sh", "-c", "echo $DMLC_NODE_HOST"])
            print("shaped", tb.shaped, "rc", r.returncode,
                  sorted({p.output.strip() for p in r.processes.values()}))
    """)
    proc = subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable,
         "-c", script], capture_output=True, text=True, timeout=60, cwd="/",
        env={**os.environ, "HOME": "/"})
    assert proc.returncode == 0, proc.stderr
    assert "not running as root (euid=65534)" in proc.stderr
    assert "falling back to plain loopback" in proc.stderr
    assert "set_rate ignored" in proc.stderr
    assert "shaped False rc 0 ['127.0.0.1']" in proc.stdout


def test_a_launcher_killed_outright_leaves_no_process(tmp_path: Path) -> None:
    """SIGKILL runs no cleanup in the launcher: its reaper kills every group (grandchildren
    included) once the launcher's pipe closes."""
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    pids = tmp_path / "pids"
    pids.mkdir()
    cli = subprocess.Popen(
        [sys.executable, "-m", "common.cli", "launch", "--framework", "mxnet", "--workers", "2",
         "--quiet", "--", sys.executable, str(script)],
        env={**os.environ, "PIDS": str(pids), "EXPECT": "4"}, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_files(pids, 4)
        killed = time.monotonic()
        cli.kill()
        cli.communicate(timeout=30)
        deadline = killed + 10.0
        while [p for p in child_pids(pids) if pid_alive(p)] and time.monotonic() < deadline:
            time.sleep(0.05)
        left = [p for p in child_pids(pids) if pid_alive(p)]
        print(f"launcher SIGKILLed: its job's processes were gone {time.monotonic() - killed:.1f} "
              "s later")
    finally:
        if cli.poll() is None:
            cli.kill()
        for pid in child_pids(pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert not left, f"processes survived the launcher: {left}"

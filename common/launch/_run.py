"""Run a job's processes: stream prefixed output, stop everything on failure/timeout/Ctrl-C.

Every process starts in its own session (process group), so stopping it also stops whatever
it spawned: SIGTERM to the group, then SIGKILL after a grace period. After the job ends, every
group is sent SIGKILL once more, so nothing a process forked can outlive the launch.

A launcher that is killed outright (SIGKILL, the OOM killer, a preemption) runs no cleanup, so a
small reaper process, in a session of its own, holds a pipe from the launcher and the job's
group ids: when the pipe closes without the launcher saying "done", it SIGKILLs every group.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from common.errors import LaunchError

__all__ = ["STDOUT", "Job", "LaunchResult", "ProcessResult", "Writable", "run_job"]

log = logging.getLogger(__name__)

TIMEOUT_EXIT = 124
CAPTURE_LINES = 20_000  # per process: a long training run must not grow without bound
_POLL_S = 0.05


class Writable(Protocol):
    def write(self, text: str, /) -> object: ...
    def flush(self) -> object: ...


class _CurrentStdout:
    """Whatever ``sys.stdout`` is when output arrives (pytest and notebooks replace it)."""

    def write(self, text: str) -> int:
        return sys.stdout.write(text)

    def flush(self) -> None:
        sys.stdout.flush()

    def __repr__(self) -> str:
        return "sys.stdout"


STDOUT: Writable = _CurrentStdout()


@dataclasses.dataclass(frozen=True)
class ProcessResult:
    """``returncode`` as Popen reports it (negative: killed by that signal); ``output`` holds
    the last CAPTURE_LINES lines (all of them were streamed)."""

    name: str
    returncode: int | None
    output: str


@dataclasses.dataclass(frozen=True)
class LaunchResult:
    """``returncode``: 0, the first failure's exit code (128+N for signal N), or 124 on timeout."""

    returncode: int
    processes: dict[str, ProcessResult]
    failed: str | None
    timed_out: bool
    elapsed: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0


@dataclasses.dataclass(frozen=True)
class Job:
    """One process to start: ``primary`` processes decide when the job is done (workers).

    ``stdin_text`` is written to the process's stdin, which then stays open until it is
    stopped (the ssh watchdog treats its closing as "stop").
    """

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    primary: bool
    stdin_text: str | None = None


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class _Running:
    def __init__(self, job: Job, cwd: str | None, sink: _Sink) -> None:
        self.job = job
        self.lines: collections.deque[str] = collections.deque(maxlen=CAPTURE_LINES)
        try:
            self.popen = subprocess.Popen(
                list(job.argv), env=dict(job.env), cwd=cwd, start_new_session=True,
                stdin=subprocess.DEVNULL if job.stdin_text is None else subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError as exc:
            raise LaunchError(f"cannot start {job.name}: {shlex.join(job.argv)}: {exc}") from exc
        if job.stdin_text is not None and self.popen.stdin is not None:
            with contextlib.suppress(OSError):
                self.popen.stdin.write(job.stdin_text.encode())
                self.popen.stdin.flush()
        self.reader = threading.Thread(target=self._read, args=(sink,), daemon=True,
                                       name=f"launch-{job.name}")
        self.reader.start()

    def _read(self, sink: _Sink) -> None:
        assert self.popen.stdout is not None
        prefix = f"[{self.job.name}] "
        for raw in iter(self.popen.stdout.readline, b""):
            line = raw.decode(errors="replace")
            self.lines.append(line)
            sink.write(prefix + (line if line.endswith("\n") else line + "\n"))

    def signal_group(self, sig: signal.Signals) -> None:
        if sig == signal.SIGTERM and self.popen.stdin is not None:
            with contextlib.suppress(OSError):
                self.popen.stdin.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, sig)

    def group_alive(self) -> bool:
        """Whether a process of this job's group still exists (zombies of an exited parent
        are reaped by init and vanish too)."""
        try:
            os.killpg(self.popen.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def result(self) -> ProcessResult:
        self.reader.join(timeout=5.0)
        return ProcessResult(self.job.name, self.popen.returncode, "".join(self.lines))


class _Sink:
    def __init__(self, stream: Writable | None) -> None:
        self.stream = stream
        self.lock = threading.Lock()

    def write(self, text: str) -> None:
        if self.stream is None:
            return
        with self.lock, contextlib.suppress(ValueError, OSError):
            self.stream.write(text)
            self.stream.flush()


def _stop(running: Sequence[_Running], grace: float) -> None:
    alive = [r for r in running if r.popen.poll() is None]
    for r in alive:
        r.signal_group(signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(r.popen.poll() is None for r in alive) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    for r in running:
        r.signal_group(signal.SIGKILL)
    for r in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            r.popen.wait(timeout=grace)
    # SIGKILL is delivered asynchronously: what a process forked may still be dying after the
    # process itself was reaped. Return only once every group is empty (or after ``grace``).
    deadline = time.monotonic() + grace
    while any(r.group_alive() for r in running) and time.monotonic() < deadline:
        time.sleep(_POLL_S)


def _raise_exit(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _terminate_raises() -> Iterator[None]:
    """SIGTERM/SIGHUP raise SystemExit while the job runs, so ``finally`` stops the processes
    (they run in their own sessions and would otherwise outlive a terminated launcher)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    mine = [sig for sig in (signal.SIGTERM, signal.SIGHUP)
            if signal.getsignal(sig) is signal.SIG_DFL]
    for sig in mine:
        signal.signal(sig, _raise_exit)
    try:
        yield
    finally:
        for sig in mine:
            if signal.getsignal(sig) is _raise_exit:
                signal.signal(sig, signal.SIG_DFL)


_REAPER = """
import os, signal, sys
groups, done = [], False
for line in sys.stdin:
    line = line.strip()
    if line == "done":
        done = True
        break
    if line.isdigit():
        groups.append(int(line))
if not done:
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
"""


class _Reaper:
    """Kills the job's process groups if this launcher dies without stopping them."""

    def __init__(self) -> None:
        self._popen: subprocess.Popen[bytes] | None = None
        try:
            self._popen = subprocess.Popen([sys.executable, "-c", _REAPER],
                                           stdin=subprocess.PIPE, start_new_session=True,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError as exc:
            log.warning("launch: no reaper (%s): if this launcher is killed outright, its "
                        "processes stay", exc)

    def watch(self, group: int) -> None:
        self._write(f"{group}\n")

    def close(self) -> None:
        """The launcher stopped everything itself: the reaper exits without a signal."""
        self._write("done\n")
        if self._popen is not None and self._popen.stdin is not None:
            with contextlib.suppress(OSError):
                self._popen.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=5.0)

    def _write(self, text: str) -> None:
        if self._popen is None or self._popen.stdin is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._popen.stdin.write(text.encode())
            self._popen.stdin.flush()


def run_job(jobs: Sequence[Job], *, cwd: str | None = None, timeout: float | None = None,
            stream: Writable | None = None, grace: float = 5.0,
            linger: float = 30.0) -> LaunchResult:
    """Start ``jobs``; return when all exit, one fails, or ``timeout`` passes.

    Once every primary process (worker) has exited 0, the others (scheduler, servers) get
    ``linger`` seconds to exit by themselves before they are stopped without counting as a
    failure. Ctrl-C and SIGTERM stop every process, then propagate.
    """
    sink = _Sink(stream)
    running: list[_Running] = []
    start = time.monotonic()
    reaper = _Reaper()
    with _terminate_raises():
        try:
            for job in jobs:
                running.append(_Running(job, cwd, sink))
                reaper.watch(running[-1].popen.pid)  # its own session: the group's id
            failed, code, timed_out = _supervise(running, start, timeout, linger)
        finally:
            _stop(running, grace)
            reaper.close()
    results = {r.job.name: r.result() for r in running}
    return LaunchResult(returncode=code, processes=results, failed=failed, timed_out=timed_out,
                        elapsed=time.monotonic() - start)


def _supervise(running: Sequence[_Running], start: float, timeout: float | None,
               linger: float) -> tuple[str | None, int, bool]:
    """Poll until the job is over; returns (first failed name, exit code, timed out)."""
    failed: str | None = None
    code = 0
    done_at: float | None = None
    while True:
        for r in running:
            rc = r.popen.poll()
            if rc is not None and rc != 0 and failed is None:
                failed, code = r.job.name, exit_code(rc)
                log.error("launch: %s exited with %d; stopping the job", failed, code)
        if failed is not None or all(r.popen.poll() is not None for r in running):
            return failed, code, False
        now = time.monotonic()
        if timeout is not None and now - start > timeout:
            log.error("launch: timeout after %g s; stopping the job", timeout)
            return None, TIMEOUT_EXIT, True
        if done_at is None and all(r.popen.poll() == 0 for r in running if r.job.primary):
            done_at = now
        if done_at is not None and now - done_at > linger:
            log.warning("launch: %s still running %g s after the workers finished; stopping "
                        "them", [r.job.name for r in running if r.popen.poll() is None], linger)
            return None, 0, False
        time.sleep(_POLL_S)

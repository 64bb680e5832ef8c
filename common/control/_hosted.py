"""Rank 0's coordinator in a child process below the training's CPU priority.

On a thread of rank 0 the tuner's predictions, adaptations and merges take the GIL and
TensorFlow's thread pools from the training step: on this 2-core machine that cost TensorFlow's
demo cnn 8-10% of its speed while it trained on the framework's own path. A child process at a
lower priority (``SCHED_IDLE`` and ``nice``, every thread) runs on what training leaves idle;
it loads its tuner's model before that, while rank 0 waits. The parent hands it
the job on stdin and keeps the pipe open: the child stops when the pipe closes, so it also ends
when the parent dies, however it dies. Its log lines go to the parent's stderr.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

from common.config import Config
from common.errors import ControlError

__all__ = ["HostedCoordinator"]

log = logging.getLogger(__name__)

NICE = 10  # CFS weight 110 against training's 1024: about a tenth of a busy core
START_TIMEOUT_S = 120.0  # importing the tuner's framework and loading its model
STOP_TIMEOUT_S = 30.0  # a tuner finishing an adaptation and saving its model


class HostedCoordinator:
    """Start ``Coordinator`` in a child process; ``endpoint`` once it is bound."""

    def __init__(self, *, bind: str, num_workers: int, config: Config, secret: bytes,
                 lead_steps: int | None, lead_s: float, heartbeat_s: float, max_age_s: float,
                 log_path: str | os.PathLike[str] | None, guard: bool = True,
                 nice: int = NICE) -> None:
        job = {"bind": bind, "num_workers": num_workers, "config": config.to_dict(),
               "secret": secret.hex(), "lead_steps": lead_steps, "lead_s": lead_s,
               "heartbeat_s": heartbeat_s, "max_age_s": max_age_s, "guard": guard,
               "log_path": None if log_path is None else os.fspath(log_path), "nice": nice}
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from common.control._hosted import main; "
             "sys.exit(main())"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=_env(), cwd=os.getcwd())
        self.pid = self._proc.pid
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._stdin: IO[bytes] = self._proc.stdin
        self._closed = False
        try:
            self._stdin.write(json.dumps(job).encode() + b"\n")
            self._stdin.flush()
            answer = _read_line(self._proc.stdout, START_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            self.close()
            raise ControlError(f"the coordinator process did not start: {exc}") from None
        if "error" in answer or "endpoint" not in answer:
            self.close()
            raise ControlError(str(answer.get("error", f"unexpected answer {answer!r}")))
        self.endpoint: str = answer["endpoint"]
        self.tuner_name: str = answer.get("tuner", "")

    @property
    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        """Close its pipe (it stops, logs and saves what it must) and wait; idempotent."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._stdin.close()
        try:
            self._proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            log.warning("the coordinator process %d did not stop in %g s; killing it",
                        self.pid, STOP_TIMEOUT_S)
            self._proc.kill()
            self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def _env() -> dict[str, str]:
    """The parent's environment, with this checkout importable however the parent started."""
    env = dict(os.environ)
    env.setdefault("TF_NUM_INTRAOP_THREADS", "1")  # the tuner's model: one core at most
    env.setdefault("TF_NUM_INTEROP_THREADS", "1")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def _read_line(stream: IO[bytes], timeout_s: float) -> dict[str, Any]:
    """The child's one-line JSON answer, or TimeoutError; a thread reads so a child that
    hangs in an import cannot hang the parent."""
    box: list[bytes] = []
    reader = threading.Thread(target=lambda: box.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not box:
        raise TimeoutError(f"no answer in {timeout_s:g} s")
    if not box[0]:
        raise OSError("it exited first (its error is above)")
    answer: dict[str, Any] = json.loads(box[0])
    return answer


def main() -> int:
    """The child: read the job, bind, answer the endpoint, serve until stdin closes."""
    from common.control._coordinator import Coordinator
    from common.control._tuners import make_tuner
    from common.decision_log import DecisionLog
    from common.output import filtered_stderr, setup_logging

    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever else writes to stdout must not garble the answer
    job = json.loads(sys.stdin.readline() or "null")
    if not isinstance(job, dict):
        return 2
    setup_logging()
    try:
        decisions = DecisionLog(job["log_path"])
    except OSError as exc:
        log.warning("cannot write the decision log %s (%s); tuning goes on without it",
                    job["log_path"], exc)
        decisions = DecisionLog(None)
    try:
        config = Config.from_dict(job["config"])
        with filtered_stderr():  # the tuner's framework import prints its start-up lines
            tuner = make_tuner(config.tuner, base=config)
        coordinator = Coordinator(
            bind=job["bind"], num_workers=job["num_workers"], config=config,
            secret=bytes.fromhex(job["secret"]), tuner=tuner, lead_steps=job["lead_steps"],
            lead_s=job["lead_s"], heartbeat_s=job["heartbeat_s"], max_age_s=job["max_age_s"],
            tuner_name=config.tuner, decision_log=decisions, guard=job["guard"])
    except Exception as exc:
        _answer(answers, {"error": f"{type(exc).__name__}: {exc}"})
        return 1
    # before the answer: once answered, the job may be stopped at any moment, and this
    # process, at SCHED_IDLE on busy cores, may not run again for a while
    for signum in (signal.SIGTERM, signal.SIGINT):  # the job's group is stopped: log, save
        signal.signal(signum, lambda *_: coordinator.request_stop())
    lower_priority(int(job["nice"]))
    _answer(answers, {"endpoint": coordinator.endpoint, "tuner": coordinator.tuner_name})

    def watch_parent() -> None:
        sys.stdin.read()  # returns at EOF: the parent closed the pipe or died
        coordinator.request_stop()

    threading.Thread(target=watch_parent, name="parent-watch", daemon=True).start()
    coordinator.run()
    return 0


def lower_priority(nice: int) -> None:
    """Every thread of this process at ``nice`` or below, and ``SCHED_IDLE`` where there is
    one: Linux's priorities are per thread, so ``os.nice`` would leave threads made while the
    tuner loaded (a framework's pools) at training's priority. Threads made later inherit
    it."""
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:  # no /proc: the main thread, and what it starts from now on
        threads = [0]
    idle = getattr(os, "SCHED_IDLE", None)  # Linux: CFS's lowest weight, below any nice
    for tid in threads:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
            if idle is not None:
                os.sched_setscheduler(tid, idle, os.sched_param(0))


def _answer(stream: IO[str], body: dict[str, Any]) -> None:
    stream.write(json.dumps(body) + "\n")
    stream.flush()

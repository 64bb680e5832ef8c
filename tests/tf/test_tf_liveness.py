"""A frozen TensorFlow worker ends the job after the grace period (AutoByteStrategy sets TF's
coordination heartbeat to ``grace_s``) with TensorFlow's error naming the task, not a hang."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("tensorflow", reason="needs tensorflow==2.21 (pip install 'autobyte[tf]')")

from common.launch import launch

pytestmark = [pytest.mark.framework, pytest.mark.distributed, pytest.mark.timeout(180)]

WORKER = Path(__file__).with_name("tf_freeze_worker.py")


class Watch:
    """A launch stream that notes when rank 0 says ``AT_STEP`` (``at``, time.monotonic)."""

    def __init__(self) -> None:
        self.at: float | None = None

    def write(self, text: str) -> int:
        if "AT_STEP" in text and self.at is None:
            self.at = time.monotonic()
        return len(text)

    def flush(self) -> None:
        pass


def test_a_frozen_worker_ends_the_job_after_the_grace_period() -> None:
    watch = Watch()
    result = launch(framework="tensorflow", command=[sys.executable, str(WORKER), "20"],
                    workers=2, env={"AUTOBYTE_GRACE_S": "15", "AUTOBYTE_TUNER": "none"},
                    timeout=150, stream=watch)
    ended = time.monotonic()
    tails = {name: p.output[-3000:] for name, p in result.processes.items()}
    assert not result.ok and not result.timed_out, (result.returncode, tails)
    assert result.failed == "worker0", (result.failed, tails)
    assert watch.at is not None, f"worker0 failed before step 20: {tails}"
    waited = ended - watch.at
    assert 8 <= waited <= 60, waited  # the grace period, not TF's default 10 s nor a hang
    text = result.processes["worker0"].output
    assert "task:1" in text or "task 1" in text, text[-3000:]


def test_a_worker_killed_under_the_launcher_ends_the_job_at_once() -> None:
    """SIGKILL of worker1 mid-run (real collectives, under ``autobyte launch``): the launcher
    ends the job with worker1's code within seconds, without waiting for TensorFlow."""
    watch = Watch()
    result = launch(framework="tensorflow", command=[sys.executable, str(WORKER), "20", "kill"],
                    workers=2, env={"AUTOBYTE_TUNER": "none"}, timeout=150, stream=watch)
    ended = time.monotonic()
    assert not result.ok and not result.timed_out, result.returncode
    assert result.failed == "worker1" and result.returncode == 128 + signal.SIGKILL, \
        (result.failed, result.returncode)  # the shell's code for a signal's death
    assert result.processes["worker1"].returncode == -signal.SIGKILL
    assert watch.at is not None
    print(f"TensorFlow, worker1 SIGKILLed under the launcher: the job ended "
          f"{ended - watch.at:.1f} s later")
    assert ended - watch.at < 10.0

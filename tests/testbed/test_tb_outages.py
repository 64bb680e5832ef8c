"""Link faults on the testbed (root): a worker's switch port goes down mid-run, or its link
drops to 1 mbit/s. An outage shorter than the grace period, and a slow link for longer than
it, are ridden out in both frameworks with the workers' weights equal; a 120 s outage ends
the job with a clear error about the default grace period into it, and nothing is left."""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from tb_helpers import root_only

from common.config import Config
from common.launch import LaunchResult, launch
from common.testbed import Testbed

pytestmark = [*root_only, pytest.mark.distributed, pytest.mark.slow,
              pytest.mark.usefixtures("no_leaks")]

TESTS = Path(__file__).resolve().parents[1]
MX_WORKER = TESTS / "mx" / "mx_worker.py"
TF_WORKER = TESTS / "tf" / "tf_freeze_worker.py"
JOB_ENV = {"OMP_NUM_THREADS": "1", "MXNET_EXEC_BULK_EXEC_TRAIN": "0", "PYTHONUNBUFFERED": "1",
           "AUTOBYTE_TUNER": "none"}


def needs(module: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed (optional framework)")


class Outage:
    """Takes ``host``'s port down (or, with ``slow``, its link to that rate) for ``seconds``
    once ``ready()`` is true; ``began`` and ``ended`` are when (time.monotonic)."""

    def __init__(self, tb: Testbed, host: int, seconds: float,
                 ready: Callable[[], bool], slow: str | None = None) -> None:
        self.began = self.ended = 0.0
        self._done = threading.Event()

        def run() -> None:
            while not ready():
                if self._done.wait(0.02):
                    return
            up, down = tb.rates(host)
            if slow is None:
                tb.set_link(host, up=False)
            else:
                tb.set_rate(slow, host=host)
            self.began = time.monotonic()
            self._done.wait(seconds)
            if slow is None:
                tb.set_link(host, up=True)
            else:
                tb.set_rate(up=up, down=down, host=host)
            self.ended = time.monotonic()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._done.set()
        self._thread.join(10)


class Lines:
    """A launch stream that keeps every line."""

    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass


def mx_job(tb: Testbed, out: Path, seconds: float, steps: int, env: dict[str, str],
           slow: str | None = None) -> tuple[LaunchResult, Outage]:
    command = [sys.executable, str(MX_WORKER), "--out", str(out), "--model", "mlp", "--steps",
               str(steps), "--mark", "30", "--brief"]
    outage = Outage(tb, 2, seconds, (out / "mark_30").exists, slow)  # host 2 holds a worker
    try:
        result = launch(framework="mxnet", command=command, workers=2, servers=1,
                        env={**JOB_ENV, **env}, testbed=tb, timeout=240, stream=None)
    finally:
        outage.join()
    return result, outage


def tf_job(tb: Testbed, seconds: float, steps: int, env: dict[str, str],
           slow: str | None = None) -> tuple[LaunchResult, Outage, Lines]:
    lines = Lines()
    outage = Outage(tb, 1, seconds, lambda: "AT_STEP" in lines.text, slow)
    try:
        result = launch(framework="tensorflow", command=[sys.executable, str(TF_WORKER), "30",
                                                         str(steps)],
                        workers=2, env={**JOB_ENV, **env}, testbed=tb, timeout=240,
                        stream=lines)
    finally:
        outage.join()
    return result, outage, lines


@needs("mxnet")
def test_mxnet_rides_out_a_10_s_outage_with_equal_weights(tmp_path: Path) -> None:
    with Testbed(hosts=3, rate="1gbit") as tb:
        result, outage = mx_job(tb, tmp_path, 10.0, 600, {"AUTOBYTE_GRACE_S": "30"})
    assert result.ok, {n: p.output[-2000:] for n, p in result.processes.items()}
    assert outage.ended - outage.began >= 10.0  # the port was down while the job trained
    with np.load(tmp_path / "params_rank0.npz") as a, np.load(tmp_path / "params_rank1.npz") as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)


@needs("mxnet")
def test_mxnet_rides_out_a_minute_at_1_mbit_with_equal_weights(tmp_path: Path) -> None:
    """Slow is not dead: blocks keep finishing, so no grace period (30 s) runs out."""
    with Testbed(hosts=3, rate="1gbit") as tb:
        result, outage = mx_job(tb, tmp_path, 60.0, 400, {"AUTOBYTE_GRACE_S": "30"},
                                slow="1mbit")
    assert result.ok, {n: p.output[-2000:] for n, p in result.processes.items()}
    assert outage.ended - outage.began >= 60.0  # the job outlasted the slow minute
    with np.load(tmp_path / "params_rank0.npz") as a, np.load(tmp_path / "params_rank1.npz") as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)


@needs("mxnet")
def test_mxnet_ends_a_120_s_outage_after_the_default_grace_period_with_a_clear_error(
        tmp_path: Path) -> None:
    with Testbed(hosts=3, rate="1gbit") as tb:
        result, outage = mx_job(tb, tmp_path, 120.0, 1_000_000, {})
        ended = time.monotonic()
    assert not result.ok and not result.timed_out and result.returncode == 75, result.failed
    grace = Config().grace_s
    print(f"MXNet ended {ended - outage.began:.1f} s into a 120 s outage (grace {grace:g} s)")
    assert grace <= ended - outage.began <= grace + 25.0  # the grace period, not the outage
    text = result.processes[result.failed].output
    assert "no communication progress for" in text, text[-2000:]


@needs("tensorflow")
def test_tensorflow_rides_out_a_10_s_outage_with_equal_weights() -> None:
    with Testbed(hosts=2, rate="1gbit") as tb:
        result, outage, lines = tf_job(tb, 10.0, 3000, {"AUTOBYTE_GRACE_S": "30"})
    assert result.ok, {n: p.output[-2000:] for n, p in result.processes.items()}
    assert outage.ended - outage.began >= 10.0
    sums = {line.split()[-2]: line.split()[-1] for line in lines.text.splitlines()
            if "CHECKSUM" in line}
    assert len(sums) == 2 and sums["0"] == sums["1"], sums


@needs("tensorflow")
def test_tensorflow_rides_out_a_minute_at_1_mbit_with_equal_weights() -> None:
    """Slow is not dead: TensorFlow's heartbeats get through a 1 mbit/s link (grace 30 s)."""
    with Testbed(hosts=2, rate="1gbit") as tb:
        result, outage, lines = tf_job(tb, 60.0, 3000, {"AUTOBYTE_GRACE_S": "30"},
                                       slow="1mbit")
    assert result.ok, {n: p.output[-2000:] for n, p in result.processes.items()}
    assert outage.ended - outage.began >= 60.0
    sums = {line.split()[-2]: line.split()[-1] for line in lines.text.splitlines()
            if "CHECKSUM" in line}
    assert len(sums) == 2 and sums["0"] == sums["1"], sums


@needs("tensorflow")
def test_tensorflow_ends_a_120_s_outage_after_the_default_grace_period_with_its_error() -> None:
    with Testbed(hosts=2, rate="1gbit") as tb:
        result, outage, _ = tf_job(tb, 120.0, 10_000_000, {})
        ended = time.monotonic()
    assert not result.ok and not result.timed_out, result.returncode
    grace = Config().grace_s
    print(f"TensorFlow ended {ended - outage.began:.1f} s into a 120 s outage "
          f"(grace {grace:g} s)")
    # TensorFlow's coordination service declares a task dead once it has heard no heartbeat
    # for grace_s, and a task sends one every grace_s / 2: the last may precede the cut by
    # up to that much. Before grace / 2 would be TensorFlow's own 10 s, after grace + 40 s
    # the outage waited out.
    assert grace / 2 <= ended - outage.began <= grace + 40.0, ended - outage.began

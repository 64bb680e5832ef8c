"""Measure achieved TCP throughput between two testbed hosts (and how fast a change lands).

Used by the testbed tests and ``autobyte testbed bench``. One bounded flow, a few seconds:
the receiver's 50 ms arrival bins give the steady-state rate (slow start skipped) and the time
at which the rate first reached a new setting after ``set_rate``; one message after a pause
gives what a burst costs.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Callable

from common.errors import TestbedError
from common.testbed._testbed import Host, Testbed

__all__ = ["Flow", "measure_flow", "measure_message"]

_WARMUP_S = 0.3


@dataclasses.dataclass(frozen=True)
class Flow:
    """Receiver-side timeline of one flow: ``bins[i]`` bytes arrived in ``[t_i, t_i + bin_s)``."""

    start: float
    bin_s: float
    bins: tuple[int, ...]
    total_bytes: int
    changed_at: float | None = None

    def rate(self, t0: float | None = None, t1: float | None = None) -> float:
        """Mean bit/s between absolute times t0 and t1 (default: after warm-up to the end)."""
        first = self.start + _WARMUP_S if t0 is None else t0
        last = self.start + len(self.bins) * self.bin_s if t1 is None else t1
        lo = max(0, int((first - self.start) / self.bin_s))
        hi = min(len(self.bins), int((last - self.start) / self.bin_s))
        if hi - lo < 1:
            raise TestbedError(f"flow too short to measure between {t0} and {t1}")
        # The last bin is partial (the sender stopped inside it): leave it out.
        hi = min(hi, len(self.bins) - 1) if hi - lo > 1 else hi
        return sum(self.bins[lo:hi]) * 8 / ((hi - lo) * self.bin_s)

    def settle_time(self, target: float, *, tolerance: float = 0.15,
                    window_s: float = 0.2) -> float | None:
        """Seconds from ``changed_at`` until a ``window_s`` mean is within tolerance of target."""
        if self.changed_at is None:
            raise TestbedError("this flow had no rate change")
        per = max(1, round(window_s / self.bin_s))
        first = int((self.changed_at - self.start) / self.bin_s)
        for i in range(max(0, first), len(self.bins) - per):
            rate = sum(self.bins[i:i + per]) * 8 / (per * self.bin_s)
            if abs(rate - target) <= tolerance * target:
                return max(0.0, self.start + (i + per) * self.bin_s - self.changed_at)
        return None


def measure_message(tb: Testbed, src: Host | int | str, dst: Host | int | str, *,
                    nbytes: int, port: int = 5202) -> float:
    """Seconds from ``src`` starting to send ``nbytes`` after an idle pause until ``dst`` has
    them all: what a burst costs on a link whose token bucket has refilled."""
    source, sink = tb.host(src), tb.host(dst)
    receiver = _receiver(tb, sink, _probe("message-recv", sink.address, port, nbytes))
    try:
        sender = subprocess.run(tb.wrap(source, _probe("message-send", sink.address, port,
                                                       nbytes)),
                                capture_output=True, text=True, timeout=60)
        out, err = receiver.communicate(timeout=30)
        if receiver.returncode or sender.returncode:
            raise TestbedError(f"message failed: receiver exit {receiver.returncode} "
                               f"{err.strip()}, sender exit {sender.returncode} "
                               f"{sender.stderr.strip()}")
        return float(json.loads(out.strip().splitlines()[-1])["done"]) - \
            float(json.loads(sender.stdout.strip().splitlines()[-1])["start"])
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()


def _receiver(tb: Testbed, sink: Host, argv: list[str]) -> subprocess.Popen[str]:
    """The probe's receiving end in ``sink``'s namespace, once it listens."""
    receiver = subprocess.Popen(tb.wrap(sink, argv), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    assert receiver.stdout is not None
    if receiver.stdout.readline().strip() != "ready":
        receiver.kill()
        _, err = receiver.communicate()
        raise TestbedError(f"probe receiver failed: {err.strip()}")
    return receiver


def _probe(mode: str, address: str, port: int, arg: float) -> list[str]:
    return [sys.executable, "-m", "common.testbed._probe", mode, address, str(port), str(arg)]


def measure_flow(tb: Testbed, src: Host | int | str, dst: Host | int | str, *,
                 seconds: float = 3.0, port: int = 5201,
                 change: Callable[[], None] | None = None,
                 change_after: float | None = None) -> Flow:
    """Send from ``src`` to ``dst`` for ``seconds``; optionally call ``change`` mid-flow."""
    source, sink = tb.host(src), tb.host(dst)
    receiver = _receiver(tb, sink, _probe("recv", sink.address, port, seconds))
    sender: subprocess.Popen[str] | None = None
    try:
        sender = subprocess.Popen(tb.wrap(source, _probe("send", sink.address, port, seconds)),
                                  stderr=subprocess.PIPE, text=True)
        changed_at = None
        if change is not None:
            time.sleep(seconds / 2 if change_after is None else change_after)
            changed_at = time.time()
            change()
        out, err = receiver.communicate(timeout=seconds + 20)
        sender.wait(timeout=10)
        if receiver.returncode or sender.returncode:
            raise TestbedError(f"flow failed: receiver exit {receiver.returncode} {err.strip()}, "
                               f"sender exit {sender.returncode}")
        data = json.loads(out.strip().splitlines()[-1])
        bin_s = float(data["bin_s"])
        skip = int((float(data["first"]) - float(data["start"])) / bin_s)
        return Flow(start=float(data["start"]) + skip * bin_s, bin_s=bin_s,
                    bins=tuple(int(b) for b in data["bins"][skip:]),
                    total_bytes=int(data["bytes"]), changed_at=changed_at)
    finally:
        for proc in (receiver, sender):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


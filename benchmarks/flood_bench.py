"""A flood of forged messages at the control plane rank 0 hosts, against the same job without it.

    .venv/bin/python benchmarks/flood_bench.py                       # TensorFlow demo cnn
    .venv/bin/python benchmarks/flood_bench.py --framework mxnet --rounds 3
    .venv/bin/python benchmarks/flood_bench.py --control sink       # the same flood both times

Each round runs the demo job twice on loopback (2 workers; MXNet adds a scheduler and a
server), as shipped (live tuning, rank 0 hosting the coordinator), one job after the other and
alternating which goes first: once untouched, once while another process sends messages signed
with the wrong secret to the job's control endpoint at ``--rate`` messages/s, from a new
connection (a new sender, so muting one never ends the flood) every ``--burst`` messages. The
flood starts at the job's first progress record and lasts until the job ends.

On this 2-core machine the forger shares the cores with training (on a cluster it would be
another machine), so besides the speed ratio each round prints the CPU share of a core the
forger and rank 0's coordinator (which receives and rejects the messages) used: the
coordinator's is what the flood costs rank 0's machine. With ``--control sink`` the other job
gets the same flood too, aimed at a process that only receives and drops it (at the
coordinator's priority), so the ratio is what rejecting costs beyond the forger and the bytes
arriving. Prints per round both jobs' samples/s
over the steps the flood covered, their ratio, the messages sent and rank 0's log lines about
them; then the median ratio. Every process it starts is stopped when it ends.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common.launch import launch
from common.progress import parse

MARKER = "AUTOBYTE_FLOOD_BENCH"
SAMPLES_PER_STEP = 2 * 32  # two workers at the demo's batch


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", default="tensorflow", choices=["tensorflow", "mxnet"])
    p.add_argument("--model", default="cnn")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--burst", type=int, default=1000,
                   help="forged messages per connection before the flood opens a new one")
    p.add_argument("--rate", type=float, default=20_000.0, help="forged messages per second")
    p.add_argument("--control", default="none", choices=["none", "sink"],
                   help="the other job of a round: untouched, or flooding a sink instead")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per job")
    args = p.parse_args(argv)
    if args.steps < 100 or args.rounds < 1 or args.burst < 1 or not args.rate > 0:
        p.error(f"--steps must be >= 100, --rounds and --burst >= 1, --rate > 0, got "
                f"steps={args.steps}, rounds={args.rounds}, burst={args.burst}, "
                f"rate={args.rate}")
    return args


def flood(endpoint: str, burst: int, rate: float, stop: Any, sent: Any) -> None:
    """Forged ``report`` messages at ``endpoint``, ``rate`` a second, until ``stop`` is set (in
    another process)."""
    import zmq

    from common.control import Signer

    ctx = zmq.Context()
    forger = Signer(secret=b"not-the-jobs-secret", sender="worker1")
    body = {"rank": 1, "window": 1, "steps": 10}
    began = time.monotonic()
    try:
        while not stop.is_set():
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 1000)
            sock.connect(endpoint)
            for _ in range(burst):
                ahead = sent.value / rate - (time.monotonic() - began)
                if ahead > 0:
                    time.sleep(ahead)
                sock.send_multipart(forger.sign("report", body))
                sent.value += 1
            sock.close()
    finally:
        ctx.term()


def sink(endpoints: Any, stop: Any) -> None:
    """Receive and drop whatever arrives, at the hosted coordinator's priority."""
    import zmq

    from common.control._hosted import NICE, lower_priority

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:*")
    lower_priority(NICE)
    endpoints.put(sock.getsockopt_string(zmq.LAST_ENDPOINT))
    try:
        while not stop.is_set():
            if sock.poll(100):
                sock.recv_multipart()
    finally:
        sock.close(0)
        ctx.term()


def cpu_s(pid: int) -> float:
    """CPU seconds ``pid`` has used so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def marked(tag: str) -> Iterator[tuple[int, bytes, dict[str, str]]]:
    """(pid, command line, environment) of each process carrying ``MARKER=tag`` (/proc)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            raw = Path(f"/proc/{pid}/environ").read_bytes().decode()
        except (OSError, UnicodeDecodeError):
            continue
        env = dict(x.split("=", 1) for x in raw.split("\0") if "=" in x)
        if env.get(MARKER) == tag:
            yield int(pid), cmd, env


def coordinator_pid(tag: str) -> int | None:
    """The hosted coordinator of the job whose processes carry ``MARKER=tag``."""
    return next((pid for pid, cmd, _ in marked(tag) if b"common.control._hosted" in cmd), None)


def control_endpoint(tag: str, timeout: float = 60.0) -> str:
    """The control endpoint of the job whose processes carry ``MARKER=tag``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _, _, env in marked(tag):
            if "AUTOBYTE_CONTROL_ENDPOINT" in env:
                return env["AUTOBYTE_CONTROL_ENDPOINT"]
        time.sleep(0.2)
    raise TimeoutError("the job's processes never appeared")


class Records:
    """The launch stream: keeps rank 0's progress records (step, speed, time) and log lines."""

    def __init__(self) -> None:
        self.windows: list[tuple[int, int, float]] = []  # (first, last step, seconds)
        self.lines: list[str] = []
        self.started = threading.Event()
        self._last = 0

    def write(self, text: str) -> int:
        for line in text.splitlines():
            self.lines.append(line)
            record = parse(line) if line.startswith("[worker0]") else None
            if record is None or record.get("kind") != "progress":
                continue
            step, speed = int(record["step"]), float(record["mean_samples_per_s"])
            seconds = (step - self._last) * SAMPLES_PER_STEP / speed if speed > 0 else 0.0
            self.windows.append((self._last + 1, step, seconds))
            self._last = step
            self.started.set()
        return len(text)

    def flush(self) -> None:
        pass

    def speed(self, first: int) -> float:
        """Samples/s of the job over the windows from step ``first`` on."""
        rows = [(a, b, s) for a, b, s in self.windows if a >= first]
        steps, seconds = sum(b - a + 1 for a, b, _ in rows), sum(s for *_, s in rows)
        return steps * SAMPLES_PER_STEP / seconds if seconds > 0 else float("nan")

    def seconds(self, first: int) -> float:
        return sum(s for a, _, s in self.windows if a >= first)


def job(args: argparse.Namespace, target: str) -> tuple[Records, int, int, float, float]:
    """One job, flooding ``target`` ("coordinator", "sink" or "none"); returns its records,
    the step the flood began at, the messages sent and the CPU shares of a core the forger
    and the coordinator used meanwhile."""
    tag = secrets.token_hex(4)
    records = Records()
    module = "autobyte_tf.demo" if args.framework == "tensorflow" else "autobyte_mx.demo"
    command = [sys.executable, "-m", module, "--model", args.model, "--steps", str(args.steps)]
    stop, sent = mp.Event(), mp.Value("q", 0)
    result: dict[str, Any] = {}
    runner = threading.Thread(target=lambda: result.update(r=launch(
        framework=args.framework, command=command, workers=2,
        servers=1 if args.framework == "mxnet" else 0, env={MARKER: tag},
        timeout=args.timeout, stream=records)), daemon=True)
    runner.start()
    began, flooder, drain, shares = 0, None, None, (0.0, 0.0)
    try:
        endpoint = control_endpoint(tag)
        while not records.started.wait(0.5):
            if not runner.is_alive():
                break
        began = records.windows[-1][1] + 1 if records.windows else 0
        coordinator = coordinator_pid(tag)
        if target == "sink":
            endpoints: Any = mp.Queue()
            drain = mp.Process(target=sink, args=(endpoints, stop), daemon=True)
            drain.start()
            endpoint = endpoints.get(timeout=30)
        if target != "none" and runner.is_alive():
            flooder = mp.Process(target=flood, args=(endpoint, args.burst, args.rate, stop,
                                                     sent), daemon=True)
            flooder.start()
        t0 = time.monotonic()
        c0 = cpu_s(coordinator) if coordinator else 0.0
        used = {"forger": 0.0, "coordinator": 0.0}
        while runner.is_alive():
            runner.join(0.5)
            if flooder is not None:
                used["forger"] = max(used["forger"], cpu_s(flooder.pid or 0))
            if coordinator:
                used["coordinator"] = max(used["coordinator"], cpu_s(coordinator) - c0)
        elapsed = max(1e-9, time.monotonic() - t0)
        shares = (used["forger"] / elapsed, used["coordinator"] / elapsed)
    finally:
        stop.set()
        for process in (flooder, drain):
            if process is not None:
                process.join(10)
                if process.is_alive():
                    process.kill()
    launched = result.get("r")
    if launched is None or not launched.ok:
        tail = "\n".join(records.lines[-20:])
        raise RuntimeError(f"the job flooding {target} failed:\n{tail}")
    return records, began, int(sent.value), *shares


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"flood bench: {args.framework} {args.model}, {args.steps} steps a job, "
          f"{args.rounds} round(s), a new forging connection every {args.burst} messages",
          flush=True)
    ratios = []
    other = "untouched" if args.control == "none" else "sink flooded"
    for r in range(args.rounds):
        order = (args.control, "coordinator")
        runs = {target: job(args, target) for target in (order if r % 2 == 0 else order[::-1])}
        (quiet, _, _, _, calm_cpu), (loud, began, sent, forger, hit_cpu) = \
            runs[args.control], runs["coordinator"]
        calm, hit = quiet.speed(began), loud.speed(began)
        ratios.append(hit / calm)
        warned = [x for x in loud.lines if "dropped" in x or "forged" in x or "signature" in x]
        print(f"  round {r + 1}: {other} {calm:.1f} samples/s, flooded {hit:.1f} "
              f"({hit / calm:.3f}x) from step {began}; {sent} forged messages "
              f"({sent / max(1e-9, loud.seconds(began)):.0f}/s), "
              f"{len(warned)} log line(s) about them; CPU of a core: forger {forger:.0%}, "
              f"coordinator {hit_cpu:.0%} ({other} job: {calm_cpu:.0%})", flush=True)
    print(f"flood bench: flooded / {other}, median of {args.rounds}: "
          f"{statistics.median(ratios):.3f} (rounds {', '.join(f'{x:.3f}' for x in ratios)})",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

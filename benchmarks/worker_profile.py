"""Where rank 0's time goes: the framework alone against AutoByte, one job of each kind.

    .venv/bin/pip install py-spy                     # a profiler, not a dependency of AutoByte
    sudo .venv/bin/python benchmarks/worker_profile.py [--framework tensorflow] [--model cnn] \\
        [--rate 3gbit] [--steps 3000] [--kinds baseline,off,observe,shipped] [--perf]

Runs one job of each of ``--kinds`` (native_cost.py's: the framework alone, AutoByte's native
path with no tuner, with a tuner that only observes, as shipped) on the testbed, one after
another. Once ``--after`` seconds have passed it watches rank 0's worker for ``--seconds``: the
CPU each of its threads used (by thread name, from /proc) and its child processes (the
coordinator, which rank 0 hosts), the Python time by function
(``py-spy record``, inclusive) and, with ``--perf``, the native time by symbol (``perf record``,
self time: where TensorFlow's or MXNet's own threads spend it). Every figure is per step. One job
of each kind on this noisy machine: read the breakdown, not the speed.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from native_cost import KINDS, job_spec

from common.bench import run_jobs
from common.bench._jobs import MODULES
from common.config import RANK_ENV, ROLE_ENV

BATCH = 64  # samples per step over both workers (the demos' 32 each)
HZ = 200
SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def _rank0(module: str) -> str | None:
    pids = subprocess.run(["pgrep", "-f", module], capture_output=True, text=True).stdout.split()
    want = {f"{ROLE_ENV}=worker".encode(), f"{RANK_ENV}=0".encode()}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if want <= set(f.read().split(b"\0")):
                    return pid
        except OSError:
            continue
    return None


def _cpu_s(stat: str) -> float:
    """CPU seconds (user and system) in one /proc stat line of a process or thread."""
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _thread_cpu(pid: str) -> dict[str, float]:
    """CPU seconds so far of each of ``pid``'s threads, summed by name (digits dropped)."""
    out: collections.Counter[str] = collections.Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        out[re.sub(r"\d+", "#", stat[stat.index("(") + 1:stat.rindex(")")])] += _cpu_s(stat)
    return dict(out)


def _children_cpu(pid: str) -> float:
    """CPU seconds so far of ``pid``'s child processes (rank 0's coordinator, when hosted)."""
    total = 0.0
    kids = subprocess.run(["pgrep", "-P", pid], capture_output=True, text=True).stdout.split()
    for kid in kids:
        try:
            total += _cpu_s(Path(f"/proc/{kid}/stat").read_text())
        except OSError:
            continue
    return total


def _watch(work: Path, module: str, after: float, seconds: int, perf: bool,
           found: dict[str, object]) -> None:
    time.sleep(after)
    pid = _rank0(module)
    if pid is None:
        return
    before, kids_before = _thread_cpu(pid), _children_cpu(pid)
    procs = []
    if Path(SPY).exists():
        procs.append(subprocess.Popen(
            [SPY, "record", "-p", pid, "-d", str(seconds), "-r", str(HZ), "-f", "raw",
             "-o", str(work / "spy.txt"), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    if perf:
        procs.append(subprocess.Popen(
            ["perf", "record", "-F", str(HZ), "-p", pid, "-o", str(work / "perf.data"),
             "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    started = time.monotonic()
    for proc in procs:
        proc.wait()
    time.sleep(max(0.0, seconds - (time.monotonic() - started)))
    after_cpu = _thread_cpu(pid)
    found["threads"] = {name: after_cpu[name] - before.get(name, 0.0) for name in after_cpu}
    found["children"] = _children_cpu(pid) - kids_before


def _spy_ms(raw: Path, steps: float, top: int) -> list[tuple[float, str]]:
    inclusive: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        if line.strip():
            stack, n = line.rsplit(" ", 1)
            for frame in set(stack.split(";")):
                inclusive[frame] += int(n)
    return [(n * 1e3 / HZ / steps, frame) for frame, n in inclusive.most_common(top)]


def _perf_ms(data: Path, steps: float, top: int) -> list[tuple[float, str]]:
    report = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "--no-children", "--sort", "comm,sym",
         "--percent-limit", "0.3", "-F", "sample,comm,sym"],
        capture_output=True, text=True, check=False).stdout
    rows = []
    for line in report.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and parts[0].isdigit():
            rows.append((int(parts[0]) * 1e3 / HZ / steps, parts[1].strip()))
    return sorted(rows, reverse=True)[:top]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", default="tensorflow", choices=sorted(MODULES))
    p.add_argument("--model", default="cnn")
    p.add_argument("--rate", default="3gbit")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--kinds", default="baseline,shipped",
                   help=f"comma-separated, of {', '.join(KINDS)}")
    p.add_argument("--after", type=float, default=15.0)
    p.add_argument("--seconds", type=int, default=15)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--perf", action="store_true", help="also sample native stacks with perf")
    args = p.parse_args(argv)
    kinds = args.kinds.split(",")
    if any(k not in KINDS for k in kinds):
        p.error(f"--kinds must be of {', '.join(KINDS)}, got --kinds {args.kinds}")
    if not Path(SPY).exists():
        p.error("py-spy is not installed: .venv/bin/pip install py-spy")
    if args.perf and shutil.which("perf") is None:
        p.error("--perf needs perf on the PATH")
    root = Path(tempfile.mkdtemp(prefix="worker-profile-"))
    for kind in kinds:
        work = root / kind
        work.mkdir()
        found: dict[str, object] = {}
        watcher = threading.Thread(target=_watch, args=(
            work, MODULES[args.framework], args.after, args.seconds, args.perf, found))
        watcher.start()
        spec = job_spec(kind, f"profile-{kind}", framework=args.framework, model=args.model,
                        steps=args.steps)
        run = run_jobs([spec], rate=args.rate, out=work, echo=False)[0]
        watcher.join()
        speed = run.mean_speed(first=11)
        steps = speed / BATCH * args.seconds
        print(f"{kind}: {speed:.1f} samples/s, rank 0 CPU {run.cpu_s_per_step(first=11) * 1e3:.2f}"
              f" ms a step", flush=True)
        threads = found.get("threads")
        if not isinstance(threads, dict):
            print("  (no profile: rank 0's worker was not found while it ran)")
            continue
        print("  CPU by thread:")
        for name, cpu in sorted(threads.items(), key=lambda kv: -kv[1])[:args.top]:
            if cpu > 0:
                print(f"  {cpu * 1e3 / steps:7.3f} ms/step  {name}")
        children = found.get("children")
        if isinstance(children, float) and children > 0:
            print(f"  {children * 1e3 / steps:7.3f} ms/step  (child processes: the coordinator)")
        if (work / "spy.txt").exists():
            print("  Python, inclusive:")
            for ms, frame in _spy_ms(work / "spy.txt", steps, args.top):
                print(f"  {ms:7.3f} ms/step  {frame[:140]}")
        if (work / "perf.data").exists():
            print("  native, self:")
            for ms, sym in _perf_ms(work / "perf.data", steps, args.top):
                print(f"  {ms:7.3f} ms/step  {sym[:140]}")
    print(f"profiles and job logs in {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where rank 0's time goes: the framework alone against AutoByte, one job of each kind.

    .venv/bin/pip install py-spy                     # a profiler, not a dependency of AutoByte
    sudo .venv/bin/python benchmarks/worker_profile.py [--framework tensorflow] [--model cnn] \\
        [--rate 3gbit] [--steps 3000] [--kinds baseline,off,observe,shipped] [--perf] [--sched]

Runs one job of each of ``--kinds`` (native_cost.py's: the framework alone, AutoByte's native
path with no tuner, with a tuner that only observes, as shipped) on the testbed, one after
another. Once ``--after`` seconds have passed it watches rank 0's worker for ``--seconds``: the
CPU each of its threads used (by thread name, from /proc) and its child processes (the
coordinator, which rank 0 hosts), the Python time by function
(``py-spy record``, inclusive) and, with ``--perf``, the native time by symbol (``perf record``,
self time: where TensorFlow's or MXNet's own threads spend it) and, with ``--sched``, the
scheduler's view of every process of the job (``perf sched``, system-wide): CPU, how often its
threads were switched in, and how long a woken thread waited for a core (run-queue delay), by
process (worker ranks, server, scheduler, the coordinator) and by thread name. Every figure is per
step. One job of each kind on this noisy machine: read the breakdown, not the speed.
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


def _group(thread: str) -> str:
    """A thread's name with its digits dropped, so a pool's threads count as one."""
    return re.sub(r"\d+", "#", thread)


def _thread_cpu(pid: str) -> dict[str, float]:
    """CPU seconds so far of each of ``pid``'s threads, summed by name (digits dropped)."""
    out: collections.Counter[str] = collections.Counter()
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue
        out[_group(stat[stat.index("(") + 1:stat.rindex(")")])] += _cpu_s(stat)
    return dict(out)


def _children(pid: str) -> list[str]:
    """Process ids of ``pid``'s children (rank 0's: the coordinator, when hosted)."""
    return subprocess.run(["pgrep", "-P", pid], capture_output=True, text=True).stdout.split()


def _children_cpu(pid: str) -> float:
    """CPU seconds so far of ``pid``'s child processes (rank 0's coordinator, when hosted)."""
    total = 0.0
    for kid in _children(pid):
        try:
            total += _cpu_s(Path(f"/proc/{kid}/stat").read_text())
        except OSError:
            continue
    return total


def _job_threads(pid0: str) -> dict[int, str]:
    """Thread ids of the job's processes, each labelled "<process>/<thread name>": processes by
    their role and rank (the launcher's environment), rank 0's children as the coordinator."""
    labels: dict[int, str] = {}
    kids = set(_children(pid0))
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = dict(kv.split(b"=", 1) for kv in (proc / "environ").read_bytes().split(b"\0")
                       if b"=" in kv)
        except OSError:
            continue
        role = env.get(ROLE_ENV.encode(), b"").decode()
        if proc.name in kids:
            who = "coordinator"
        elif role:
            rank = env.get(RANK_ENV.encode(), b"").decode()
            who = f"{role}{rank}" if role == "worker" else role
        else:
            continue
        for task in (proc / "task").iterdir():
            try:
                name = (task / "comm").read_text().strip()
            except OSError:
                continue
            name = "main" if task.name == proc.name else _group(name)
            labels[int(task.name)] = f"{who}/{name}"
    return labels


def _watch(work: Path, module: str, after: float, seconds: int, spy: bool, perf: bool,
           sched: bool, found: dict[str, object]) -> None:
    time.sleep(after)
    pid = _rank0(module)
    if pid is None:
        return
    before, kids_before = _thread_cpu(pid), _children_cpu(pid)
    if sched:
        found["labels"] = _job_threads(pid)
    procs = []
    if spy:
        procs.append(subprocess.Popen(
            [SPY, "record", "-p", pid, "-d", str(seconds), "-r", str(HZ), "-f", "raw",
             "-o", str(work / "spy.txt"), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    if perf:
        procs.append(subprocess.Popen(
            ["perf", "record", "-F", str(HZ), "-p", pid, "-o", str(work / "perf.data"),
             "--", "sleep", str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    if sched:
        procs.append(subprocess.Popen(
            ["perf", "sched", "record", "-a", "-o", str(work / "sched.data"), "--", "sleep",
             str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
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


_LATENCY = re.compile(r"^\s*(?P<comm>.+):(?P<tid>\d+)\s*\|\s*(?P<run>[\d.]+) ms\s*\|\s*"
                      r"(?P<n>\d+)\s*\|\s*avg:\s*(?P<avg>[\d.]+) ms\s*\|\s*"
                      r"max:\s*(?P<max>[\d.]+) ms")


def _sched_rows(data: Path, labels: dict[int, str], steps: float
                ) -> dict[str, tuple[float, float, float, float]]:
    """By label: (CPU ms, switches, run-queue delay ms, max delay ms), each per step but the
    max; threads outside the job summed as "other"."""
    report = subprocess.run(["perf", "sched", "latency", "--pids", "-i", str(data)],
                            capture_output=True, text=True, check=False).stdout
    sums: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for line in report.splitlines():
        m = _LATENCY.match(line)
        if m is None:
            continue
        label = labels.get(int(m["tid"]), "other")
        n = int(m["n"])
        row = sums[label]
        row[0] += float(m["run"])
        row[1] += n
        row[2] += float(m["avg"]) * n
        row[3] = max(row[3], float(m["max"]))
    return {label: (run / steps, n / steps, delay / steps, most)
            for label, (run, n, delay, most) in sums.items()}


def _print_sched(rows: dict[str, tuple[float, float, float, float]], top: int) -> None:
    by_process: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0])
    for label, (run, n, delay, _) in rows.items():
        total = by_process[label.split("/", 1)[0]]
        total[0] += run
        total[1] += n
        total[2] += delay
    print("  scheduler, by process (per step: CPU ms, switches, run-queue delay ms):")
    for who, (run, n, delay) in sorted(by_process.items(), key=lambda kv: -kv[1][0]):
        print(f"  {run:7.3f} ms  {n:7.1f} sw  {delay:7.3f} ms  {who}")
    print("  by thread:")
    for label, (run, n, delay, most) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:top]:
        if label != "other":
            print(f"  {run:7.3f} ms  {n:7.1f} sw  {delay:7.3f} ms  (max {most:6.2f})  {label}")


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
    p.add_argument("--spy", action=argparse.BooleanOptionalAction, default=True,
                   help="sample rank 0's Python stacks with py-spy (--no-spy: leave it alone)")
    p.add_argument("--perf", action="store_true", help="also sample native stacks with perf")
    p.add_argument("--sched", action="store_true",
                   help="also record the scheduler's events system-wide (perf sched)")
    args = p.parse_args(argv)
    kinds = args.kinds.split(",")
    if any(k not in KINDS for k in kinds):
        p.error(f"--kinds must be of {', '.join(KINDS)}, got --kinds {args.kinds}")
    if args.spy and not Path(SPY).exists():
        p.error("py-spy is not installed: .venv/bin/pip install py-spy (or --no-spy)")
    if (args.perf or args.sched) and shutil.which("perf") is None:
        p.error("--perf and --sched need perf on the PATH")
    root = Path(tempfile.mkdtemp(prefix="worker-profile-"))
    for n, kind in enumerate(kinds, 1):  # a kind may come again (alternating rounds)
        work = root / f"{n}-{kind}"
        work.mkdir()
        found: dict[str, object] = {}
        watcher = threading.Thread(target=_watch, args=(
            work, MODULES[args.framework], args.after, args.seconds, args.spy, args.perf,
            args.sched, found))
        watcher.start()
        spec = job_spec(kind, f"profile-{work.name}", framework=args.framework, model=args.model,
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
        labels = found.get("labels")
        if (work / "sched.data").exists() and isinstance(labels, dict):
            _print_sched(_sched_rows(work / "sched.data", labels, steps), args.top)
    print(f"profiles and job logs in {root}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Where an MXNet worker's Python time goes: native dist_sync against AutoByte, one job each.

    .venv/bin/pip install py-spy                     # a profiler, not a dependency of AutoByte
    sudo .venv/bin/python benchmarks/mx_profile.py [--model cnn] [--rate 3gbit] [--steps 3000]

Runs the native job, then AutoByte as shipped, on the testbed (2 workers, a server and a
scheduler), samples one worker with ``py-spy record`` for ``--seconds`` once ``--after``
seconds have passed, and prints each job's speed, rank 0's CPU per step and the worker's active
Python milliseconds per step by function (inclusive), largest first. One pair of jobs on this
noisy machine: read the breakdown, not the ratio.
"""

from __future__ import annotations

import argparse
import collections
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from common.bench import JobSpec, run_jobs

BATCH = 64  # samples per step over both workers (the demo's 32 each)
SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def _sample(out: Path, after: float, seconds: int) -> None:
    time.sleep(after)
    pids = subprocess.run(["pgrep", "-f", "autobyte_mx.demo"], capture_output=True,
                          text=True).stdout.split()
    for pid in pids:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if b"DMLC_ROLE=worker" in f.read().split(b"\0"):
                subprocess.run([SPY, "record", "-p", pid, "-d", str(seconds), "-r", "200",
                                "-f", "raw", "-o", str(out), "--nonblocking"],
                               capture_output=True, check=False)
                return


def _per_step_ms(raw: Path, steps: float, top: int) -> list[tuple[float, str]]:
    inclusive: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        if line.strip():
            stack, n = line.rsplit(" ", 1)
            for frame in set(stack.split(";")):
                inclusive[frame] += int(n)
    return [(n * 5.0 / steps, frame) for frame, n in inclusive.most_common(top)]  # 200 Hz


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="cnn")
    p.add_argument("--rate", default="3gbit")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--after", type=float, default=15.0)
    p.add_argument("--seconds", type=int, default=15)
    p.add_argument("--top", type=int, default=40)
    args = p.parse_args(argv)
    if not Path(SPY).exists():
        p.error("py-spy is not installed: .venv/bin/pip install py-spy")
    work = Path(tempfile.mkdtemp(prefix="mx-profile-"))
    for kind in ("native", "autobyte"):
        raw = work / f"{kind}.txt"
        sampler = threading.Thread(target=_sample, args=(raw, args.after, args.seconds))
        sampler.start()
        spec = JobSpec(f"profile-{kind}", framework="mxnet", model=args.model, steps=args.steps,
                       window=10, baseline=kind == "native", shipped=kind == "autobyte")
        run = run_jobs([spec], rate=args.rate, out=work / kind, echo=False)[0]
        sampler.join()
        speed = run.mean_speed(first=11)
        print(f"{kind}: {speed:.1f} samples/s, rank 0 CPU {run.cpu_s_per_step(first=11) * 1e3:.2f}"
              f" ms a step")
        if not raw.exists():
            print("  (no profile: the worker was not found while it ran)")
            continue
        for ms, frame in _per_step_ms(raw, speed / BATCH * args.seconds, args.top):
            print(f"  {ms:6.3f} ms/step  {frame[:140]}")
    print(f"profiles and job logs in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Cost of live tuning per training step (issue 6: collecting must add under 1% to step time).

Measured side by side in one run:
  record_step   ``StatsCollector.record_step`` in a tight loop, against an empty call of the
                same signature, for 0/50/161 layers with per-layer backward times given every
                step (worst case) or every 10th (sampled, as the TF adapter does); closing and
                building each window is included.
  send          per window on every worker: ``Window.to_dict`` + JSON + HMAC (``Signer``).
  coordinate    per window on rank 0's coordinator thread, which shares rank 0's GIL: verify
                and parse n workers' windows, merge, tuner + trigger, one decision-log line.
Per-window costs are divided by window_steps and added to the per-step cost in the last
table, which puts the total against typical step times.

    .venv/bin/python benchmarks/stats_bench.py [--steps 200000] [--windows 2000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from common.config import Config
from common.control import Signer, TuningLoop, Verifier
from common.decision_log import DecisionLog
from common.stats import StatsCollector, Window, merge_windows
from common.testing.tuners import ScriptedTuner
from common.trigger import ThresholdTrigger

STEP_TIMES_S = (0.01, 0.05, 0.2, 1.0)
KEY = b"k" * 32


def _noop(step: int, samples: int, step_time_s: float, *, layer_backward_s: object = None,
          bytes_up: int = 0, bytes_down: int = 0) -> None:
    return None


def _per_step(record: Callable[..., None], steps: int, layers: list[float] | None,
              every: int) -> float:
    t0 = time.perf_counter()
    for s in range(steps):
        record(s, 32, 0.1, layer_backward_s=layers if s % every == 0 else None,
               bytes_up=1_000_000, bytes_down=1_000_000)
    return (time.perf_counter() - t0) / steps * 1e6


def _windows(layers_n: int, workers: int) -> list[Window]:
    out: list[Window] = []
    for rank in range(workers):
        c = StatsCollector(rank=rank, num_workers=workers, config=Config(), model="resnet50",
                           arch="ps", on_window=out.append)
        c.set_layer_bytes([4096] * layers_n)
        for s in range(10):
            c.record_step(s, 32, 0.1, layer_backward_s=[1e-4] * layers_n)
    return out


def _send_us(window: Window, count: int) -> float:
    signer = Signer(secret=KEY, sender="worker0")
    t0 = time.perf_counter()
    for _ in range(count):
        signer.sign("report", {"window": window.to_dict()})
    return (time.perf_counter() - t0) / count * 1e6


def _coordinate_us(windows: list[Window], count: int, log_dir: Path) -> float:
    signers = [Signer(secret=KEY, sender=f"worker{w.rank}") for w in windows]
    verifier = Verifier(secret=KEY)
    config = Config()
    loop = TuningLoop(config=config, tuner=ScriptedTuner([config] * (count + 1)),
                      trigger=ThresholdTrigger(), decision_log=DecisionLog(log_dir / "d.jsonl"))
    frames = [[s.sign("report", {"window": w.to_dict()}) for s, w in zip(signers, windows,
                                                                         strict=True)]
              for _ in range(count)]
    t0 = time.perf_counter()
    for batch in frames:
        parsed = [Window.from_dict(verifier.verify(f).body["window"]) for f in batch]
        loop.on_observation(merge_windows(parsed))
    elapsed = (time.perf_counter() - t0) / count * 1e6
    loop.log.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--windows", type=int, default=2000)
    args = parser.parse_args()
    window_steps = Config().window_steps
    rows = []
    for layers_n in (0, 50, 161):
        for every in ((1,) if layers_n == 0 else (1, 10)):
            layers = list(np.linspace(1e-4, 1e-3, layers_n)) if layers_n else None
            sink: list[Window] = []
            collector = StatsCollector(rank=0, num_workers=8, config=Config(),
                                       model="resnet50", arch="ps", on_window=sink.append)
            collector.set_layer_bytes([4096] * layers_n)
            base = _per_step(_noop, args.steps, layers, every)
            cost = _per_step(collector.record_step, args.steps, layers, every)
            rows.append((layers_n, every, base, cost))
    print(f"1) record_step, {args.steps} steps per row, window_steps={window_steps}")
    print("layers  layer-times  empty-call-us  record_step-us")
    for layers_n, every, base, cost in rows:
        when = "-" if layers_n == 0 else ("every step" if every == 1 else f"1 in {every}")
        print(f"{layers_n:>6}  {when:>11}  {base:>13.2f}  {cost:>14.2f}")

    per_window = []
    with tempfile.TemporaryDirectory() as tmp:
        for layers_n in (50, 161):
            for workers in (2, 8):
                windows = _windows(layers_n, workers)
                send = _send_us(windows[0], args.windows)
                coordinate = _coordinate_us(windows, max(args.windows // workers, 50),
                                            Path(tmp))
                per_window.append((layers_n, workers, send, coordinate))
    print(f"\n2) per window ({args.windows} windows): worker send, rank 0 coordinate")
    print("layers  workers  send-us  coordinate-us")
    for layers_n, workers, send, coordinate in per_window:
        print(f"{layers_n:>6}  {workers:>7}  {send:>7.1f}  {coordinate:>13.1f}")

    print(f"\n3) rank 0 total per step = record_step (161 layers, sampled 1 in 10) + "
          f"(send + coordinate) / {window_steps}")
    record = next(cost for n, every, _, cost in rows if n == 161 and every == 10)
    print("workers  total-us" + "".join(f"  %of {t * 1e3:g}ms" for t in STEP_TIMES_S))
    for layers_n, workers, send, coordinate in per_window:
        if layers_n != 161:
            continue
        total = record + (send + coordinate) / window_steps
        shares = "".join(f"  {total / (t * 1e6) * 100:>8.3f}%" for t in STEP_TIMES_S)
        print(f"{workers:>7}  {total:>8.1f}{shares}")


if __name__ == "__main__":
    main()

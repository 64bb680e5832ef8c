"""Cost of statistics collection per training step (issue 6: must add under 1% to step time).

Times ``StatsCollector.record_step`` in a tight loop, side by side with an empty call of the
same signature (the floor of any per-step hook in Python), for a few layer counts, with
per-layer backward times given every step (worst case) or every 10th step (sampled, as the
TF adapter does). Window closing and building is included. Prints microseconds per step and
the share of typical step times.

    .venv/bin/python benchmarks/stats_bench.py [--steps 200000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from common.config import Config
from common.stats import StatsCollector, Window

STEP_TIMES_S = (0.01, 0.05, 0.2, 1.0)


def _noop(step: int, samples: int, step_time_s: float, *, layer_backward_s: object = None,
          bytes_up: int = 0, bytes_down: int = 0) -> None:
    return None


def _time(record: Callable[..., None], steps: int, layers: list[float] | None,
          every: int) -> float:
    t0 = time.perf_counter()
    for s in range(steps):
        record(s, 32, 0.1, layer_backward_s=layers if s % every == 0 else None,
               bytes_up=1_000_000, bytes_down=1_000_000)
    return (time.perf_counter() - t0) / steps * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    args = parser.parse_args()
    windows: list[Window] = []
    rows = []
    for layers_n in (0, 50, 161):
        for every in ((1,) if layers_n == 0 else (1, 10)):
            layers = list(np.linspace(1e-4, 1e-3, layers_n)) if layers_n else None
            collector = StatsCollector(rank=0, num_workers=8, config=Config(),
                                       model="resnet50", arch="ps",
                                       on_window=windows.append)
            collector.set_layer_bytes([4096] * layers_n)
            base = _time(_noop, args.steps, layers, every)
            cost = _time(collector.record_step, args.steps, layers, every)
            rows.append((layers_n, every, base, cost, cost - base))
            windows.clear()
    print(f"record_step cost, {args.steps} steps each, window_steps={Config().window_steps}")
    head = "layers  layer-times  empty-call-us  record_step-us  added-us"
    head += "".join(f"  %of {t * 1e3:g}ms" for t in STEP_TIMES_S)
    print(head)
    for layers_n, every, base, cost, added in rows:
        when = "-" if layers_n == 0 else ("every step" if every == 1 else f"1 in {every}")
        shares = "".join(f"  {cost / (t * 1e6) * 100:>9.4f}%" for t in STEP_TIMES_S)
        print(f"{layers_n:>6}  {when:>11}  {base:>13.2f}  {cost:>14.2f}  {added:>8.2f}{shares}")


if __name__ == "__main__":
    main()

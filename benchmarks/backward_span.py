"""Whether a dataset's layer times fit its runs: compute as the meta-network counts it over
native's measured step.

    .venv/bin/python benchmarks/backward_span.py [--data datasets/testbed_v5.npz]

The features take a step's compute as 1.5x the layers' backward time (forward as half of it,
``common.meta.reference_s``), so on a real run that figure cannot exceed native's step time by
much. Per testbed run this prints that ratio for the run's middle window as the tuner saw
it (``Dataset.as_deployed``): well above 1 means the layer times were overcounted. Seconds;
no framework needed.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from common.meta import Dataset
from common.tuners import NATIVE_BYTES


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="datasets/testbed_v5.npz")
    args = p.parse_args(argv)
    data = Dataset.load(args.data)
    print(f"{'run':<34} {'layers':>6} {'1.5 x backward / native step':>28}")
    for run in sorted(data.runs()):
        deployed = data.select_runs(run).as_deployed()
        j = deployed.num_jobs // 2
        job = deployed.job(j)
        rows = np.flatnonzero(deployed["sample_job"] == j)
        native = rows[deployed["partition_bytes"][rows] == NATIVE_BYTES]
        if not len(native):
            continue
        step_s = job.workers * job.batch_size / float(deployed["speed"][native[0]])
        ratio = 1.5 * math.fsum(job.layer_backward_s) / step_s
        print(f"{run.split('/')[0]:<34} {job.num_layers:>6} {ratio:>28.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

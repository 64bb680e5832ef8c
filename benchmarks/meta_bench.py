"""Meta-network: inference time over the whole candidate grid, and what it picks, as tables.

    .venv/bin/python benchmarks/meta_bench.py                 # the pretrained model
    .venv/bin/python benchmarks/meta_bench.py --model m.keras --repeat 50

0. Loading the model as a job's tuner does (NumPy weights, no Keras), then the same model in
   Keras (what a tuner that scored in Keras loaded): wall and CPU seconds, peak memory.
1. One inference over all 176 candidates of the default search space (features included),
   per shipped profile: the NumPy scorer as the tuner runs it (encoder once, head over the
   candidates), Keras' ``model.predict`` on the training model with the job tiled, and the
   whole scoring the tuner does once native is measured (native too, the anchor, the
   simulator's prior on the network's best: ``common.meta._prior.score``). Median and p90 of
   --repeat calls, measured side by side in one run (the machine is noisy).
2. Per profile and architecture (16 workers, 3 Gbit/s: a held-out bandwidth; PS with 4
   servers), simulated speeds: the configuration the model picks vs the grid's best, and P3's
   default (160 KiB, 1x). Simulated, not measured on the testbed.
3. One online adaptation as the coordinator runs it (the default ridge refit of the head, put
   in place in the tuner's copy of the model, background=False) on the windows of each shipped
   real testbed run (datasets/testbed_v4.npz): wall and CPU seconds, median of
   --adapt-repeat, after one.
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from common.config import Config
from common.meta import Dataset, MetaInput, MetaModel, encode_candidates, encode_job
from common.meta._features import Sample
from common.meta._prior import score
from common.meta._train import adapt_head
from common.sim import MODELS, Profile, get_profile, simulate
from common.tuners import NATIVE_BYTES, SearchSpace


def job_of(name: str, *, workers: int, arch: str, rate: float, servers: int = 1) -> MetaInput:
    p = get_profile(name)
    return MetaInput(layer_backward_s=tuple(x.backward_s for x in p.layers),
                     layer_bytes=tuple(x.nbytes for x in p.layers), workers=workers, arch=arch,
                     servers=servers, bandwidth_down_bps=rate, bandwidth_up_bps=rate,
                     model=name, batch_size=p.batch_size)


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    fn()
    fn()  # compile and warm up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    times.sort()
    return 1e3 * statistics.median(times), 1e3 * times[min(len(times) - 1, int(0.9 * repeat))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="model file (default: the pretrained model)")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--adapt-repeat", type=int, default=5)
    args = parser.parse_args()
    print("0. loading the model (wall s, CPU s, peak resident MiB of this process)")
    t, c = time.perf_counter(), time.process_time()
    model = MetaModel.load(args.model)
    print(f"{'NumPy':<12} {time.perf_counter() - t:>6.2f} {time.process_time() - c:>6.2f} "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:>7.0f}")
    t, c = time.perf_counter(), time.process_time()
    model.network.predict([np.zeros((1, *shape), np.float32) for shape in
                           [i.shape[1:] for i in model.network.inputs]], verbose=0)
    print(f"{'Keras':<12} {time.perf_counter() - t:>6.2f} {time.process_time() - c:>6.2f} "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:>7.0f}")
    grid = np.array(list(SearchSpace()))
    parts, credits = grid[:, 0], grid[:, 0] * grid[:, 1]

    print(f"\n1. one inference over {len(grid)} candidates (ms, median / p90 of {args.repeat}); "
          "as the tuner scores once native is measured: the NumPy inference with native, the "
          "anchor and the simulator's prior on the best")
    print(f"{'model':<12} {'NumPy':>14} {'model.predict':>14} {'as the tuner':>14}")
    with_native = (np.append(parts, NATIVE_BYTES), np.append(credits, NATIVE_BYTES))
    for name in MODELS:
        job = job_of(name, workers=16, arch="allreduce", rate=10e9)

        def scored(job: MetaInput = job) -> object:
            predicted = model.predict(job, *with_native)
            return score(job, *with_native, predicted, float(predicted[-1]))

        def naive(job: MetaInput = job) -> object:
            enc = encode_job(job, vocabulary=model.vocabulary)
            cand = encode_candidates(enc, parts, credits)
            n = len(cand)
            return model.network.predict([np.repeat(enc.sequence[None], n, 0),
                                          np.repeat(enc.static[None], n, 0), cand], verbose=0)

        cells = [timed(functools.partial(model.predict, job, parts, credits), args.repeat)]
        cells.append(timed(naive, max(5, args.repeat // 5)))
        cells.append(timed(scored, args.repeat))
        print(f"{name:<12} " + " ".join(f"{m:>6.1f} / {p:>5.1f}" for m, p in cells))

    print("\n2. simulated speed of the pick (16 workers, 3 Gbit/s, held out; PS: 4 servers)")
    print(f"{'model':<12} {'arch':<10} {'picked':>18} {'of best':>8} {'P3 of best':>10}")
    for name in MODELS:
        profile = get_profile(name)
        for arch in ("ps", "allreduce"):
            servers = 4 if arch == "ps" else 1
            job = job_of(name, workers=16, arch=arch, rate=3e9, servers=servers)
            pred = model.predict(job, parts, credits)

            def speed(p: int, c: int, arch: str = arch, servers: int = servers,
                      profile: Profile = profile) -> float:
                return simulate(profile, Config(partition_bytes=p, credit_bytes=c), workers=16,
                                arch=arch, servers=servers, bandwidth=3e9, trace=False).speed

            true = np.array([speed(int(p), int(c)) for p, c in zip(parts, credits, strict=True)])
            pick = int(np.argmax(pred))
            p3 = speed(160 * 1024, 160 * 1024)
            label = f"{parts[pick] >> 10} KiB x{grid[pick, 1]}"
            print(f"{name:<12} {arch:<10} {label:>18} {true[pick] / true.max():>8.1%} "
                  f"{p3 / true.max():>10.1%}")

    data = Dataset.load(os.path.join(os.path.dirname(__file__), "..", "datasets",
                                     "testbed_v4.npz"))
    print(f"\n3. one online adaptation (ridge) on a real run's windows (s, median of "
          f"{args.adapt_repeat})")
    print(f"{'run':<24} {'windows':>7} {'wall':>6} {'cpu':>6}")
    mine = model.with_head(model.head())  # the tuner's own copy, adapted in place
    for run in data.runs()[::3]:
        r = data.select_runs(run)
        samples = [Sample(r.job(int(j)), int(p), int(c), float(v)) for j, p, c, v in
                   zip(r["sample_job"], r["partition_bytes"], r["credit_bytes"], r["speed"],
                       strict=True)]
        mine.take_head(adapt_head(mine, samples, background=False).result())
        walls, cpus = [], []
        for _ in range(args.adapt_repeat):
            t, c = time.perf_counter(), time.process_time()
            mine.take_head(adapt_head(mine, samples, background=False).result())
            walls.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
        print(f"{run.split('/')[0]:<24} {len(samples):>7} {statistics.median(walls):>6.2f} "
              f"{statistics.median(cpus):>6.2f}")


if __name__ == "__main__":
    main()

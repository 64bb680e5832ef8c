"""MXNet parameter server: native dist_sync vs AutoByte, side by side on shaped links.

For every link rate and model, three jobs run back to back on one testbed (2 workers on their
own hosts, scheduler + 1 server on a third; Testbed needs root, else loopback with a warning):

  native   kvstore='dist_sync' (Trainer default: optimizer on the server)
  autobyte kvstore=AutoByte at a fixed configuration (--config RATE=PARTITION:CREDIT)
  off      AutoByte with scheduling=False (whole tensors, no credit: should equal native)

The models are gluon.model_zoo architectures narrowed so two workers sharing a 2-core CPU
can train them (see MODELS); inputs are 32x32 (ResNet, VGG) or 64x64 (AlexNet), 10 classes.
Prints one table: median step time per job (of --steps after --warmup) and the ratios.

    sudo .venv/bin/python benchmarks/mx_bench.py [--models resnet18s,vgg16s,alexnets]
        [--rates 100mbit,1gbit] [--steps 8] [--warmup 2] [--batch 16] [--rounds 1]

MXBENCH_DUMP=1 makes AutoByte workers print one step's statistics (plan head, gradient-ready
times, block timeline), and the driver shows them, for diagnosis.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

RESULT = "MXBENCH_RESULT "


# --- worker side (every launched role runs this file) ---------------------------------------

def build_model(name: str) -> tuple[Any, tuple[int, ...]]:
    from mxnet import gluon
    from mxnet.gluon.model_zoo import vision

    if name == "resnet18s":  # ResNet-18 (model_zoo ResNetV1, BasicBlock [2,2,2,2]), width/4
        net = vision.ResNetV1(vision.BasicBlockV1, [2, 2, 2, 2], [16, 16, 32, 64, 128],
                              classes=10, thumbnail=True)
        return net, (3, 32, 32)
    if name == "vgg16s":  # VGG-16 layout (13 conv + 3 dense), convs width/4, dense 4096 -> 512
        net = gluon.nn.HybridSequential()
        for count, width in zip([2, 2, 3, 3, 3], [16, 32, 64, 128, 128], strict=True):
            for _ in range(count):
                net.add(gluon.nn.Conv2D(width, 3, padding=1, activation="relu"))
            net.add(gluon.nn.MaxPool2D(2))
        net.add(gluon.nn.Dense(512, activation="relu"), gluon.nn.Dense(512, activation="relu"),
                gluon.nn.Dense(10))
        return net, (3, 32, 32)
    if name == "alexnets":  # AlexNet layout (5 conv + 3 dense), convs width/2, dense 4096 -> 1024
        net = gluon.nn.HybridSequential()
        net.add(gluon.nn.Conv2D(32, 11, strides=4, padding=2, activation="relu"),
                gluon.nn.MaxPool2D(3, 2),
                gluon.nn.Conv2D(96, 5, padding=2, activation="relu"), gluon.nn.MaxPool2D(3, 2),
                gluon.nn.Conv2D(192, 3, padding=1, activation="relu"),
                gluon.nn.Conv2D(128, 3, padding=1, activation="relu"),
                gluon.nn.Conv2D(128, 3, padding=1, activation="relu"), gluon.nn.MaxPool2D(3, 2),
                gluon.nn.Flatten(), gluon.nn.Dense(1024, activation="relu"),
                gluon.nn.Dense(1024, activation="relu"), gluon.nn.Dense(10))
        return net, (3, 64, 64)
    raise SystemExit(f"unknown model {name!r}; choose from resnet18s, vgg16s, alexnets")


def worker(args: argparse.Namespace) -> int:
    import numpy as np

    if "bool" not in np.__dict__:
        np.bool = np.bool_  # type: ignore[attr-defined]
    if os.environ.get("DMLC_ROLE") in ("server", "scheduler"):
        import mxnet  # noqa: F401  (runs the node and exits)
        return 0
    import mxnet as mx
    from mxnet import autograd, gluon

    import autobyte_mx

    mx.random.seed(1)
    net, shape = build_model(args.model)
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())
    net.hybridize(static_alloc=True, static_shape=True)
    kv: Any = "dist_sync"
    if args.kv == "autobyte":
        kv = autobyte_mx.AutoByte(partition_bytes=args.partition, credit_bytes=args.credit)
    elif args.kv == "off":
        kv = autobyte_mx.AutoByte(scheduling=False)
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01}, kvstore=kv)
    rng = np.random.RandomState(int(os.environ.get("DMLC_WORKER_ID", "0")))
    x = mx.nd.array(rng.randn(args.batch, *shape).astype("float32"))
    y = mx.nd.array(rng.randint(0, 10, args.batch))
    lossf = gluon.loss.SoftmaxCrossEntropyLoss()
    marks = []
    for _ in range(args.warmup + args.steps):
        with autograd.record():
            loss = lossf(net(x), y)
        loss.backward()
        trainer.step(args.batch)
        loss.wait_to_read()  # this step's forward/backward; its communication may still run
        marks.append(time.perf_counter())
    mx.nd.waitall()
    marks.append(time.perf_counter())
    times = np.diff(marks[args.warmup:])
    out: dict[str, Any] = {"median_s": float(np.median(times)), "mean_s": float(times.mean()),
                           "params_bytes": int(sum(p.data().size * 4 for p in
                                                   net.collect_params().values()))}
    if isinstance(trainer._kvstore, autobyte_mx.AutoByte):
        stats = trainer._kvstore.step_stats()
        out["stats_s_per_step"] = (statistics.mean(s.stats_s for s in stats) if stats else 0.0)
        if os.environ.get("MXBENCH_DUMP") and stats:
            last = stats[-2].to_dict()
            print("DUMP", json.dumps({"head": trainer._kvstore._head_bytes,
                                      "duration": last["duration_s"],
                                      "ready": last["grad_ready_s"],
                                      "chunks": [(c["tensor"], c["index"], c["nbytes"],
                                                  round(c["ready"] * 1e3, 1),
                                                  round(c["start"] * 1e3, 1),
                                                  round(c["done"] * 1e3, 1))
                                                 for c in last["chunks"]]}), flush=True)
    print(RESULT + json.dumps(out), flush=True)
    return 0


# --- driver side -----------------------------------------------------------------------------

def run_job(testbed: Any, model: str, kind: str, partition: str, credit: str,
            args: argparse.Namespace) -> dict[str, Any]:
    from common.launch import launch

    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", model, "--kv", kind,
           "--partition", partition, "--credit", credit, "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--batch", str(args.batch)]
    env = {"MXBENCH_DUMP": os.environ.get("MXBENCH_DUMP", ""), "OMP_NUM_THREADS": "1",
           "MXNET_EXEC_BULK_EXEC_TRAIN": "0", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.getcwd(), "AUTOBYTE_TUNER": "none"}  # fixed configurations
    result = launch(framework="mxnet", command=cmd, workers=2, servers=1, env=env,
                    testbed=testbed, timeout=args.timeout, stream=None)
    if not result.ok:
        tail = {n: p.output[-1500:] for n, p in result.processes.items()}
        raise SystemExit(f"{model}/{kind} failed: {result.failed} rc={result.returncode} {tail}")
    rows = [json.loads(line[len(RESULT):])
            for p in result.processes.values() for line in p.output.splitlines()
            if line.startswith(RESULT)]
    if os.environ.get("MXBENCH_DUMP"):
        for name, p in result.processes.items():
            for line in p.output.splitlines():
                if line.startswith("DUMP"):
                    print(f"  {model}/{kind} {name} {line}", flush=True)
    return {"median_s": max(r["median_s"] for r in rows),  # the slower worker sets the pace
            "params_bytes": rows[0]["params_bytes"],
            "stats_s": max(r.get("stats_s_per_step", 0.0) for r in rows)}


def driver(args: argparse.Namespace) -> int:
    from common.testbed import Testbed
    from common.units import format_bytes

    configs = dict(item.split("=", 1) for item in args.config.split(","))
    rates = args.rates.split(",")
    models = args.models.split(",")
    results: dict[tuple[str, str, str], list[float]] = {}
    extra: dict[tuple[str, str], dict[str, Any]] = {}
    with Testbed(hosts=3, rate=rates[0]) as tb:
        print(tb.describe(), flush=True)
        for _ in range(args.rounds):
            for rate in rates:
                tb.set_rate(rate)
                partition, credit = configs.get(rate, "512KiB:2MiB").split(":")
                for model in models:
                    for kind in ("native", "autobyte", "off"):
                        t0 = time.time()
                        r = run_job(tb, model, kind, partition, credit, args)
                        results.setdefault((rate, model, kind), []).append(r["median_s"])
                        extra.setdefault((rate, model), {}).update(
                            bytes=r["params_bytes"], config=f"{partition}/{credit}")
                        if kind == "autobyte":
                            extra[(rate, model)]["stats_s"] = r["stats_s"]
                        print(f"  {rate:>7} {model:<10} {kind:<8} {r['median_s'] * 1e3:8.1f} "
                              f"ms/step  ({time.time() - t0:.0f} s)", flush=True)
    print()
    print(f"{'rate':>7} {'model':<10} {'grads':>9} {'config':>13} {'native':>9} {'autobyte':>9} "
          f"{'off':>9} {'native/ab':>9} {'off/native':>10} {'stats/step':>10}")
    for rate in rates:
        for model in models:
            nat, ab, off = (statistics.median(results[(rate, model, k)])
                            for k in ("native", "autobyte", "off"))
            info = extra[(rate, model)]
            print(f"{rate:>7} {model:<10} {format_bytes(info['bytes']):>9} "
                  f"{info['config']:>13} {nat * 1e3:7.1f}ms {ab * 1e3:7.1f}ms {off * 1e3:7.1f}ms "
                  f"{nat / ab:8.2f}x {off / nat:9.3f}x {info.get('stats_s', 0) * 1e6:8.0f}us")
    print("\nstep time = median over steps after warmup, slower worker; native/ab > 1 means "
          "AutoByte is faster; off/native ~ 1.00 means scheduling-off costs nothing")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kv", default="native", help=argparse.SUPPRESS)
    ap.add_argument("--model", default="resnet18s", help=argparse.SUPPRESS)
    ap.add_argument("--partition", default="512KiB", help=argparse.SUPPRESS)
    ap.add_argument("--credit", default="2MiB", help=argparse.SUPPRESS)
    ap.add_argument("--models", default="resnet18s,vgg16s,alexnets")
    ap.add_argument("--rates", default="100mbit,1gbit")
    ap.add_argument("--config", default="100mbit=128KiB:1MiB,1gbit=512KiB:4MiB",
                    help="AutoByte's fixed configuration per rate: RATE=PARTITION:CREDIT,...")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    return worker(args) if args.worker else driver(args)


if __name__ == "__main__":
    sys.exit(main())

"""Worker program for the multi-process MXNet tests (every launched role runs it).

Trains a small Gluon model on per-rank synthetic data with kvstore 'autobyte' or native
'dist_sync' and writes the final parameters to OUT/params_rank<r>.npz plus a JSON summary.
Servers and the scheduler run inside ``import mxnet`` and exit there. Live tuning follows
AUTOBYTE_TUNER (the tests' JOB_ENV turns it off); ``--lead-s``, ``--explore-budget``,
``--dead-after`` and ``--decision-log`` tune the control plane, ``--mark`` lets the test act at
a step (rank 0 writes OUT/mark_<step> when it gets there).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import sys
import time

import numpy as np

if "bool" not in np.__dict__:
    np.bool = np.bool_  # type: ignore[attr-defined]
os.environ.setdefault("MXNET_EXEC_BULK_EXEC_TRAIN", "0")

if os.environ.get("DMLC_ROLE") in ("server", "scheduler"):
    if os.environ.get("MXTEST_SERVER_PIDFILE") and os.environ.get("DMLC_ROLE") == "server":
        with open(os.environ["MXTEST_SERVER_PIDFILE"], "w") as f:
            f.write(str(os.getpid()))
    from autobyte_mx._compat import import_mxnet

    import_mxnet()  # runs the node (with AutoByte's peer watch), then exits
    sys.exit(0)

import mxnet as mx
from mxnet import autograd, gluon

import autobyte_mx
from common.config import Config


def build(model: str) -> gluon.HybridBlock:
    net = gluon.nn.HybridSequential()
    if model == "cnn":
        net.add(gluon.nn.Conv2D(8, 3, activation="relu"), gluon.nn.MaxPool2D(2),
                gluon.nn.Conv2D(16, 3, activation="relu"), gluon.nn.MaxPool2D(2),
                gluon.nn.Flatten(), gluon.nn.Dense(256, activation="relu"), gluon.nn.Dense(10))
    elif model == "wide":  # 0.76 MB of gradients, one 640 KB tensor: splitting it pays
        net.add(gluon.nn.Dense(400, activation="relu"), gluon.nn.Dense(400, activation="relu"),
                gluon.nn.Dense(10))
    else:
        net.add(gluon.nn.Dense(300, activation="relu"), gluon.nn.Dense(200, activation="relu"),
                gluon.nn.Dense(10))
    return net


def tuning_options(a: argparse.Namespace) -> dict[str, object]:
    """TuningAgent keywords from the command line (AutoByte(tuning=...))."""
    options: dict[str, object] = {}
    if a.lead_s is not None:
        options["lead_s"] = a.lead_s
    if a.dead_after is not None:
        options["dead_after_s"] = a.dead_after
    if a.decision_log:
        options["decision_log"] = a.decision_log
    if a.explore_budget is not None:
        from common.trigger import create as create_trigger

        options["trigger"] = create_trigger("threshold", config=Config.from_env(),
                                            explore_budget=a.explore_budget)
    return options


def checks(trainer: gluon.Trainer, out: str, rank: int) -> dict[str, object]:
    """Trainer state save/load, the plain kvstore API, and misuse errors (same on all ranks)."""
    from common.errors import ConfigError, UnsupportedError

    res: dict[str, object] = {}
    path = os.path.join(out, f"states_rank{rank}")
    if trainer._update_on_kvstore:  # the state is on the servers: rank 0 saves it
        try:
            trainer.save_states(path)
            res["save_states"] = "no error"
        except ConfigError as e:
            res["save_states"] = str(e)
    else:
        trainer.save_states(path)
        trainer.load_states(path)
        res["states_roundtrip"] = True
    kv = trainer._kvstore
    a = mx.nd.ones((3, 1000)) * (rank + 1)
    kv.init("extra", mx.nd.zeros((3, 1000)))
    kv.push("extra", a)
    got = mx.nd.zeros((3, 1000))
    kv.pull("extra", out=got)
    res["push_pull_sum"] = float(got.asnumpy()[0, 0])
    b = mx.nd.ones((5,)) * (rank + 1)
    kv.init(["k1", "k2"], [mx.nd.zeros((5,)), mx.nd.zeros((5,))])
    o1, o2 = mx.nd.zeros((5,)), mx.nd.zeros((5,))
    kv.pushpull(["k1", "k2"], [b, b * 2], out=[o1, o2])
    res["list_pushpull"] = [float(o1.asnumpy()[0]), float(o2.asnumpy()[0])]
    pulled = mx.nd.zeros((5,))
    kv.pull("k1", out=pulled)  # the sum, not this worker's gradient
    res["pull_after_pushpull"] = float(pulled.asnumpy()[0])
    # two devices of one worker: summed here, then over workers; both outputs get the sum
    kv.pushpull("k1", [b, b * 3], out=[o1, o2])
    res["two_devices_pushpull"] = [float(o1.asnumpy()[0]), float(o2.asnumpy()[0])]
    errors = {}
    sparse = mx.nd.sparse.zeros("row_sparse", (4, 2))
    for name, call, exc in [
        ("sparse", lambda: kv.pushpull("k1", sparse), UnsupportedError),
        ("shapes_differ", lambda: kv.pushpull("k1", [b, mx.nd.ones((4,))]), ConfigError),
        ("unknown_key", lambda: kv.pushpull("nope", b), ConfigError),
        ("row_sparse_pull", lambda: kv.row_sparse_pull("k1", out=b, row_ids=b), UnsupportedError),
        ("set_optimizer", lambda: kv.set_optimizer(mx.optimizer.LAMB()), UnsupportedError),
    ]:
        try:
            call()
            errors[name] = "no error"
        except exc as e:
            errors[name] = str(e)
    res["errors"] = errors
    res["registered"] = "autobyte" in mx.kv.KVStoreBase.kv_registry
    return res


def halve_states(trainer: gluon.Trainer, out: str, rank: int) -> dict[str, int]:
    """Save the optimizer state, then load it back halved, so a lost load shows in the
    weights. With the optimizer on the servers rank 0 saves (one state for every worker);
    with it on the workers every rank saves its own. Writes the state saved as
    ``states_rank{rank}.npz``; returns the update counts saved with the optimizer."""
    saved = os.path.join(out, f"states_at_rank{rank}")
    if not trainer._update_on_kvstore or rank == 0:
        trainer.save_states(saved)
    if trainer._update_on_kvstore:
        trainer._kvstore.barrier()
        saved = os.path.join(out, "states_at_rank0")
    with open(saved, "rb") as f:
        states, optimizer = pickle.loads(f.read())
    flat = {f"{k}_{i}": part.asnumpy() for k, state in states.items()
            for i, part in enumerate(state if isinstance(state, tuple) else [state])}
    np.savez(os.path.join(out, f"states_rank{rank}.npz"), **flat)
    halved = {k: tuple(p * 0.5 for p in v) if isinstance(v, tuple) else v * 0.5
              for k, v in states.items()}
    path = os.path.join(out, f"halved_rank{rank}")
    with open(path, "wb") as f:
        f.write(pickle.dumps((halved, optimizer)))
    trainer.load_states(path)
    return {str(k): int(v) for k, v in optimizer._index_update_count.items()}


def emulate_two_bit(trainer: gluon.Trainer, threshold: np.float32) -> None:
    """dist_sync's 2-bit compression, done here: each tensor's gradient quantized whole, as
    MXNet's quantize kernel does (residual += gradient; at or above the threshold send it and
    subtract it, at or below -threshold send that and add it, else send 0), then summed in one
    pushpull. The native store's own compression is no reference: its pushpull (which the
    Trainer calls) refuses it, and with a push and a separate pull into another array native
    ``dist_sync`` gave another result in about 1 run of 7 under CPU contention with 2 servers
    (this emulation too, before it used pushpull: 2 of 14 runs; AutoByte's push and pull of
    one buffer: 0 of 14), and a pushpull into the gradients, not the array pushed, also with
    one server. So the sum comes back into the array pushed, as AutoByte's does, and is copied
    from there."""
    residuals: dict[int, np.ndarray] = {}

    def allreduce_grads() -> None:
        for i, param in enumerate(trainer._params):
            if param.grad_req == "null":
                continue
            grads = param.list_grad()
            total = sum(g.asnumpy() for g in grads[1:]) + grads[0].asnumpy()
            r = residuals.setdefault(i, np.zeros_like(total))
            r += total
            up, down = r >= threshold, r <= -threshold
            r[up] -= threshold
            r[down] += threshold
            sent = mx.nd.array(np.where(up, threshold, np.where(down, -threshold,
                                                               np.float32(0))))
            if trainer._update_on_kvstore:
                trainer._kvstore.pushpull(i, sent, out=param.list_data(), priority=-i)
                continue
            trainer._kvstore.pushpull(i, sent, out=sent, priority=-i)
            for grad in grads:
                sent.copyto(grad)

    trainer._allreduce_grads = allreduce_grads


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kv", default="autobyte")
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn", "wide"])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--partition", default=None)
    ap.add_argument("--credit", default=None)
    ap.add_argument("--scheduling", default=None)
    ap.add_argument("--switch", action="append", default=[],
                    help="STEP:PARTITION:CREDIT:SCHEDULING, proposed by rank 0 after STEP")
    ap.add_argument("--hybridize", default="static", choices=["no", "plain", "static"])
    ap.add_argument("--freeze-first", action="store_true")
    ap.add_argument("--kill-server-at", type=int, default=-1, help="SIGSTOP the server then")
    ap.add_argument("--freeze-rank1-at", type=int, default=-1)
    ap.add_argument("--kill-rank1-at", type=int, default=-1, help="rank 1 SIGKILLs itself then")
    ap.add_argument("--hard", action="store_true",
                    help="--kill-server-at sends SIGKILL, not SIGSTOP")
    ap.add_argument("--partition-on-rank1", default=None, help="misconfigure rank 1")
    ap.add_argument("--window-on-rank1", type=int, default=None,
                    help="give rank 1 windows of this many steps")
    ap.add_argument("--checks", action="store_true", help="API and misuse checks after training")
    ap.add_argument("--states-at", type=int, default=-1,
                    help="after this step, save the optimizer state and load it halved")
    ap.add_argument("--sample-every", type=int, default=2,
                    help="steps between steps timed per tensor (the tests' default: 2)")
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "lamb"])
    ap.add_argument("--update-on-kvstore", default=None, choices=["0", "1"],
                    help="the Trainer's update_on_kvstore (default: its own choice)")
    ap.add_argument("--compression", default=None,
                    help="2-bit gradient compression's threshold (the Trainer's "
                         "compression_params), or a whole compression_params JSON")
    ap.add_argument("--devices", type=int, default=1,
                    help="CPU contexts per worker, each training on its share of the batch")
    ap.add_argument("--lead-s", type=float, default=None)
    ap.add_argument("--dead-after", type=float, default=None)
    ap.add_argument("--explore-budget", type=int, default=None)
    ap.add_argument("--decision-log", default=None)
    ap.add_argument("--mark", type=int, action="append", default=[])
    ap.add_argument("--brief", action="store_true",
                    help="summary steps without chunks (long runs)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    mx.random.seed(7)
    np.random.seed(7)
    net = build(a.model)
    ctx = [mx.cpu(i) for i in range(a.devices)]
    net.initialize(mx.init.Xavier(), ctx=ctx)
    if a.hybridize == "static":
        net.hybridize(static_alloc=True, static_shape=True)
    elif a.hybridize == "plain":
        net.hybridize()
    if a.freeze_first:
        net[0].collect_params().setattr("grad_req", "null")
    kv: object = a.kv
    rank = int(os.environ["DMLC_WORKER_ID"])
    if a.kv == "autobyte":
        part = a.partition_on_rank1 if rank == 1 and a.partition_on_rank1 else a.partition
        window = a.window_on_rank1 if rank == 1 else None
        opts = {k: v for k, v in (("partition_bytes", part), ("credit_bytes", a.credit),
                                  ("scheduling", a.scheduling), ("window_steps", window))
                if v is not None}
        kv = autobyte_mx.AutoByte(model_name=a.model, tuning=tuning_options(a),
                                  sample_every=a.sample_every, **opts)
        kv.expect_steps(a.steps)  # as a user who knows the job's length: no decision past it
    elif a.kv == "autobyte-env":  # the plain string path: kvstore='autobyte', knobs from env
        kv = "autobyte"
    hyper: dict[str, float] = {"learning_rate": 0.05, "wd": 1e-4}
    if a.optimizer == "sgd":
        hyper["momentum"] = 0.9
    uok = None if a.update_on_kvstore is None else a.update_on_kvstore == "1"
    compression = None
    if a.compression is not None:
        compression = json.loads(a.compression) if a.compression.startswith("{") else \
            {"type": "2bit", "threshold": float(a.compression)}
    emulate = compression is not None and a.kv == "dist_sync"
    trainer = gluon.Trainer(net.collect_params(), a.optimizer, hyper, kvstore=kv,
                            update_on_kvstore=uok,
                            compression_params=None if emulate else compression)
    if emulate:
        assert compression is not None
        emulate_two_bit(trainer, np.float32(compression["threshold"]))
    rng = np.random.RandomState(100 + rank)
    shape = (a.batch, 1, 28, 28) if a.model == "cnn" else (a.batch, 64)
    xs = [mx.nd.array(rng.randn(*shape).astype("float32")) for _ in range(4)]
    ys = [mx.nd.array(rng.randint(0, 10, a.batch)) for _ in range(4)]
    lossf = gluon.loss.SoftmaxCrossEntropyLoss()
    switches = {int(s.split(":")[0]): s.split(":")[1:] for s in a.switch}
    os.makedirs(a.out, exist_ok=True)
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    for step in range(a.steps):
        x = gluon.utils.split_and_load(xs[step % 4], ctx)
        y = gluon.utils.split_and_load(ys[step % 4], ctx)
        with autograd.record():
            losses = [lossf(net(xi), yi) for xi, yi in zip(x, y, strict=True)]
        autograd.backward(losses)
        trainer.step(a.batch)
        if step in switches and isinstance(trainer._kvstore, autobyte_mx.AutoByte):
            p, c, s = switches[step]
            trainer._kvstore.reconfigure(Config(partition_bytes=p, credit_bytes=c,
                                                scheduling=s == "1"))
        if step == a.states_at:
            counts = halve_states(trainer, a.out, rank)
        if step in a.mark and rank == 0:
            with open(os.path.join(a.out, f"mark_{step}"), "w") as f:
                f.write(str(time.time()))
        if step == a.freeze_rank1_at and rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        if step == a.kill_rank1_at and rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == a.kill_server_at and rank == 0:
            with open(os.environ["MXTEST_SERVER_PIDFILE"]) as f:
                os.kill(int(f.read()), signal.SIGKILL if a.hard else signal.SIGSTOP)
    mx.nd.waitall()
    elapsed = time.perf_counter() - t0
    params = {k: v.data(ctx[0]).asnumpy() for k, v in net.collect_params().items()}
    devices_equal = all(np.array_equal(d.asnumpy(), params[k])
                        for k, v in net.collect_params().items() for d in v.list_data())
    np.savez(os.path.join(a.out, f"params_rank{rank}.npz"), **params)
    summary: dict[str, object] = {"rank": rank, "elapsed": elapsed,
                                  "kv": str(type(trainer._kvstore)),
                                  "update_on_kvstore": bool(trainer._update_on_kvstore),
                                  "devices_equal": devices_equal}
    if a.states_at >= 0:
        summary["update_counts"] = counts
    store = trainer._kvstore
    if a.checks:
        summary["checks"] = checks(trainer, a.out, rank)
    if isinstance(store, autobyte_mx.AutoByte):
        summary["training_stats_cost_s"] = store.stats_cost_s  # the per-step feed's share
        stats = store.step_stats()
        summary["config"] = store.config.to_dict()
        summary["steps"] = [
            {"step": s.step, "config": s.config.to_dict(), "duration_s": s.duration_s}
            if a.brief else s.to_dict() for s in stats]
        summary["stats_cost_s"] = store.stats_cost_s
        agent = store.tuning
        hosted = agent.coordinator is not None
        store.barrier()
        store.close()
        # after close: the link thread has stopped, so its verdict agrees with what it logged
        summary["tuning"] = {"enabled": agent.enabled, "why_disabled": agent.why_disabled,
                             "coordinator_alive": agent.coordinator_alive, "hosted": hosted}
    with open(os.path.join(a.out, f"summary_rank{rank}.json"), "w") as f:
        json.dump(summary, f)
    print("DONE", rank, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

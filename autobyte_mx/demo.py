"""One process of ``autobyte demo``'s MXNet job: a small CNN trained with Gluon's Trainer on
kvstore 'autobyte' (run by ``autobyte launch``; the scheduler and server roles run inside
``import mxnet`` and exit there).

The knobs come from AUTOBYTE_* variables. Rank 0 prints a progress record per window
(``common.progress``); every worker prints a ``done`` record with a checksum of its
parameters, which must agree.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("MXNET_EXEC_BULK_EXEC_TRAIN", "0")  # gradients ready per layer

from autobyte_mx._compat import import_mxnet

if os.environ.get("DMLC_ROLE") in ("server", "scheduler"):
    import_mxnet()  # runs the node, then exits
    sys.exit(0)

import numpy as np

from common.progress import emit, worker_args

mx = import_mxnet()
import autobyte_mx  # noqa: E402

CLASSES = 10


def build_model() -> Any:
    """The same shape as autobyte_tf.demo's: about 0.33 M parameters (1.3 MB of gradients)."""
    nn = mx.gluon.nn
    net = nn.HybridSequential()
    net.add(nn.Conv2D(16, 3, activation="relu"), nn.MaxPool2D(2),
            nn.Conv2D(32, 3, activation="relu"), nn.MaxPool2D(2),
            nn.Flatten(), nn.Dense(256, activation="relu"), nn.Dense(CLASSES))
    return net


def main(argv: list[str] | None = None) -> None:
    args = worker_args(argv, __doc__)
    mx.random.seed(1)
    np.random.seed(1)
    net = build_model()
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())  # type: ignore[attr-defined]
    net.hybridize(static_alloc=True, static_shape=True)  # type: ignore[attr-defined]
    store = autobyte_mx.AutoByte(model_name="demo_cnn")
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd",  # type: ignore[attr-defined]
                               {"learning_rate": 0.01, "momentum": 0.9}, kvstore=store)
    rank, workers = store.rank, store.num_workers
    rng = np.random.default_rng(rank)
    xs = [mx.nd.array(rng.normal(size=(args.batch, 1, 28, 28)).astype("float32"))
          for _ in range(8)]
    ys = [mx.nd.array(rng.integers(0, CLASSES, args.batch)) for _ in range(8)]
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    tuning = store.tuning
    emit("start", framework="mxnet", rank=rank, workers=workers, steps=args.steps,
         config=store.config.describe(), tuning=tuning.enabled or tuning.why_disabled)
    times: list[float] = []
    began = time.perf_counter()
    for step in range(1, args.steps + 1):
        x, y = xs[step % 8], ys[step % 8]
        with mx.autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(args.batch)
        loss.wait_to_read()  # this step's compute is done (its communication overlaps on)
        now = time.perf_counter()
        times.append(now - began)
        began = now
        if rank == 0 and step % store.config.window_steps == 0:
            emit("progress", step=step, samples_per_s=args.batch * workers /
                 statistics.median(times), config=store.config.describe())
            times.clear()
    mx.nd.waitall()
    checksum = float(sum(np.sum(p.data().asnumpy(), dtype=np.float64)
                         for p in net.collect_params().values()))  # type: ignore[attr-defined]
    emit("done", rank=rank, steps=store.step, config=store.config.describe(),
         checksum=checksum)
    store.barrier()
    store.close()


if __name__ == "__main__":
    main()

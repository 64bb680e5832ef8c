"""One worker of the adapter contract: the same script, the same checks and the same switches on
either adapter (``contract_worker.py tensorflow|mxnet``), so what differs between the runs is the
framework alone. Prints one ``RESULT {json}`` line.

Each framework supplies how to make its adapter, one training step and its weights; the rest is
the contract: knobs from keywords, clear errors for bad input, rank 0's switches taken by every
worker at one step (to a fused plan, to native and back), statistics of the windows trained,
``close`` twice.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

START = {"partition_bytes": "4KiB", "credit_bytes": "8KiB"}
WINDOW = 2
STEPS = 16
# after the step given, rank 0 asks for a configuration (rank 1 asks for another, ignored)
SWITCHES = {2: {"partition_bytes": "16KiB", "credit_bytes": "32KiB"},
            6: {"scheduling": False},
            10: {"scheduling": True, **START}}
IGNORED = {"partition_bytes": "64KiB", "credit_bytes": "64KiB"}
RANK = int(os.environ.get("AUTOBYTE_RANK", "0"))


def errors(adapter: Any) -> dict[str, str]:
    """Each bad request's message (rank 0 and rank 1 alike: misuse is refused everywhere)."""
    from common.errors import ConfigError

    attempts: dict[str, Callable[[], object]] = {
        "partition": lambda: adapter.reconfigure(partition_bytes=-1),
        "unknown": lambda: adapter.reconfigure(partiton_bytes=4096),
        "steps": lambda: adapter.expect_steps(-3),
    }
    said = {}
    for name, attempt in attempts.items():
        try:
            attempt()
            said[name] = "no error"
        except ConfigError as exc:
            said[name] = str(exc)
    return said


def contract(make: Callable[..., Any], train: Callable[[Any, Callable[[int], None]], None],
             weights: Callable[[], list[np.ndarray]]) -> dict[str, Any]:
    adapter = make(window_steps=WINDOW, tuner="none", **START)
    result: dict[str, Any] = {"rank": RANK, "start": adapter.config.describe(),
                              "errors": errors(adapter), "configs": []}

    def after_step(step: int) -> None:
        result["configs"].append([adapter.step, adapter.config.describe()])
        if step in SWITCHES:
            adapter.reconfigure(**(SWITCHES[step] if RANK == 0 else IGNORED))

    train(adapter, after_step)
    stats = adapter.statistics()
    result["stats"] = {"type": type(stats).__name__, "steps": stats.steps,
                       "config": stats.config.describe()}
    result["weights"] = float(sum(np.float64(np.abs(w).sum()) for w in weights()))
    adapter.close()
    adapter.close()
    return result


def tensorflow() -> dict[str, Any]:
    import keras

    import autobyte_tf

    keras.utils.set_random_seed(0)
    holder: dict[str, Any] = {}

    def make(**options: Any) -> Any:
        holder["strategy"] = autobyte_tf.AutoByteStrategy(**options)
        with holder["strategy"].scope():
            holder["model"] = keras.Sequential([
                keras.Input((16,)), keras.layers.Dense(64, activation="relu"),
                keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)])
            holder["model"].compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
        return holder["strategy"]

    def train(strategy: Any, after_step: Callable[[int], None]) -> None:
        rng = np.random.default_rng(RANK)
        x = rng.normal(size=(8 * STEPS, 16)).astype("float32")
        y = x.sum(axis=1, keepdims=True)

        class After(keras.callbacks.Callback):  # type: ignore[misc]
            def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
                after_step(batch + 1)

        holder["model"].fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0,
                            callbacks=[After()])

    return contract(make, train, lambda: [w.numpy() for w in holder["model"].weights])


def mxnet() -> dict[str, Any]:
    from autobyte_mx._compat import import_mxnet

    mx = import_mxnet()  # MXNet 1.9.1, with the numpy.bool it needs
    import autobyte_mx

    autograd, gluon = mx.autograd, mx.gluon

    mx.random.seed(0)
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(64, activation="relu"), gluon.nn.Dense(32, activation="relu"),
            gluon.nn.Dense(1))
    net.initialize(mx.init.Xavier(), ctx=mx.cpu())

    def train(store: Any, after_step: Callable[[int], None]) -> None:
        trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01},
                                kvstore=store)
        rng = np.random.default_rng(RANK)
        loss = gluon.loss.L2Loss()
        for step in range(1, STEPS + 1):
            x = mx.nd.array(rng.normal(size=(8, 16)).astype("float32"))
            with autograd.record():
                out = loss(net(x), x.sum(axis=1, keepdims=True))
            out.backward()
            trainer.step(8)
            after_step(step)
        mx.nd.waitall()

    return contract(autobyte_mx.AutoByte, train,
                    lambda: [p.data().asnumpy() for p in net.collect_params().values()])


if __name__ == "__main__":
    framework = sys.argv[1]
    if framework == "mxnet" and os.environ.get("DMLC_ROLE") in ("server", "scheduler"):
        from autobyte_mx._compat import import_mxnet

        import_mxnet()  # runs the node, then exits
        sys.exit(0)
    run = {"tensorflow": tensorflow, "mxnet": mxnet}[framework]
    print("RESULT " + json.dumps(run()), flush=True)

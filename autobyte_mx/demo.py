"""One process of ``autobyte demo``'s MXNet job: a small CNN trained with Gluon's Trainer on
kvstore 'autobyte' (run by ``autobyte launch``; the scheduler and server roles run inside
``import mxnet`` and exit there).

The knobs come from AUTOBYTE_* variables. Rank 0 prints a progress record per window
(``common.progress``); every worker prints a ``done`` record with a checksum of its
parameters, which must agree.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

os.environ.setdefault("MXNET_EXEC_BULK_EXEC_TRAIN", "0")  # gradients ready per layer
# MKL-DNN keeps some parameters (MobileNetV2's depthwise kernels) in its own layout, and the
# kvstore's init of AutoByte's buffers copied from them fails ("Check failed: !is_view");
# without MKL-DNN, MXNet 1.9.1's recurrent operator fails its backward pass: the lstm keeps it
# (the model is read off the command line, before MXNet is imported)
os.environ.setdefault("MXNET_MKLDNN_ENABLED",
                      "1" if {"lstm", "--model=lstm"} & set(sys.argv) else "0")

from autobyte_mx._compat import import_mxnet
from common.config import RANK_ENV, environment

if os.environ.get("DMLC_ROLE") in ("server", "scheduler"):
    import_mxnet()  # runs the node, then exits
    sys.exit(0)

import numpy as np

from common.config import Config
from common.progress import NATIVE, WindowMeter, emit, sweep_config, worker_args

mx = import_mxnet()
import autobyte_mx  # noqa: E402

CLASSES = 10
ZOO = {"mobilenetv2": "mobilenetv2_1.0", "resnet": "resnet34_v1",
       "densenet": "densenet121"}  # Gluon model zoo names


def input_shape(name: str) -> tuple[int, int, int]:
    return (3, 32, 32) if name in (*ZOO, "vgg") else (1, 28, 28)


def build_model(name: str = "cnn") -> Any:
    """The same shapes as autobyte_tf.demo's (cnn 0.33 M parameters, mlp 3.2 M, deep 1.2 M,
    vgg 1.3 M, transformer 0.27 M, lstm 0.21 M, densenet 7.0 M in 364 tensors); mobilenetv2
    (2.2 M, 160 tensors) and resnet (ResNet-34, 21.3 M, 110 tensors) from the Gluon model zoo,
    BatchNorm-heavy models, as are densenet (DenseNet-121) and resnet20 (0.27 M, 65 tensors)."""
    nn = mx.gluon.nn
    if name in ZOO:
        net = mx.gluon.model_zoo.vision.get_model(ZOO[name], classes=CLASSES)
        if name == "densenet":
            # the zoo's DenseNet ends in a 7x7 pooling made for 224x224 inputs; at 32x32 its
            # features are 1x1, so pool globally instead, as Keras's DenseNet121 does
            features = nn.HybridSequential(prefix="")
            for i in range(len(net.features) - 2):
                features.add(net.features[i])
            features.add(nn.GlobalAvgPool2D(), nn.Flatten())
            net.features = features
        return net
    net = nn.HybridSequential()
    if name == "cnn":
        net.add(nn.Conv2D(16, 3, activation="relu"), nn.MaxPool2D(2),
                nn.Conv2D(32, 3, activation="relu"), nn.MaxPool2D(2),
                nn.Flatten(), nn.Dense(256, activation="relu"))
    elif name == "mlp":
        net.add(nn.Flatten(), nn.Dense(1024, activation="relu"),
                nn.Dense(1024, activation="relu"), nn.Dense(1024, activation="relu"))
    elif name == "deep":
        net.add(nn.Conv2D(32, 3, activation="relu"), nn.Conv2D(32, 3, activation="relu"),
                nn.MaxPool2D(2), nn.Conv2D(64, 3, activation="relu"),
                nn.Conv2D(64, 3, activation="relu"), nn.MaxPool2D(2),
                nn.Flatten(), nn.Dense(512, activation="relu"))
    elif name == "vgg":
        for width in (32, 64, 128):
            net.add(nn.Conv2D(width, 3, padding=1, activation="relu"),
                    nn.Conv2D(width, 3, padding=1, activation="relu"), nn.MaxPool2D(2))
        net.add(nn.Flatten(), nn.Dense(512, activation="relu"))
    elif name == "lstm":
        net.add(_Rows(), mx.gluon.rnn.LSTM(128, num_layers=2, layout="NTC"), _Last())
    elif name == "transformer":
        net.add(_Rows(), nn.Dense(128, flatten=False), _EncoderBlock(), _EncoderBlock(),
                _MeanOverTokens())
    elif name == "resnet20":
        net.add(_conv_bn(16), nn.Activation("relu"))
        for stage, width in enumerate((16, 32, 64)):
            net.add(*(_BasicBlock(width, 2 if stage and not block else 1) for block in range(3)))
        net.add(nn.GlobalAvgPool2D(), nn.Flatten())
    else:
        raise SystemExit(f"autobyte_mx.demo: no model {name!r}")
    net.add(nn.Dense(CLASSES))
    return net


_HybridBlock: Any = mx.gluon.HybridBlock


class _Rows(_HybridBlock):  # type: ignore[misc]
    """(N, 1, 28, 28) images -> (N, 28, 28): the rows as a sequence of tokens."""

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return F.reshape(x, shape=(0, -3, 0))


class _Last(_HybridBlock):  # type: ignore[misc]
    """A sequence's last step."""

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return F.squeeze(F.slice_axis(x, axis=1, begin=-1, end=None), axis=1)


class _MeanOverTokens(_HybridBlock):  # type: ignore[misc]
    def hybrid_forward(self, F: Any, x: Any) -> Any:
        return F.mean(x, axis=1)


class _EncoderBlock(_HybridBlock):  # type: ignore[misc]
    """Post-norm self-attention and feed-forward, as Keras's MultiHeadAttention block in
    autobyte_tf.demo (query, key, value and output projections with biases)."""

    def __init__(self, width: int = 128, heads: int = 4) -> None:
        super().__init__()
        self._heads, self._scale = heads, (width // heads) ** -0.5
        nn = mx.gluon.nn
        with self.name_scope():
            self.query, self.key, self.value, self.out = (
                nn.Dense(width, flatten=False) for _ in range(4))
            self.norm1, self.norm2 = nn.LayerNorm(epsilon=1e-5), nn.LayerNorm(epsilon=1e-5)
            self.hidden = nn.Dense(2 * width, activation="relu", flatten=False)
            self.back = nn.Dense(width, flatten=False)

    def _split(self, F: Any, x: Any) -> Any:
        """(N, T, width) -> (N * heads, T, width / heads)."""
        x = F.transpose(F.reshape(x, shape=(0, 0, -4, self._heads, -1)), axes=(0, 2, 1, 3))
        return F.reshape(x, shape=(-3, 0, 0))

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        q, k, v = (self._split(F, dense(x)) for dense in (self.query, self.key, self.value))
        weights = F.softmax(F.batch_dot(q, k, transpose_b=True) * self._scale, axis=-1)
        heads = F.reshape(F.batch_dot(weights, v), shape=(-4, -1, self._heads, 0, 0))
        attended = F.reshape(F.transpose(heads, axes=(0, 2, 1, 3)), shape=(0, 0, -3))
        x = self.norm1(x + self.out(attended))
        return self.norm2(x + self.back(self.hidden(x)))


def _conv_bn(width: int, kernel: int = 3, stride: int = 1) -> Any:
    nn = mx.gluon.nn
    block = nn.HybridSequential(prefix="")
    block.add(nn.Conv2D(width, kernel, strides=stride, padding=kernel // 2, use_bias=False),
              nn.BatchNorm(epsilon=1e-5))
    return block


class _BasicBlock(_HybridBlock):  # type: ignore[misc]
    """Two 3x3 convolutions and a shortcut, a 1x1 projection where the block halves the image
    (as autobyte_tf.demo's ResNet-20)."""

    def __init__(self, width: int, stride: int) -> None:
        super().__init__()
        with self.name_scope():
            self.first, self.second = _conv_bn(width, stride=stride), _conv_bn(width)
            self.shortcut = _conv_bn(width, 1, stride) if stride > 1 else None

    def hybrid_forward(self, F: Any, x: Any) -> Any:
        y = self.second(F.relu(self.first(x)))
        return F.relu(y + (self.shortcut(x) if self.shortcut is not None else x))


def main(argv: list[str] | None = None) -> None:
    args = worker_args(argv, __doc__)
    mx.random.seed(1)
    np.random.seed(1)
    net = build_model(args.model)
    ctx = [mx.cpu(i) for i in range(args.devices)]
    net.initialize(mx.init.Xavier(), ctx=ctx)  # type: ignore[attr-defined]
    net.hybridize(static_alloc=True, static_shape=True)  # type: ignore[attr-defined]
    if args.local:  # compute alone: every worker trains on its own, no kvstore
        store: Any = None
        window = args.window or Config.from_env().window_steps
        describe: Callable[[], str] = functools.partial(str, "compute alone")
        tuning: Any = "off (compute alone)"
    elif args.baseline:  # MXNet's own dist_sync
        store = mx.kv.create("dist_sync")  # type: ignore[attr-defined]
        window = args.window or Config.from_env().window_steps
        describe = functools.partial(str, "baseline (dist_sync)")
        tuning = "off (baseline)"
    else:
        store = autobyte_mx.AutoByte(model_name=f"demo_{args.model}")
        window = args.window or store.config.window_steps
        describe = functools.partial(lambda s: s.config.describe(), store)
        tuning = store.tuning.enabled or store.tuning.why_disabled
    trainer = mx.gluon.Trainer(net.collect_params(), "sgd",  # type: ignore[attr-defined]
                               {"learning_rate": 0.01, "momentum": 0.9}, kvstore=store)
    if store is None:
        rank = environment(RANK_ENV) or 0
        workers = int(os.environ.get("DMLC_NUM_WORKER", "1"))
    else:
        rank, workers = store.rank, store.num_workers
    rng = np.random.default_rng(rank)
    xs = [mx.nd.array(rng.normal(size=(args.batch, *input_shape(args.model))).astype("float32"))
          for _ in range(8)]
    ys = [mx.nd.array(rng.integers(0, CLASSES, args.batch)) for _ in range(8)]
    loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()
    for device in ctx:  # shapes the zoo's deferred parameters
        net(xs[0].as_in_context(device)).wait_to_read()
    params = [p for p in net.collect_params().values()  # type: ignore[attr-defined]
              if p.grad_req != "null"]
    gradient_bytes = sum(p.data().size * np.dtype(p.dtype).itemsize for p in params)
    emit("start", framework="mxnet", rank=rank, workers=workers, steps=args.steps,
         model=args.model, config=describe(), tuning=tuning, gradient_bytes=gradient_bytes)
    if isinstance(store, autobyte_mx.AutoByte):
        store.expect_steps(args.steps)  # no tuning try the job ends before it pays back
    meter = WindowMeter(args.batch * workers)
    for step in range(1, args.steps + 1):
        meter.begin()
        x = mx.gluon.utils.split_and_load(xs[step % 8], ctx)
        y = mx.gluon.utils.split_and_load(ys[step % 8], ctx)
        with mx.autograd.record():
            losses = [loss_fn(net(xi), yi) for xi, yi in zip(x, y, strict=True)]
        mx.autograd.backward(losses)
        trainer.step(args.batch)
        for loss in losses:  # this step's compute is done (its communication overlaps on)
            loss.wait_to_read()
        if rank == 0:
            meter.end(step, window, describe())
        knobs = None if store is None or args.baseline else \
            sweep_config(args.sweep, args.sweep_steps, step)
        if knobs == NATIVE:
            store.reconfigure(store.config.replace(scheduling=False))
        elif knobs is not None:
            store.reconfigure(store.config.replace(partition_bytes=knobs[0],
                                                   credit_bytes=knobs[1], scheduling=True))
    mx.nd.waitall()
    checksum = float(sum(np.sum(p.data().asnumpy(), dtype=np.float64)
                         for p in net.collect_params().values()))  # type: ignore[attr-defined]
    emit("done", rank=rank, steps=args.steps, config=describe(), checksum=checksum)
    if store is None:
        return
    if args.baseline:
        store._barrier()  # native KVStore's barrier (Gluon's Trainer calls it the same way)
    else:
        store.barrier()
        store.close()


if __name__ == "__main__":
    main()

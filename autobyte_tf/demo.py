"""One worker of ``autobyte demo``: a small CNN trained with Keras ``fit`` on AutoByteStrategy.

Run by ``autobyte launch`` (TF_CONFIG and the control plane's variables set), the knobs from
AUTOBYTE_* variables. Rank 0 prints a progress record per window (``common.progress``); every
worker prints a ``done`` record with a checksum of its weights, which must agree.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from typing import Any

from common.config import Config
from common.output import import_tensorflow
from common.progress import NATIVE, WindowMeter, emit, sweep_config, worker_args

tf = import_tensorflow()  # before keras: its start-up lines filtered

import keras  # noqa: E402
import numpy as np  # noqa: E402

from autobyte_tf import AutoByteStrategy  # noqa: E402

INPUT = (28, 28, 1)
APP_INPUT = (32, 32, 3)  # keras.applications models need 32x32 and three channels at least
CLASSES = 10


def input_shape(name: str) -> tuple[int, int, int]:
    return APP_INPUT if name in ("mobilenetv2", "densenet", "resnet", "vgg") else INPUT


def build_model(name: str = "cnn") -> Any:
    """cnn: about 0.33 M parameters (1.3 MB of gradients), communication-bound below ~1 Gbit/s;
    mlp: 3.2 M, communication-bound everywhere; deep: 1.2 M over more layers, more compute.
    BatchNorm-heavy keras.applications models: mobilenetv2 (2.3 M, 158 tensors), densenet
    (DenseNet-121, 7.0 M, 364 tensors) and resnet (ResNet-50, 23.6 M, 161 tensors); vgg (plain
    3x3 convolutions, 1.3 M, 16 tensors), transformer (a two-block attention encoder over the
    image's rows, 0.27 M, 36 tensors), lstm (two recurrent layers, 0.21 M) and resnet20 (He et
    al.'s CIFAR ResNet-20 over the 28x28 images, 0.27 M in 65 tensors, most of them
    BatchNorm's). The shipped meta-network never trained on densenet or resnet."""
    apps = {"mobilenetv2": keras.applications.MobileNetV2,
            "densenet": keras.applications.DenseNet121, "resnet": keras.applications.ResNet50}
    if name in apps:
        return apps[name](weights=None, input_shape=APP_INPUT, classes=CLASSES,
                          classifier_activation=None)
    if name == "transformer":
        return _transformer()
    if name == "resnet20":
        return _resnet20()
    layers = keras.layers
    body = {
        "cnn": [layers.Conv2D(16, 3, activation="relu"), layers.MaxPooling2D(),
                layers.Conv2D(32, 3, activation="relu"), layers.MaxPooling2D(),
                layers.Flatten(), layers.Dense(256, activation="relu")],
        "mlp": [layers.Flatten(), layers.Dense(1024, activation="relu"),
                layers.Dense(1024, activation="relu"), layers.Dense(1024, activation="relu")],
        "deep": [layers.Conv2D(32, 3, activation="relu"), layers.Conv2D(32, 3, activation="relu"),
                 layers.MaxPooling2D(), layers.Conv2D(64, 3, activation="relu"),
                 layers.Conv2D(64, 3, activation="relu"), layers.MaxPooling2D(),
                 layers.Flatten(), layers.Dense(512, activation="relu")],
        "vgg": [*(layer for width in (32, 64, 128) for layer in (
                    layers.Conv2D(width, 3, padding="same", activation="relu"),
                    layers.Conv2D(width, 3, padding="same", activation="relu"),
                    layers.MaxPooling2D())),
                layers.Flatten(), layers.Dense(512, activation="relu")],
        "lstm": [layers.Reshape(INPUT[:2]), layers.LSTM(128, return_sequences=True),
                 layers.LSTM(128)],
    }[name]
    return keras.Sequential([keras.Input(input_shape(name)), *body, layers.Dense(CLASSES)],
                            name=f"demo_{name}")


def _transformer(width: int = 128, heads: int = 4, blocks: int = 2) -> Any:
    """Post-norm encoder blocks over the image's 28 rows as tokens (as autobyte_mx.demo's)."""
    layers = keras.layers
    inputs = keras.Input(INPUT)
    x = layers.Dense(width)(layers.Reshape(INPUT[:2])(inputs))
    for _ in range(blocks):
        attended = layers.MultiHeadAttention(heads, width // heads)(x, x)
        x = layers.LayerNormalization(epsilon=1e-5)(x + attended)
        hidden = layers.Dense(width)(layers.Dense(2 * width, activation="relu")(x))
        x = layers.LayerNormalization(epsilon=1e-5)(x + hidden)
    outputs = layers.Dense(CLASSES)(layers.GlobalAveragePooling1D()(x))
    return keras.Model(inputs, outputs, name="demo_transformer")


def _resnet20(widths: tuple[int, ...] = (16, 32, 64), blocks: int = 3) -> Any:
    """Stages of basic residual blocks, each stage after the first halving the image and
    starting with a 1x1 projection shortcut (as autobyte_mx.demo's)."""
    layers = keras.layers

    def conv_bn(x: Any, width: int, kernel: int = 3, stride: int = 1) -> Any:
        x = layers.Conv2D(width, kernel, strides=stride, padding="same", use_bias=False)(x)
        return layers.BatchNormalization(epsilon=1e-5)(x)

    inputs = keras.Input(INPUT)
    x = layers.ReLU()(conv_bn(inputs, widths[0]))
    for stage, width in enumerate(widths):
        for block in range(blocks):
            stride = 2 if stage and not block else 1
            y = conv_bn(layers.ReLU()(conv_bn(x, width, stride=stride)), width)
            shortcut = conv_bn(x, width, 1, stride) if stride > 1 else x
            x = layers.ReLU()(layers.Add()([y, shortcut]))
    outputs = layers.Dense(CLASSES)(layers.GlobalAveragePooling2D()(x))
    return keras.Model(inputs, outputs, name="demo_resnet20")


def _threads(name: str, default: int) -> int:
    """A thread count from the environment (TensorFlow's own variable), or the demo's default."""
    raw = os.environ.get(name, "").strip() or str(default)
    if not raw.isdigit() or int(raw) < 1:
        raise SystemExit(f"autobyte_tf.demo: {name}={raw!r}: a whole number of threads >= 1")
    return int(raw)


def main(argv: list[str] | None = None) -> None:
    args = worker_args(argv, __doc__)
    if args.devices != 1:
        raise SystemExit(f"autobyte_tf.demo: --devices {args.devices}: one device per worker "
                         "here (several devices per worker are MXNet's demo only)")
    # One core per worker; two inter-op threads, as with one the executor runs the gradient-ready
    # stamps only after the whole backward pass and the tuner sees nothing to overlap.
    tf.config.threading.set_intra_op_parallelism_threads(_threads("TF_NUM_INTRAOP_THREADS", 1))
    tf.config.threading.set_inter_op_parallelism_threads(_threads("TF_NUM_INTEROP_THREADS", 2))
    if args.local:  # compute alone: every worker trains on its own, no communication
        cluster = json.loads(os.environ.get("TF_CONFIG") or "{}")
        rank = int(cluster.get("task", {}).get("index", 0))
        workers = len(cluster.get("cluster", {}).get("worker", [])) or 1
        window = args.window or Config.from_env().window_steps
        strategy: Any = tf.distribute.get_strategy()
        describe: Callable[[], str] = functools.partial(str, "compute alone")
        tuning: Any = "off (compute alone)"
    elif args.baseline:  # plain MultiWorkerMirroredStrategy, with the same Keras fixes
        from autobyte_tf import _patches

        strategy = tf.distribute.MultiWorkerMirroredStrategy()
        _patches.install()
        rank = int(strategy.extended._id_in_cluster or 0)
        workers = int(strategy.extended._num_workers)
        window = args.window or Config.from_env().window_steps
        describe = functools.partial(str, "baseline (MWMS)")
        tuning = "off (baseline)"
    else:
        strategy = AutoByteStrategy(model_name=f"demo_{args.model}")
        rank, workers = strategy.rank, strategy.num_workers
        window = args.window or strategy.config.window_steps
        describe = functools.partial(lambda s: s.config.describe(), strategy)
        tuning = strategy.tuning.enabled or strategy.tuning.why_disabled
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = build_model(args.model)
        model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(rank)
    x = rng.normal(size=(8 * args.batch, *input_shape(args.model))).astype("float32")
    y = rng.integers(0, CLASSES, len(x))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    global_batch = args.batch * workers  # Keras splits it across the workers
    data = (tf.data.Dataset.from_tensor_slices((x, y)).repeat()
            .batch(args.batch if args.local else global_batch).with_options(options))
    gradient_bytes = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize
                         for v in model.trainable_variables)
    emit("start", framework="tensorflow", rank=rank, workers=workers, steps=args.steps,
         model=args.model, config=describe(), tuning=tuning, gradient_bytes=gradient_bytes)
    model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0, shuffle=False,
              callbacks=[_Progress(rank, window, describe, WindowMeter(global_batch),
                                   sweep=None if args.baseline or args.local
                                   else (strategy, args))])
    checksum = float(sum(np.sum(v.numpy(), dtype=np.float64) for v in model.trainable_variables))
    emit("done", rank=rank, steps=args.steps, config=describe(), checksum=checksum)
    if not (args.baseline or args.local):
        strategy.close()


class _Progress(keras.callbacks.Callback):  # type: ignore[misc]
    """Rank 0: one progress record per window (``WindowMeter``) with the configuration in
    force."""

    def __init__(self, rank: int, window: int, describe: Callable[[], str],
                 meter: WindowMeter, sweep: tuple[Any, Any] | None = None) -> None:
        super().__init__()
        self._rank, self._window, self._describe, self._meter = rank, window, describe, meter
        self._sweep = sweep

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        self._meter.begin()

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._rank == 0:
            self._meter.end(batch + 1, self._window, self._describe())
        if self._sweep is not None:
            strategy, args = self._sweep
            # a request is in force one window after the next agreement: ask a window early
            knobs = sweep_config(args.sweep, args.sweep_steps,
                                 batch + 1 + strategy.config.window_steps)
            if knobs == NATIVE:
                strategy.reconfigure(scheduling=False)
            elif knobs is not None:
                strategy.reconfigure(partition_bytes=knobs[0], credit_bytes=knobs[1],
                                     scheduling=True)


if __name__ == "__main__":
    main()

"""The demo workers' models: every name builds in both frameworks, trains a step, and the two
frameworks' versions carry the same gradient bytes (the meta-network's data compares them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from common.progress import MODELS

# the shapes added for the meta-network's real data
NEW = ("vgg", "transformer", "lstm", "resnet20")

_PROBE = """
import json, sys
models = sys.argv[1:]
sys.argv = ["demo", "--model", models[0]]  # what autobyte_mx.demo reads before MXNet loads
import numpy as np
from autobyte_{framework}.demo import build_model, input_shape
out = {{}}
for name in models:
{body}
print(json.dumps(out))
"""
_TF = """\
    model = build_model(name)
    x = np.random.default_rng(0).normal(size=(2, *input_shape(name))).astype("float32")
    model.compile(optimizer="sgd", loss="mse")
    loss = model.train_on_batch(x, np.zeros((2, 10), "float32"))
    out[name] = [sum(int(np.prod(v.shape)) for v in model.trainable_variables),
                 list(model(x).shape), float(loss)]
"""
_MX = """\
    import mxnet as mx
    net = build_model(name)
    net.initialize(mx.init.Xavier())
    net.hybridize(static_alloc=True, static_shape=True)
    x = mx.nd.array(np.random.default_rng(0).normal(size=(2, *input_shape(name))))
    with mx.autograd.record():
        y = net(x)
        loss = (y * y).mean()
    loss.backward()
    params = [p for p in net.collect_params().values() if p.grad_req != "null"]
    out[name] = [sum(p.data().size for p in params), list(y.shape), float(loss.asscalar())]
"""


def _sizes(framework: str, models: tuple[str, ...]) -> dict[str, list]:
    """Parameters, output shape and a finite loss of each model after a training step, in a
    process of its own (TensorFlow and MXNet are not imported into one), started as a demo
    worker of the first model is."""
    module = "tf" if framework == "tensorflow" else "mx"
    script = _PROBE.format(framework=module, body=_TF if module == "tf" else _MX)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "MXNET_STORAGE_FALLBACK_LOG_VERBOSE": "0",
           "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script, *models], capture_output=True,
                          text=True, timeout=600, env=env)
    if done.returncode and "FrameworkMissingError" in done.stderr:
        pytest.skip(f"{framework} is not importable: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_new_models_are_demo_models() -> None:
    assert set(NEW) <= set(MODELS)


def test_both_frameworks_build_the_same_new_shapes() -> None:
    tf = _sizes("tensorflow", NEW)
    mx = {name: got for one in NEW for name, got in _sizes("mxnet", (one,)).items()}
    for name in NEW:
        (tf_params, tf_shape, tf_loss), (mx_params, mx_shape, mx_loss) = tf[name], mx[name]
        assert tf_shape == mx_shape == [2, 10], name
        assert tf_loss == tf_loss and mx_loss == mx_loss, name  # finite, not NaN
        # Gluon's LSTM keeps two biases a gate where Keras keeps one: 4 x 128 a layer more
        extra = 2 * 4 * 128 if name == "lstm" else 0
        assert mx_params == tf_params + extra, (name, tf_params, mx_params)


def test_densenet_is_the_same_model_in_both_frameworks() -> None:
    """DenseNet-121 at 32x32: Gluon's zoo model pools globally, as Keras's does."""
    (tf_params, tf_shape, _), = _sizes("tensorflow", ("densenet",)).values()
    (mx_params, mx_shape, mx_loss), = _sizes("mxnet", ("densenet",)).values()
    assert tf_shape == mx_shape == [2, 10]
    assert mx_loss == mx_loss  # finite, not NaN
    assert mx_params == tf_params == 6_964_106, (tf_params, mx_params)

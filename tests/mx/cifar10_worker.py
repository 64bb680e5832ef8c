"""MXNet's example/distributed_training/cifar10_dist.py as its users run it, with the kvstore
name from the command line: ResNet-18 v1 from the model zoo, several devices per worker
(``split_and_load``, one backward per device), Adam through ``gluon.Trainer(kvstore=store)``,
each worker reading its own part of the data (``SplitSampler``). Two CPU contexts stand in for
its GPUs, and the data are CIFAR-10-shaped synthetic images (this machine cannot download
CIFAR-10). Writes each epoch's mean loss and the final weights to OUT.
"""

from __future__ import annotations

import json
import os
import random
import sys

import numpy as np

if "bool" not in np.__dict__:
    np.bool = np.bool_  # type: ignore[attr-defined]

if os.environ.get("DMLC_ROLE") in ("server", "scheduler"):
    from autobyte_mx._compat import import_mxnet

    import_mxnet()  # runs the node, then exits
    sys.exit(0)

import mxnet as mx
from mxnet import autograd, gluon, kv, nd
from mxnet.gluon.model_zoo import vision

import autobyte_mx  # noqa: F401  (registers kvstore 'autobyte')


class SplitSampler(gluon.data.sampler.Sampler):
    """The example's sampler: part ``part_index`` of ``num_parts``, shuffled."""

    def __init__(self, length: int, num_parts: int, part_index: int) -> None:
        self.part_len = length // num_parts
        self.start = self.part_len * part_index
        self.end = self.start + self.part_len

    def __iter__(self):  # type: ignore[no-untyped-def]
        indices = list(range(self.start, self.end))
        random.shuffle(indices)
        return iter(indices)

    def __len__(self) -> int:
        return self.part_len


def main() -> int:
    kvstore, out, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = kv.create(kvstore)
    random.seed(store.rank)
    mx.random.seed(7)
    devices, per_device = 2, 16
    ctx = [mx.cpu(i) for i in range(devices)]
    rng = np.random.RandomState(3)
    images = rng.rand(store.num_workers * 4 * per_device * devices, 32, 32, 3) * 255
    labels = rng.randint(0, 10, len(images))

    def transform(data, label):  # type: ignore[no-untyped-def]
        return nd.transpose(data.astype(np.float32), (2, 0, 1)) / 255, label.astype(np.float32)

    dataset = gluon.data.ArrayDataset(nd.array(images), nd.array(labels)).transform(transform)
    train_data = gluon.data.DataLoader(dataset, per_device * devices, sampler=SplitSampler(
        len(images), store.num_workers, store.rank))
    net = vision.resnet18_v1(classes=10)
    net.collect_params().initialize(mx.init.Xavier(), ctx=ctx)
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": .001}, kvstore=store)
    loss = gluon.loss.SoftmaxCrossEntropyLoss()
    epoch_loss = []
    for _ in range(epochs):
        total, count = 0.0, 0
        for data, label in train_data:
            data = gluon.utils.split_and_load(data, ctx)
            label = gluon.utils.split_and_load(label, ctx)
            with autograd.record():
                losses = [loss(net(x), y) for x, y in zip(data, label, strict=True)]
            for lo in losses:
                lo.backward()
            trainer.step(per_device * devices)
            total += sum(float(lo.sum().asscalar()) for lo in losses)
            count += per_device * devices
        epoch_loss.append(total / count)
    params = {k: v.data(ctx[0]).asnumpy() for k, v in net.collect_params().items()
              if v.grad_req != "null"}
    same = all(np.array_equal(d.asnumpy(), params[k]) for k, v in net.collect_params().items()
               if k in params for d in v.list_data())
    os.makedirs(out, exist_ok=True)
    np.savez(os.path.join(out, f"params_rank{store.rank}.npz"), **params)
    with open(os.path.join(out, f"summary_rank{store.rank}.json"), "w") as f:
        json.dump({"epoch_loss": epoch_loss, "devices_equal": same, "kvstore": store.type,
                   "update_on_kvstore": bool(trainer._update_on_kvstore)}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())

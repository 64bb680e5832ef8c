"""Per-layer parameter counts and FLOPs of four ImageNet models, from their architectures.

Each function walks the real network (torchvision's definitions, 224x224 input, 1000 classes)
and returns one ``LayerSpec`` per trainable unit in forward order: a convolution or fully
connected layer together with its batch-norm (BN's gamma and beta are parameters; its running
statistics are buffers and are never communicated). Counts follow exactly from kernel shapes,
so the totals match the published parameter counts; the unit tests check them.

FLOPs are those of the convolutions and matrix products (2 per multiply-add) for one sample in
the forward pass; element-wise work (BN, ReLU, pooling) is ignored as negligible beside them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ARCHITECTURES", "LayerSpec", "alexnet", "densenet121", "resnet50", "vgg16"]


@dataclass(frozen=True, slots=True)
class LayerSpec:
    name: str
    params: int
    flops: int  # forward FLOPs for one sample


def _out(size: int, kernel: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - kernel) // stride + 1


class _Net:
    """Tracks the feature-map side length while layers are appended in forward order."""

    def __init__(self, size: int = 224) -> None:
        self.size = size
        self.layers: list[LayerSpec] = []

    def conv(self, name: str, cin: int, cout: int, kernel: int, *, stride: int = 1,
             pad: int = 0, bias: bool = False, bn_before: int = 0, bn_after: bool = False,
             advance: bool = True) -> None:
        """A conv (optionally with bias), with a BN over ``bn_before`` input channels (DenseNet's
        pre-activation) or over its outputs (``bn_after``). ``advance=False`` keeps the side
        length (ResNet's shortcut runs beside the main path)."""
        side = _out(self.size, kernel, stride, pad)
        params = kernel * kernel * cin * cout + (cout if bias else 0)
        params += 2 * bn_before + (2 * cout if bn_after else 0)
        flops = 2 * kernel * kernel * cin * cout * side * side
        self.layers.append(LayerSpec(name, params, flops))
        if advance:
            self.size = side

    def fc(self, name: str, fin: int, fout: int, *, bn_before: int = 0) -> None:
        self.layers.append(LayerSpec(name, fin * fout + fout + 2 * bn_before, 2 * fin * fout))

    def pool(self, kernel: int, stride: int, pad: int = 0) -> None:
        self.size = _out(self.size, kernel, stride, pad)


def resnet50() -> list[LayerSpec]:
    """torchvision resnet50 (v1.5: the stride sits on the 3x3 conv): 25,557,032 parameters."""
    net = _Net()
    net.conv("conv1", 3, 64, 7, stride=2, pad=3, bn_after=True)
    net.pool(3, 2, 1)
    cin = 64
    for stage, (blocks, width, stride) in enumerate(
            [(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)], start=1):
        for block in range(blocks):
            s = stride if block == 0 else 1
            prefix = f"layer{stage}.{block}"
            side_in = net.size
            net.conv(f"{prefix}.conv1", cin, width, 1, bn_after=True)
            net.conv(f"{prefix}.conv2", width, width, 3, stride=s, pad=1, bn_after=True)
            net.conv(f"{prefix}.conv3", width, 4 * width, 1, bn_after=True)
            if block == 0:
                side_out, net.size = net.size, side_in
                net.conv(f"{prefix}.downsample", cin, 4 * width, 1, stride=s, bn_after=True)
                net.size = side_out
            cin = 4 * width
    net.fc("fc", cin, 1000)
    return net.layers


def vgg16() -> list[LayerSpec]:
    """torchvision vgg16 (no BN): 13 convs with bias, 3 FC layers: 138,357,544 parameters."""
    net = _Net()
    cin, index = 3, 0
    for item in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
                 512, 512, 512, "M", 512, 512, 512, "M"):
        if item == "M":
            net.pool(2, 2)
            continue
        assert isinstance(item, int)
        index += 1
        net.conv(f"conv{index}", cin, item, 3, pad=1, bias=True)
        cin = item
    net.fc("fc6", cin * 7 * 7, 4096)
    net.fc("fc7", 4096, 4096)
    net.fc("fc8", 4096, 1000)
    return net.layers


def alexnet() -> list[LayerSpec]:
    """torchvision alexnet (the one-GPU variant): 61,100,840 parameters."""
    net = _Net()
    net.conv("conv1", 3, 64, 11, stride=4, pad=2, bias=True)
    net.pool(3, 2)
    net.conv("conv2", 64, 192, 5, pad=2, bias=True)
    net.pool(3, 2)
    net.conv("conv3", 192, 384, 3, pad=1, bias=True)
    net.conv("conv4", 384, 256, 3, pad=1, bias=True)
    net.conv("conv5", 256, 256, 3, pad=1, bias=True)
    net.fc("fc6", 256 * 6 * 6, 4096)
    net.fc("fc7", 4096, 4096)
    net.fc("fc8", 4096, 1000)
    return net.layers


def densenet121() -> list[LayerSpec]:
    """torchvision densenet121 (growth 32, blocks 6/12/24/16, bottleneck 4x): 7,978,856
    parameters. BN precedes its conv (pre-activation), so each unit is BN + conv."""
    growth, bottleneck = 32, 4 * 32
    net = _Net()
    net.conv("conv0", 3, 64, 7, stride=2, pad=3, bn_after=True)
    net.pool(3, 2, 1)
    channels = 64
    blocks = (6, 12, 24, 16)
    for b, count in enumerate(blocks, start=1):
        for i in range(1, count + 1):
            prefix = f"denseblock{b}.layer{i}"
            net.conv(f"{prefix}.conv1", channels, bottleneck, 1, bn_before=channels)
            net.conv(f"{prefix}.conv2", bottleneck, growth, 3, pad=1, bn_before=bottleneck)
            channels += growth
        if b < len(blocks):
            net.conv(f"transition{b}.conv", channels, channels // 2, 1, bn_before=channels)
            net.pool(2, 2)
            channels //= 2
    net.fc("classifier", channels, 1000, bn_before=channels)
    return net.layers


ARCHITECTURES = {
    "resnet50": resnet50,
    "vgg16": vgg16,
    "alexnet": alexnet,
    "densenet121": densenet121,
}

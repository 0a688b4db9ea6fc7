"""Image-classification networks built with ``onnx.helper`` and random weights, for tests and benchmarks.

``resnet18`` and ``mobilenet_v2`` have the full torchvision topology; the SqueezeNet, ShuffleNet, Inception
and VGG nets are smaller nets of those families' characteristic blocks (Fire modules with Concat, channel
shuffle by Reshape/Transpose, LRN and four-branch Concat, Dropout and Gemm). Weights are He-scaled so that
activations neither vanish nor explode through the depth. ``image`` sets the input's height and width;
``weights=Weights.CONSTANT_NODES`` stores weights in ``Constant`` nodes (and zero biases in
``ConstantOfShape`` nodes) instead of initializers, as some exporters do.
"""
from __future__ import annotations

import math
from enum import Enum
from typing import Callable

import numpy as np


class Weights(Enum):
    INITIALIZERS = "initializers"
    CONSTANT_NODES = "constant nodes"


class _Net:
    """Accumulates the nodes and weights of a model; every helper returns the name of its output."""

    def __init__(self, name: str, seed: int, weights: Weights):
        from onnx import helper

        self.helper = helper
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.weights = weights
        self.nodes: list = []
        self.initializers: list = []
        self.count = 0

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def node(self, op_type: str, inputs: list[str], hint: str | None = None, n_out: int = 1, **attrs) -> str:
        outs = [self.fresh(hint or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(self.helper.make_node(op_type, inputs, outs, name=f"{outs[0]}_node", **attrs))
        return outs[0] if n_out == 1 else outs  # type: ignore[return-value]

    def const(self, array: np.ndarray, hint: str) -> str:
        from onnx import numpy_helper

        name = self.fresh(hint)
        tensor = numpy_helper.from_array(np.asarray(array), name)
        if self.weights is Weights.CONSTANT_NODES:
            self.nodes.append(self.helper.make_node("Constant", [], [name], name=f"{name}_const", value=tensor))
        else:
            self.initializers.append(tensor)
        return name

    def zeros(self, n: int, hint: str) -> str:
        """A zero vector: a ``ConstantOfShape`` node with constant-node weights, else an initializer."""
        if self.weights is not Weights.CONSTANT_NODES:
            return self.const(np.zeros(n, np.float32), hint)
        shape = self.const(np.array([n], np.int64), f"{hint}_shape")
        value = self.helper.make_tensor("value", 1, [1], [0.0])
        return self.node("ConstantOfShape", [shape], hint, value=value)

    # ------------------------------------------------------------------ layers
    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, pad: int | None = None, groups: int = 1,
             bias: bool = False) -> str:
        fan_in = cin // groups * k * k
        w = (self.rng.standard_normal((cout, cin // groups, k, k)) * math.sqrt(2.0 / fan_in)).astype(np.float32)
        inputs = [x, self.const(w, "w")]
        if bias:
            inputs.append(self.const(self.rng.uniform(-0.1, 0.1, cout).astype(np.float32), "b"))
        pad = k // 2 if pad is None else pad
        return self.node("Conv", inputs, "conv", kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                         group=groups)

    def bn(self, x: str, c: int) -> str:
        r = self.rng
        params = [r.uniform(0.5, 1.5, c), r.uniform(-0.1, 0.1, c), r.uniform(-0.1, 0.1, c), r.uniform(0.5, 1.5, c)]
        names = [self.const(p.astype(np.float32), h) for p, h in zip(params, ("gamma", "beta", "mean", "var"))]
        return self.node("BatchNormalization", [x] + names, "bn", epsilon=1e-5)

    def conv_bn(self, x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
                act: str | None = "relu") -> str:
        y = self.bn(self.conv(x, cin, cout, k, stride, groups=groups), cout)
        if act == "relu":
            return self.node("Relu", [y])
        if act == "relu6":
            return self.node("Clip", [y, self.const(np.float32(0), "lo"), self.const(np.float32(6), "hi")], "relu6")
        return y

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def maxpool(self, x: str, k: int, stride: int, pad: int = 0, ceil: bool = False) -> str:
        return self.node("MaxPool", [x], "pool", kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                         ceil_mode=int(ceil))

    def head(self, x: str, c: int, classes: int, dropout: bool = False) -> str:
        y = self.node("Flatten", [self.node("GlobalAveragePool", [x], "gap")], "flatten", axis=1)
        if dropout:
            y = self.node("Dropout", [y], "dropout")
        return self.gemm(y, c, classes)

    def gemm(self, x: str, cin: int, cout: int) -> str:
        w = (self.rng.standard_normal((cout, cin)) * math.sqrt(1.0 / cin)).astype(np.float32)
        b = self.rng.uniform(-0.1, 0.1, cout).astype(np.float32)
        return self.node("Gemm", [x, self.const(w, "fc_w"), self.const(b, "fc_b")], "fc", transB=1)

    def model(self, shape: tuple[int, ...], output: str, opset: int = 13):
        from onnx import TensorProto

        h = self.helper
        graph = h.make_graph(self.nodes, self.name, [h.make_tensor_value_info("input", TensorProto.FLOAT, list(shape))],
                             [h.make_tensor_value_info(output, TensorProto.FLOAT, None)], self.initializers)
        m = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], producer_name="tensortune.zoo")
        m.ir_version = 8
        return m


# ------------------------------------------------------------------------------------------- networks

def resnet18(batch: int = 1, image: int = 224, classes: int = 1000, seed: int = 0,
             weights: Weights = Weights.INITIALIZERS):
    """ResNet-18 (torchvision's topology: 7x7 stem, max pool, 4 stages of 2 basic blocks, average pool, fc)."""
    n = _Net("resnet18", seed, weights)
    x = n.maxpool(n.conv_bn("input", 3, 64, 7, 2), 3, 2, 1)
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            y = n.conv_bn(n.conv_bn(x, cin, cout, 3, s), cout, cout, 3, act=None)
            short = n.conv_bn(x, cin, cout, 1, s, act=None) if (s != 1 or cin != cout) else x
            x = n.relu(n.node("Add", [y, short], "add"))
            cin = cout
    return n.model((batch, 3, image, image), n.head(x, 512, classes))


def mobilenet_v2(batch: int = 1, image: int = 224, classes: int = 1000, seed: int = 0,
                 weights: Weights = Weights.INITIALIZERS):
    """MobileNetV2 (torchvision's topology: inverted residual blocks with ReLU6, depthwise 3x3, linear bottlenecks)."""
    n = _Net("mobilenet_v2", seed, weights)
    x = n.conv_bn("input", 3, 32, 3, 2, act="relu6")
    cin = 32
    for t, c, reps, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                          (6, 320, 1, 1)):
        for r in range(reps):
            stride = s if r == 0 else 1
            hidden = cin * t
            y = n.conv_bn(x, cin, hidden, 1, act="relu6") if t != 1 else x
            y = n.conv_bn(y, hidden, hidden, 3, stride, groups=hidden, act="relu6")
            y = n.conv_bn(y, hidden, c, 1, act=None)
            x = n.node("Add", [x, y], "add") if stride == 1 and cin == c else y
            cin = c
    x = n.conv_bn(x, cin, 1280, 1, act="relu6")
    return n.model((batch, 3, image, image), n.head(x, 1280, classes, dropout=True))


def squeezenet(batch: int = 1, image: int = 64, classes: int = 100, seed: int = 0,
               weights: Weights = Weights.INITIALIZERS):
    """SqueezeNet-1.1-style: Fire modules (1x1 squeeze, then 1x1 and 3x3 expands joined by Concat), ceil-mode max
    pools, a 1x1 classifier convolution and global average pooling."""
    n = _Net("squeezenet", seed, weights)

    def fire(x: str, cin: int, squeeze: int, expand: int) -> str:
        s = n.relu(n.conv(x, cin, squeeze, 1, bias=True))
        a = n.relu(n.conv(s, squeeze, expand, 1, bias=True))
        b = n.relu(n.conv(s, squeeze, expand, 3, bias=True))
        return n.node("Concat", [a, b], "concat", axis=1)

    x = n.maxpool(n.relu(n.conv("input", 3, 64, 3, 2, pad=0, bias=True)), 3, 2, ceil=True)
    x = fire(fire(x, 64, 16, 64), 128, 16, 64)
    x = n.maxpool(x, 3, 2, ceil=True)
    x = fire(fire(x, 128, 32, 128), 256, 48, 192)
    x = n.node("Dropout", [x], "dropout")
    x = n.relu(n.conv(x, 384, classes, 1, bias=True))
    y = n.node("Flatten", [n.node("GlobalAveragePool", [x], "gap")], "flatten")
    return n.model((batch, 3, image, image), y)


def shufflenet(batch: int = 1, image: int = 64, classes: int = 100, seed: int = 0,
               weights: Weights = Weights.INITIALIZERS):
    """ShuffleNet-style: grouped 1x1 convolutions, channel Split, depthwise 3x3, Concat and the channel shuffle
    (Reshape to [N, groups, C/groups, H, W], Transpose, Reshape back)."""
    n = _Net("shufflenet", seed, weights)

    def shuffle(x: str, c: int, hw: int, groups: int = 2) -> str:
        s1 = n.const(np.array([batch, groups, c // groups, hw, hw], np.int64), "shape5")
        s2 = n.const(np.array([batch, -1, hw, hw], np.int64), "shape4")
        t = n.node("Transpose", [n.node("Reshape", [x, s1], "reshape")], "transpose", perm=[0, 2, 1, 3, 4])
        return n.node("Reshape", [t, s2], "reshape")

    def branch(x: str, cin: int, c: int, stride: int) -> str:
        y = n.conv_bn(x, cin, c, 1)
        y = n.conv_bn(y, c, c, 3, stride, groups=c, act=None)
        return n.conv_bn(y, c, c, 1)

    x = n.maxpool(n.conv_bn("input", 3, 24, 3, 2), 3, 2, 1)
    hw = (image + 1) // 2
    hw = (hw + 1) // 2
    c = 24
    for cout in (48, 96):
        # downsampling unit: both branches see the whole input
        left = n.conv_bn(n.conv_bn(x, c, c, 3, 2, groups=c, act=None), c, cout // 2, 1)
        right = branch(x, c, cout // 2, 2)
        hw = (hw + 1) // 2
        x = shuffle(n.node("Concat", [left, right], "concat", axis=1), cout, hw)
        c = cout
        # basic unit: half the channels pass through
        keep, work = n.node("Split", [x, n.const(np.array([c // 2, c // 2], np.int64), "split")], "split", n_out=2,
                            axis=1)
        x = shuffle(n.node("Concat", [keep, branch(work, c // 2, c // 2, 1)], "concat", axis=1), c, hw)
    x = n.conv_bn(x, c, 4 * c, 1, groups=2)  # a grouped 1x1 convolution, as in ShuffleNet v1
    return n.model((batch, 3, image, image), n.head(x, 4 * c, classes))


def inception(batch: int = 1, image: int = 64, classes: int = 100, seed: int = 0,
              weights: Weights = Weights.INITIALIZERS):
    """GoogLeNet-style: a stem with LRN, then inception blocks (1x1, 1x1-3x3, 1x1-5x5 and pool-1x1 branches
    joined by Concat), average pooling, fc and softmax."""
    n = _Net("inception", seed, weights)

    def lrn(x: str) -> str:
        return n.node("LRN", [x], "lrn", size=5, alpha=1e-4, beta=0.75, bias=1.0)

    def block(x: str, cin: int, c1: int, c3r: int, c3: int, c5r: int, c5: int, cp: int) -> tuple[str, int]:
        b1 = n.relu(n.conv(x, cin, c1, 1, bias=True))
        b2 = n.relu(n.conv(n.relu(n.conv(x, cin, c3r, 1, bias=True)), c3r, c3, 3, bias=True))
        b3 = n.relu(n.conv(n.relu(n.conv(x, cin, c5r, 1, bias=True)), c5r, c5, 5, bias=True))
        b4 = n.relu(n.conv(n.maxpool(x, 3, 1, 1), cin, cp, 1, bias=True))
        return n.node("Concat", [b1, b2, b3, b4], "concat", axis=1), c1 + c3 + c5 + cp

    x = lrn(n.maxpool(n.relu(n.conv("input", 3, 32, 7, 2, bias=True)), 3, 2, 1))
    x = n.relu(n.conv(n.relu(n.conv(x, 32, 32, 1, bias=True)), 32, 96, 3, bias=True))
    x = n.maxpool(lrn(x), 3, 2, 1)
    x, c = block(x, 96, 32, 48, 64, 8, 16, 16)
    x, c = block(x, c, 64, 64, 96, 16, 48, 32)
    x = n.node("AveragePool", [x], "avgpool", kernel_shape=[2, 2], strides=[2, 2])
    x = n.node("Flatten", [x], "flatten")
    spatial = max(1, image // 16)
    y = n.node("Softmax", [n.gemm(x, c * spatial * spatial, classes)], "softmax", axis=1)
    return n.model((batch, 3, image, image), y)


def vgg(batch: int = 1, image: int = 32, classes: int = 100, seed: int = 0, weights: Weights = Weights.INITIALIZERS):
    """VGG-style: stacks of 3x3 convolutions with ReLU and max pools, then fc-ReLU-Dropout twice and a classifier."""
    n = _Net("vgg", seed, weights)
    x, c = "input", 3
    for width, reps in ((32, 2), (64, 2), (128, 3)):
        for _ in range(reps):
            x = n.relu(n.conv(x, c, width, 3, bias=True))
            c = width
        x = n.maxpool(x, 2, 2)
    x = n.node("Flatten", [x], "flatten")
    spatial = image // 8
    x = n.node("Dropout", [n.relu(n.gemm(x, c * spatial * spatial, 256))], "dropout")
    x = n.node("Dropout", [n.relu(n.gemm(x, 256, 256))], "dropout")
    return n.model((batch, 3, image, image), n.gemm(x, 256, classes), opset=11)


#: name -> builder
MODELS: dict[str, Callable[..., object]] = {
    "resnet18": resnet18, "mobilenet_v2": mobilenet_v2, "squeezenet": squeezenet, "shufflenet": shufflenet,
    "inception": inception, "vgg": vgg,
}

"""A graph IR executed by PyTorch (``torch.nn.functional``), so that ``e2e.py`` times PyTorch eager and
``torch.compile`` on exactly the network (and weights) that tensortune and onnxruntime run.

The graph is the imported one after constant folding only: BatchNorm stays a node of its own, as in an eager
PyTorch model; ``torch.compile`` may fuse what it likes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from tensortune.graph.ir import Graph
from tensortune.operators import (LRN, Add, BatchNorm, Clip, Concat, Conv, Dense, Div, HardSigmoid, HardSwish,
                                  Identity, LeakyRelu, MatMul, Mul, Pool, PoolKind, PRelu, Relu, Reshape, Sigmoid,
                                  Softmax, Sub, Tanh)


def _conv(op: Conv, x, w, *rest):
    t, l, b, r = op.pads
    if (t, l) != (b, r):
        x, pad = F.pad(x, (l, r, t, b)), (0, 0)
    else:
        pad = (t, l)
    y = F.conv2d(x, w, rest[0] if op.has_bias else None, op.strides, pad, op.dilations, op.groups)
    assert not op.epilogue, "the torch executor runs unfused graphs"
    return y


def _pool(op: Pool, x):
    t, l, b, r = op.pads
    if op.kernel_shape == tuple(x.shape[2:]) and not any(op.pads):
        return (F.adaptive_max_pool2d if op.mode is PoolKind.MAX else F.adaptive_avg_pool2d)(x, 1)
    assert (t, l) == (b, r), "asymmetric pool pads"
    if op.mode is PoolKind.MAX:
        return F.max_pool2d(x, op.kernel_shape, op.strides, (t, l), op.dilations, op.ceil_mode)
    return F.avg_pool2d(x, op.kernel_shape, op.strides, (t, l), op.ceil_mode, op.count_include_pad)


_RUN = {
    Conv: _conv,
    BatchNorm: lambda op, x, g, b, m, v: F.batch_norm(x, m, v, g, b, False, 0.0, op.epsilon),
    Relu: lambda op, x: F.relu(x),
    Clip: lambda op, x: torch.clamp(x, op.low, op.high),
    Sigmoid: lambda op, x: torch.sigmoid(x),
    HardSwish: lambda op, x: F.hardswish(x),
    Tanh: lambda op, x: torch.tanh(x),
    LeakyRelu: lambda op, x: F.leaky_relu(x, op.alpha),
    HardSigmoid: lambda op, x: torch.clamp(x * op.alpha + op.beta, 0, 1),
    Add: lambda op, a, b: torch.add(a, b),
    Sub: lambda op, a, b: torch.sub(a, b),
    Mul: lambda op, a, b: torch.mul(a, b),
    Div: lambda op, a, b: torch.div(a, b),
    PRelu: lambda op, x, s: torch.where(x >= 0, x, x * s),
    LRN: lambda op, x: F.local_response_norm(x, op.size, op.alpha, op.beta, op.bias),
    Pool: _pool,
    Reshape: lambda op, x: x.reshape(op.shape),
    Identity: lambda op, x: x,
    MatMul: lambda op, a, b: torch.matmul(a, b),
    Dense: lambda op, x, w, *b: F.linear(x, w, b[0] if op.has_bias else None),
    Concat: lambda op, *xs: torch.cat(xs, op.axis),
    Softmax: lambda op, x: torch.softmax(x, op.axis),
}


class GraphModule(torch.nn.Module):
    """``module(x)``: the graph's first output for its (single) input."""

    def __init__(self, g: Graph):
        super().__init__()
        self.g = g
        self.consts = {k: torch.from_numpy(v.copy()) for k, v in g.constants.items()}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        env = dict(self.consts)
        env[self.g.inputs[0]] = x
        for node in self.g.nodes:
            env[node.outputs[0]] = _RUN[type(node.op)](node.op, *[env[i] for i in node.inputs])
        return env[self.g.outputs[0]]

"""Normalizations over channels: ``BatchNorm`` at inference (folded into a convolution or into a per-channel scale
and shift by ``passes.fold_batchnorm``, so it has no kernel of its own) and ``LRN`` (local response normalization
across channels)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node
from ..graph.op import LayoutRule, Op, Pattern, check_count, check_float, check_ints
from ..schedule import create_schedule
from ..target import Target
from .kernel import KernelArgs, KernelDef, clamp, lanes_of, logical_index, read, schedule_reductions
from .onnx_convert import ImportContext, OnnxNode, Reject, converter, only_output


@dataclass(frozen=True, slots=True)
class BatchNorm(Op):
    """Inference batch normalization over channel axis 1: inputs x, scale, bias, mean, variance."""

    pattern = Pattern.BROADCAST
    epsilon: float = 1e-5

    def infer(self, inputs):
        check_count(self, inputs, 5)
        x = inputs[0]
        if len(x.shape) < 2:
            raise GraphError(f"BatchNorm: the input needs a channel axis, got shape {x.shape}")
        for t, what in zip(inputs[1:], ("scale", "bias", "mean", "variance")):
            if t.shape != (x.shape[1],):
                raise GraphError(f"BatchNorm: the {what} must have shape ({x.shape[1]},), got {t.shape}")
        return (x,)

    def reference(self, x, scale, bias, mean, var) -> np.ndarray:
        shape = (1, -1) + (1,) * (x.ndim - 2)
        k = scale / np.sqrt(var + np.asarray(self.epsilon, var.dtype))
        return (x * k.reshape(shape) + (bias - mean * k).reshape(shape)).astype(x.dtype)


@converter("BatchNormalization", attrs=("epsilon", "momentum", "spatial", "training_mode"))
def _batchnorm(ctx: ImportContext, node: OnnxNode) -> None:
    if node.attr("spatial", 1) != 1:
        raise Reject("spatial=0 (statistics per element) is not supported")
    if node.attr("training_mode", 0):
        raise Reject("training_mode=1 is not supported at inference")
    only_output(node, "running mean and variance")
    ctx.emit(BatchNorm(float(node.attr("epsilon", 1e-5))), node.inputs[:5], node.outputs[:1], node.name)


@dataclass(frozen=True, slots=True)
class LRN(Op):
    """Local response normalization across channels (axis 1)."""

    pattern = Pattern.OPAQUE
    layout_rule = LayoutRule.WINDOW
    size: int
    alpha: float = 1e-4
    beta: float = 0.75
    bias: float = 1.0

    def __post_init__(self) -> None:
        check_ints(self, "size", (self.size,), 1)

    def infer(self, inputs):
        check_count(self, inputs, 1)
        if len(inputs[0].shape) < 2:
            raise GraphError(f"LRN: the input needs a channel axis, got shape {inputs[0].shape}")
        check_float(self, inputs[0], "the input")
        return (inputs[0],)

    def reference(self, x: np.ndarray) -> np.ndarray:
        c = x.shape[1]
        lo, hi = (self.size - 1) // 2, -(-(self.size - 1) // 2)
        sq = np.pad(x.astype(np.float64) ** 2, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
        total = sum(sq[:, k:k + c] for k in range(self.size))
        return (x / (self.bias + self.alpha / self.size * total) ** self.beta).astype(x.dtype)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        a = KernelArgs(g)
        xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
        x = a.value(node.inputs[0], "data")
        c = xv.shape[1]
        lo = (self.size - 1) // 2
        k = te.reduce_axis(self.size, "k")
        dt = out_v.dtype

        def sq_body(*ax):
            idx = list(logical_index(out_v.layout, ax))
            ch = idx[1] + k - lo
            idx[1] = clamp(ch, c - 1)
            v = read(x, xv.layout, idx)
            return te.sum(te.select(te.logical_and(ch >= 0, ch < c), v * v, te.const(0, dt)), axis=k)

        shape = out_v.layout.storage_shape(out_v.shape)
        sq = te.compute(shape, sq_body, "square_sum")
        scale = te.const(self.alpha / self.size, dt)
        assert xv.layout == out_v.layout, "LRN reads and writes one layout"
        out = te.compute(shape, lambda *ax: x[ax] / te.exp(te.const(self.beta, dt) * te.log(
            te.const(self.bias, dt) + scale * sq[ax])), "out")
        s = create_schedule(out)
        schedule_reductions(s, [sq, out], lanes_of(target, dt, node))
        return a.done("lrn", node, out, s)


@converter("LRN", attrs=("alpha", "beta", "bias", "size"))
def _lrn(ctx: ImportContext, node: OnnxNode) -> None:
    op = LRN(int(node.attr("size")), float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)),
             float(node.attr("bias", 1.0)))
    ctx.emit(op, [node.input(0)], node.outputs, node.name)

"""Layer normalization (ONNX LayerNormalization, opset 17): each row of the axes from ``axis`` on is normalized to
zero mean and unit variance, then scaled and shifted elementwise.

``y = (x - mean) / sqrt(var + epsilon) * scale + bias``, with the mean and the (biased) variance over the row.
Statistics are computed in float32 whatever the input's float type (ONNX's ``stash_type`` 1), in two passes over
the row: the mean first, summing each element's difference from the row's first element (a row far from zero mean
loses no precision to large summands), then the squared deviations from the mean (none lost to cancellation).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node
from ..graph.op import Op, broadcast_shapes, check_count, check_float
from ..schedule import create_schedule
from ..target import Target
from .kernel import KernelArgs, KernelDef, lanes_of, read_broadcast, schedule_reductions
from .onnx_convert import ImportContext, OnnxNode, Reject, axis, converter, only_output


@dataclass(frozen=True, slots=True)
class LayerNorm(Op):
    """Normalize over the axes ``axis`` to the last; inputs x, scale and (when ``has_bias``) bias, each of the
    normalized axes' shape or broadcasting to it."""

    axis: int
    epsilon: float = 1e-5
    has_bias: bool = True

    def infer(self, inputs):
        check_count(self, inputs, 3 if self.has_bias else 2)
        x = inputs[0]
        check_float(self, x, "the input")
        if not 0 <= self.axis < len(x.shape):
            raise GraphError(f"LayerNorm: axis {self.axis} is out of range for shape {x.shape}")
        row = x.shape[self.axis:]
        for t, what in zip(inputs[1:], ("scale", "bias")):
            if len(t.shape) > len(row) or broadcast_shapes(self, t.shape, row) != row or t.dtype != x.dtype:
                raise GraphError(f"LayerNorm: the {what} {t} must broadcast to the normalized axes {row} of {x}")
        return (x,)

    def reference(self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
        axes = tuple(range(self.axis, x.ndim))
        x64 = x.astype(np.float64)
        mean = x64.mean(axis=axes, keepdims=True)
        var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
        y = (x64 - mean) / np.sqrt(var + self.epsilon) * scale
        return (y if bias is None else y + bias).astype(x.dtype)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        a = KernelArgs(g)
        xv = g.values[node.inputs[0]]
        x = a.value(node.inputs[0], "data")
        params = [(a.value(i, hint), g.values[i], a.layout(i)) for i, hint in zip(node.inputs[1:], ("scale", "bias"))]
        shape, dtype = xv.shape, xv.dtype
        outer, row = shape[:self.axis], shape[self.axis:]
        stat_shape = outer or (1,)

        def f32(e):
            return e if dtype == "float32" else e.astype("float32")

        def at(o, r):
            return x[(*o[:len(outer)], *r)]

        def reduce_axes(name):
            return [te.reduce_axis(d, f"{name}{k}") for k, d in enumerate(row)]

        inv = te.const(1.0 / math.prod(row), "float32")
        r1, r2 = reduce_axes("r"), reduce_axes("q")
        zero = [te.const(0, "int32")] * len(row)
        shifted = te.compute(stat_shape, lambda *o: te.sum(f32(at(o, r1)) - f32(at(o, zero)), axis=r1), "row_sum")
        mean = te.compute(stat_shape, lambda *o: f32(at(o, zero)) + shifted[o] * inv, "row_mean")

        def squares(*o):
            d = f32(at(o, r2)) - mean[o]
            return te.sum(d * d, axis=r2)

        sq = te.compute(stat_shape, squares, "row_squares")
        eps = te.const(self.epsilon, "float32")

        def body(*idx):
            o = idx[:len(outer)] or (te.const(0, "int32"),)
            scale, *bias = [f32(read_broadcast(t, v, lay, idx)) for t, v, lay in params]
            y = (f32(x[idx]) - mean[o]) / te.sqrt(sq[o] * inv + eps) * scale
            y = y + bias[0] if bias else y
            return y if dtype == "float32" else y.astype(dtype)

        out = te.compute(shape, body, "out")
        s = create_schedule(out)
        schedule_reductions(s, [shifted, mean, sq, out], lanes_of(target, dtype, node))
        return a.done("layer_norm", node, out, s, 8 * xv.type.size)


@converter("LayerNormalization", attrs=("axis", "epsilon", "stash_type"), since=17)
def _layer_norm(ctx: ImportContext, node: OnnxNode) -> None:
    only_output(node, "mean and inverse standard deviation")
    if int(node.attr("stash_type", 1)) != 1:
        raise Reject(f"stash_type {node.attr('stash_type')} is not supported (statistics are computed in float32)")
    x, scale, bias = node.input(0), node.input(1), node.input(2)
    op = LayerNorm(axis(int(node.attr("axis", -1)), len(ctx.shape(x))), float(node.attr("epsilon", 1e-5)),
                   bias is not None)
    ctx.emit(op, [x, scale] + ([bias] if bias else []), node.outputs[:1], node.name)

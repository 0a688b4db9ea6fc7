"""``Softmax`` along one axis (ONNX Softmax of every opset: before 13 the input is normalized as a 2-D matrix
whose rows start at ``axis``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node
from ..graph.op import Op, Pattern, check_count, check_float
from ..schedule import create_schedule
from ..target import Target
from .kernel import KernelArgs, KernelDef, lanes_of, schedule_reductions
from .onnx_convert import ImportContext, OnnxNode, axis, converter
from .reshape import Reshape


@dataclass(frozen=True, slots=True)
class Softmax(Op):
    """Softmax along one axis."""

    pattern = Pattern.OPAQUE
    axis: int

    def infer(self, inputs):
        check_count(self, inputs, 1)
        check_float(self, inputs[0], "the input")
        if not 0 <= self.axis < len(inputs[0].shape):
            raise GraphError(f"Softmax: axis {self.axis} is out of range for shape {inputs[0].shape}")
        return (inputs[0],)

    def reference(self, x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(axis=self.axis, keepdims=True))
        return (e / e.sum(axis=self.axis, keepdims=True)).astype(x.dtype)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        a = KernelArgs(g)
        ax = self.axis
        xv = g.values[node.inputs[0]]
        x = a.value(node.inputs[0], "data")
        shape = xv.shape
        red_shape = tuple(1 if d == ax else n for d, n in enumerate(shape))
        k1, k2 = te.reduce_axis(shape[ax], "k"), te.reduce_axis(shape[ax], "j")

        def at(idx, k):
            src = list(idx)
            src[ax] = k
            return tuple(src)

        mx = te.compute(red_shape, lambda *i: te.max(x[at(i, k1)], axis=k1), "row_max")
        zero = te.const(0, "int32")
        ex = te.compute(shape, lambda *i: te.exp(x[i] - mx[at(i, zero)]), "exp")
        sm = te.compute(red_shape, lambda *i: te.sum(ex[at(i, k2)], axis=k2), "row_sum")
        out = te.compute(shape, lambda *i: ex[i] / sm[at(i, zero)], "out")
        s = create_schedule(out)
        schedule_reductions(s, [mx, ex, sm, out], lanes_of(target, xv.dtype, node))
        return a.done("softmax", node, out, s)


@converter("Softmax", attrs=("axis",), since=13)
def _softmax(ctx: ImportContext, node: OnnxNode) -> None:
    x = node.input(0)
    ctx.emit(Softmax(axis(int(node.attr("axis", -1)), len(ctx.shape(x)))), [x], node.outputs, node.name)


@converter("Softmax", attrs=("axis",), until=12)
def _softmax_2d(ctx: ImportContext, node: OnnxNode) -> None:
    """Before opset 13 the input is coerced to 2-D at ``axis`` and normalized over the second dimension."""
    x = node.input(0)
    shape = ctx.shape(x)
    a = axis(int(node.attr("axis", 1)), len(shape))
    if a == len(shape) - 1:
        ctx.emit(Softmax(a), [x], node.outputs, node.name)
        return
    flat = (math.prod(shape[:a]), math.prod(shape[a:]))
    (x2,) = ctx.emit(Reshape(flat), [x], None, f"{node.name}_2d")
    (y2,) = ctx.emit(Softmax(1), [x2], None, node.name)
    ctx.emit(Reshape(shape), [y2], node.outputs, f"{node.name}_nd")

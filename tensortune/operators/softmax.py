"""``Softmax`` along one axis, its logarithm and ``Hardmax`` (ONNX Softmax, LogSoftmax and Hardmax of every opset:
before 13 the input is normalized as a 2-D matrix whose rows start at ``axis``). Kernels compute 16-bit floats in
float32."""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node
from ..graph.op import Op, Pattern, check_count, check_float
from ..schedule import create_schedule
from ..target import Target
from .kernel import KernelArgs, KernelDef, lanes_of, schedule_reductions
from .rows import lane_reduce, schedule_by_rows
from .onnx_convert import ImportContext, OnnxNode, axis, converter
from .reshape import Reshape


class SoftmaxKind(Enum):
    """What is computed along the axis, by ONNX name: softmax, its logarithm (``x - max - log(sum(exp(x - max)))``,
    no exponential overflows), or Hardmax (1 at the first largest element, 0 elsewhere)."""

    SOFTMAX = "Softmax"
    LOG_SOFTMAX = "LogSoftmax"
    HARDMAX = "Hardmax"


@dataclass(frozen=True, slots=True)
class Softmax(Op):
    """Softmax (or ``mode``: its logarithm, Hardmax) along one axis."""

    pattern = Pattern.OPAQUE
    axis: int
    mode: SoftmaxKind = SoftmaxKind.SOFTMAX

    def __str__(self) -> str:
        return f"{self.mode.value}[axis={self.axis}]"

    def infer(self, inputs):
        check_count(self, inputs, 1)
        check_float(self, inputs[0], "the input")
        if not 0 <= self.axis < len(inputs[0].shape):
            raise GraphError(f"{self.mode.value}: axis {self.axis} is out of range for shape {inputs[0].shape}")
        return (inputs[0],)

    def reference(self, x: np.ndarray) -> np.ndarray:
        if self.mode is SoftmaxKind.HARDMAX:
            first = np.expand_dims(np.argmax(x.astype(np.float64), axis=self.axis), self.axis)
            return (np.arange(x.shape[self.axis]).reshape([-1 if d == self.axis else 1 for d in range(x.ndim)])
                    == first).astype(x.dtype)
        if self.mode is SoftmaxKind.LOG_SOFTMAX:
            s = x.astype(np.float64) - x.max(axis=self.axis, keepdims=True)
            return (s - np.log(np.exp(s).sum(axis=self.axis, keepdims=True))).astype(x.dtype)
        e = np.exp(x - x.max(axis=self.axis, keepdims=True))
        return (e / e.sum(axis=self.axis, keepdims=True)).astype(x.dtype)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        a = KernelArgs(g)
        ax = self.axis
        xv = g.values[node.inputs[0]]
        x = a.value(node.inputs[0], "data")
        shape, dtype = xv.shape, xv.dtype
        red_shape = tuple(1 if d == ax else n for d, n in enumerate(shape))
        k2 = te.reduce_axis(shape[ax], "j")

        def at(idx, k):
            src = list(idx)
            src[ax] = k
            return tuple(src)

        def f32(e):
            return e if dtype in ("float32", "float64") else e.astype("float32")

        lanes = lanes_of(target, xv.dtype, node)
        last = ax == len(shape) - 1  # rows of the last axis: their maximum and sum in vector lanes, row by row
        mx_stages = lane_reduce(red_shape, (shape[ax],), lambda o, r: f32(x[at(o, r[0])]), lanes if last else 1,
                                te.max, "row_max")
        mx = mx_stages[-1]
        zero = te.const(0, "int32")
        if self.mode is SoftmaxKind.HARDMAX:  # the first index holding the maximum
            n = te.const(shape[ax], "int32")
            first = te.compute(red_shape, lambda *i: te.min(te.select(te.equal(f32(x[at(i, k2)]), mx[at(i, zero)]),
                                                                       k2.var, n), axis=k2), "first_max")
            out = te.compute(shape, lambda *i: te.select(te.equal(i[ax], first[at(i, zero)]), te.const(1, dtype),
                                                         te.const(0, dtype)), "out")
            stages = [mx, first, out]
        else:  # the exponentials as a stage of their own, computed in whole vectors (in a sum, one expf each)
            ex = te.compute(shape, lambda *i: te.exp(f32(x[i]) - mx[at(i, zero)]), "exp")
            sm_stages = lane_reduce(red_shape, (shape[ax],), lambda o, r: ex[at(o, r[0])], lanes if last else 1,
                                    te.sum, "row_sum")
            sm = sm_stages[-1]
            if self.mode is SoftmaxKind.LOG_SOFTMAX:  # x - (max + log(sum)): one log per row
                lse = te.compute(red_shape, lambda *i: mx[i] + te.log(sm[i]), "log_sum_exp")
                out = te.compute(shape, lambda *i: (f32(x[i]) - lse[at(i, zero)]).astype(dtype), "out")
                stages = [*mx_stages, ex, *sm_stages, lse, out]
            else:
                out = te.compute(shape, lambda *i: (ex[i] / sm[at(i, zero)]).astype(dtype), "out")
                stages = [*mx_stages, ex, *sm_stages, out]
        s = create_schedule(out)
        if last and len(shape) > 1 and self.mode is not SoftmaxKind.HARDMAX:
            schedule_by_rows(s, out, stages[:-1], len(shape) - 1, lanes)
        else:
            schedule_reductions(s, stages, lanes)
        return a.done("softmax", node, out, s)


@converter("Softmax", "LogSoftmax", "Hardmax", attrs=("axis",), since=13)
def _softmax(ctx: ImportContext, node: OnnxNode) -> None:
    x = node.input(0)
    op = Softmax(axis(int(node.attr("axis", -1)), len(ctx.shape(x))), SoftmaxKind(node.op_type))
    ctx.emit(op, [x], node.outputs, node.name)


@converter("Softmax", "LogSoftmax", "Hardmax", attrs=("axis",), until=12)
def _softmax_2d(ctx: ImportContext, node: OnnxNode) -> None:
    """Before opset 13 the input is coerced to 2-D at ``axis`` and normalized over the second dimension."""
    x = node.input(0)
    shape = ctx.shape(x)
    a = axis(int(node.attr("axis", 1)), len(shape))
    mode = SoftmaxKind(node.op_type)
    if a == len(shape) - 1:
        ctx.emit(Softmax(a, mode), [x], node.outputs, node.name)
        return
    flat = (math.prod(shape[:a]), math.prod(shape[a:]))
    (x2,) = ctx.emit(Reshape(flat), [x], None, f"{node.name}_2d")
    (y2,) = ctx.emit(Softmax(1, mode), [x2], None, node.name)
    ctx.emit(Reshape(shape), [y2], node.outputs, f"{node.name}_nd")

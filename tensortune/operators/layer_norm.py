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
from typing import Callable, Sequence

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node
from ..graph.op import Op, broadcast_shapes, check_count, check_float
from ..schedule import create_schedule
from ..target import Target
from .kernel import KernelArgs, KernelDef, lanes_of, read_broadcast, schedule_reductions
from .rows import lane_reduce, schedule_by_rows
from .onnx_convert import ImportContext, OnnxNode, Reject, axis, converter, only_output


def as_float32(e: te.Expr) -> te.Expr:
    """``e`` in float32, where statistics and normalization are computed whatever the tensor's float type."""
    return te.cast("float32", e)


def normalized_rows(x: np.ndarray, axes: tuple[int, ...], epsilon: float) -> np.ndarray:
    """``x`` (in float64) normalized to zero mean and unit variance over ``axes``: the numpy reference."""
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x64 - mean) / np.sqrt(var + epsilon)


@dataclass(frozen=True)
class RowStatistics:
    """The stages computing, for each row, its mean and the sum of its squared deviations from it (two passes,
    see the module docstring), and how an element of the row is normalized with them."""

    stages: tuple[te.Tensor, ...]
    mean: te.Tensor
    squares: te.Tensor
    count: int

    def normalized(self, value: te.Expr, row: Sequence[te.Expr], epsilon: float) -> te.Expr:
        """``(value - mean) / sqrt(var + epsilon)`` of row ``row`` (float32)."""
        var = self.squares[tuple(row)] * te.const(1.0 / self.count, "float32")
        return (value - self.mean[tuple(row)]) / te.sqrt(var + te.const(epsilon, "float32"))


def row_statistics(rows: tuple[int, ...], row: tuple[int, ...], at: Callable[[tuple, tuple], te.Expr],
                   lanes: int = 1) -> RowStatistics:
    """The statistics of rows indexed by ``rows`` (a shape), each of shape ``row``; ``at(o, r)``: element ``r`` of
    row ``o``, in float32. Shared by the normalizations over rows (layer, group and instance normalization). With
    ``lanes``, each sum in vector lanes where they divide the row's last axis (``rows.lane_reduce``)."""
    inv = te.const(1.0 / math.prod(row), "float32")
    zero = (te.const(0, "int32"),) * len(row)
    shifted = lane_reduce(rows, row, lambda o, r: at(o, r) - at(o, zero), lanes, te.sum, "row_sum")
    mean = te.compute(rows, lambda *o: at(o, zero) + shifted[-1][o] * inv, "row_mean")

    def deviation(o, r):
        d = at(o, r) - mean[o]
        return d * d

    sq = lane_reduce(rows, row, deviation, lanes, te.sum, "row_squares")
    return RowStatistics((*shifted, mean, *sq), mean, sq[-1], math.prod(row))


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
        y = normalized_rows(x, tuple(range(self.axis, x.ndim)), self.epsilon) * scale
        return (y if bias is None else y + bias).astype(x.dtype)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        a = KernelArgs(g)
        xv = g.values[node.inputs[0]]
        x = a.value(node.inputs[0], "data")
        params = [(a.value(i, hint), g.values[i], a.layout(i)) for i, hint in zip(node.inputs[1:], ("scale", "bias"))]
        shape, dtype = xv.shape, xv.dtype
        outer, row = shape[:self.axis], shape[self.axis:]
        lanes = lanes_of(target, dtype, node)
        stats = row_statistics(outer or (1,), row, lambda o, r: as_float32(x[(*o[:len(outer)], *r)]), lanes)

        def body(*idx):
            o = idx[:len(outer)] or (te.const(0, "int32"),)
            scale, *bias = [as_float32(read_broadcast(t, v, lay, idx)) for t, v, lay in params]
            y = stats.normalized(as_float32(x[idx]), o, self.epsilon) * scale
            y = y + bias[0] if bias else y
            return y.astype(dtype)

        out = te.compute(shape, body, "out")
        s = create_schedule(out)
        if outer:
            schedule_by_rows(s, out, stats.stages, len(outer), lanes)
        else:  # one row
            schedule_reductions(s, [*stats.stages, out], lanes)
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

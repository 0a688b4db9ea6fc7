"""ONNX ``TopK``: the ``k`` largest (or smallest) elements along an axis and their positions, imported as
``TopKIndices`` (the positions, sorted) and a ``GatherElements`` of the input at them (the values). Its kernel ranks
each element by counting the elements that come before it (larger, or equal at a lower position, as onnxruntime
orders ties), then finds the element of each rank below ``k``: ``n * n`` comparisons per line, quick for the short
axes models take the top of (experts, boxes, beams), slow for a long one (a vocabulary)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node, TensorType
from ..graph.op import Op, Pattern, check_count, is_float
from ..schedule import create_schedule
from ..target import Target
from .indexing import GatherElements
from .kernel import KernelArgs, KernelDef, lanes_of, schedule_reductions
from .onnx_convert import ImportContext, OnnxNode, Reject, axis, converter, ints


@dataclass(frozen=True, slots=True)
class TopKIndices(Op):
    """The int64 positions along ``axis`` of the ``k`` largest elements (``largest``) or smallest, in that order;
    equal elements in the order of their positions."""

    pattern = Pattern.OPAQUE
    axis: int
    k: int
    largest: bool = True

    def infer(self, inputs):
        check_count(self, inputs, 1)
        x = inputs[0]
        if not 0 <= self.axis < len(x.shape):
            raise GraphError(f"TopK: axis {self.axis} is out of range for shape {x.shape}")
        if not 1 <= self.k <= x.shape[self.axis]:
            raise GraphError(f"TopK: k={self.k} must be 1 to the length {x.shape[self.axis]} of axis {self.axis}")
        if x.dtype == "bool" or not (is_float(x.dtype) or np.issubdtype(np.dtype(x.dtype), np.integer)):
            raise GraphError(f"TopK of {x.dtype} elements")
        shape = list(x.shape)
        shape[self.axis] = self.k
        return (TensorType(tuple(shape), "int64"),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        a, n = self.axis, x.shape[self.axis]
        if self.largest:  # a stable sort of the reversed line keeps equal elements in the order of their positions
            order = n - 1 - np.flip(np.argsort(np.flip(x, a), axis=a, kind="stable"), a)
        else:
            order = np.argsort(x, axis=a, kind="stable")
        return np.take(order, range(self.k), axis=a).astype(np.int64)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        xv = g.values[node.inputs[0]]
        shape, n = xv.shape, xv.shape[self.axis]
        view = (math.prod(shape[:self.axis]), n, math.prod(shape[self.axis + 1:]))
        a = KernelArgs(g)
        x = a.value(node.inputs[0], "in", view)
        e = te.reduce_axis(n, "e")

        def before(o, j, i):  # elements that come before element j of its line
            xe, xj = x[o, e, i], x[o, j, i]
            first = xe > xj if self.largest else xe < xj
            return te.sum(te.select(first | (te.equal(xe, xj) & (e < j)), 1, 0), axis=e)

        rank = te.compute(view, before, "rank")
        j = te.reduce_axis(n, "j")
        found = te.compute((view[0], self.k, view[2]), lambda o, r, i: te.max(
            te.select(te.equal(rank[o, j, i], r), j, -1), axis=j), "found")
        out = te.compute(found.shape, lambda o, r, i: found[o, r, i].astype("int64"), "out")
        s = create_schedule(out)
        schedule_reductions(s, [rank, found, out], lanes_of(target, "int64", node))
        return a.done("topk", node, out, s)


def _topk(ctx: ImportContext, node: OnnxNode, k: int) -> None:
    x = node.input(0)
    shape = ctx.shape(x)
    ax = axis(int(node.attr("axis", -1)), len(shape))
    if not 1 <= k <= shape[ax]:
        raise Reject(f"k={k} must be 1 to the length {shape[ax]} of axis {ax} (empty outputs are not supported)")
    values, indices = (node.outputs + ["", ""])[:2]
    (found,) = ctx.emit(TopKIndices(ax, k, bool(node.attr("largest", 1))), [x], [indices] if indices else None,
                        node.name)
    if values:
        ctx.emit(GatherElements(ax), [x, found], [values], f"{node.name}_values")


@converter("TopK", attrs=("axis", "k"), until=9)
def _topk_attribute(ctx: ImportContext, node: OnnxNode) -> None:
    _topk(ctx, node, int(node.attr("k")))


@converter("TopK", attrs=("axis", "largest", "sorted"), since=10)
def _topk_input(ctx: ImportContext, node: OnnxNode) -> None:
    k = ints(ctx.need_static(node, 1, "k"))
    if len(k) != 1:
        raise Reject(f"k must be one integer, got {k}")
    _topk(ctx, node, k[0])  # unsorted results may come in any order: they come sorted

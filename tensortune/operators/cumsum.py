"""``CumSum``: running sums along one axis (the position ids computed from an attention mask), inclusive or
exclusive, forward or reverse. Its kernel is a scan (``te.scan``): each element is the one before it plus one input
element, in order along the axis, while the lines across the other axes run in parallel and as vectors."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node
from ..graph.op import Op, Pattern, check_count, numpy_dtype
from ..schedule import create_schedule
from ..target import Target
from .kernel import KernelArgs, KernelDef, lanes_of
from .onnx_convert import ImportContext, OnnxNode, Reject, axis, converter, ints

#: lines of at least this many elements in all run in parallel
MIN_PARALLEL = 1 << 14


@dataclass(frozen=True, slots=True)
class CumSum(Op):
    """The sum of the elements up to each one along ``axis``: ``exclusive`` leaves the element itself out (the first
    sum is zero), ``reverse`` sums from the end of the axis. Integers wrap; float16 and bfloat16 sum in float32 (as
    onnxruntime does), each output rounded once."""

    pattern = Pattern.OPAQUE
    axis: int
    exclusive: bool = False
    reverse: bool = False

    def infer(self, inputs):
        check_count(self, inputs, 1)
        x = inputs[0]
        if not 0 <= self.axis < len(x.shape):
            raise GraphError(f"CumSum: axis {self.axis} is out of range for shape {x.shape}")
        if x.dtype == "bool":
            raise GraphError("CumSum of booleans")
        return (x,)

    def reference(self, x: np.ndarray) -> np.ndarray:
        a = self.axis
        y = np.flip(x, a) if self.reverse else x
        if self.exclusive:
            y = np.concatenate([np.zeros_like(np.take(y, [0], a)), np.take(y, range(y.shape[a] - 1), a)], a)
        y = np.cumsum(y, axis=a, dtype=numpy_dtype(_sum_dtype(x.dtype.name))).astype(x.dtype)
        return np.flip(y, a) if self.reverse else y

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        """A scan over the input seen as ``[outer, n, inner]``: lines (outer, inner) in parallel, the inner ones as
        vectors, each running along the ``n`` axis. A reverse sum scans the flipped lines, and a float16 or bfloat16
        one sums in float32, into a buffer of the kernel that a second pass flips or rounds into the output."""
        xv = g.values[node.inputs[0]]
        dtype = xv.dtype
        calc = _sum_dtype(dtype)
        shape = xv.shape
        view = (math.prod(shape[:self.axis]), shape[self.axis], math.prod(shape[self.axis + 1:]))
        n = view[1]
        a = KernelArgs(g)
        x = a.value(node.inputs[0], "in", view)

        def src(o, i, j):
            return x[o, n - 1 - i if self.reverse else i, j].astype(calc)

        def step(acc, o, i, j):
            first = te.const(0, "int32")
            before = te.maximum(i - 1, first)
            if self.exclusive:
                return te.select(i > first, acc[o, before, j] + src(o, before, j), te.const(0, calc))
            return te.select(i > first, acc[o, before, j], te.const(0, calc)) + src(o, i, j)

        direct = not self.reverse and calc == dtype
        stages = [te.scan(view, calc, 1, step, "out" if direct else "scan")]
        if not direct:
            scan = stages[0]
            stages.append(te.compute(view, lambda o, i, j: scan[o, n - 1 - i if self.reverse else i, j].astype(dtype),
                                     "out"))
        s = create_schedule(stages[-1])
        lanes = lanes_of(target, dtype, node)
        for t in stages:
            _schedule_lines(s, t, lanes)
        return a.done("cumsum", node, stages[-1], s, xv.type.size)


def _sum_dtype(dtype: str) -> str:
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def _schedule_lines(s, t: te.Tensor, lanes: int) -> None:
    """Loops ``[outer, inner / lanes]`` (fused, in parallel when there are enough elements), ``n`` in order, then
    ``lanes`` lines as one vector; where the inner lines are not whole vectors, ``outer, n, inner``."""
    st = s[t]
    o, i, j = st.axis
    lines = o
    if lanes > 1 and j.extent % lanes == 0:
        jo, ji = st.split(j, lanes)
        st.reorder(o, jo, i, ji)
        lines = st.fuse(o, jo)
        st.vectorize(ji)
    if lines.extent > 1 and math.prod(t.shape) >= MIN_PARALLEL:
        st.parallel(lines)


@converter("CumSum", attrs=("exclusive", "reverse"), since=11)
def _cumsum(ctx: ImportContext, node: OnnxNode) -> None:
    x = node.input(0)
    ax = ints(ctx.need_static(node, 1, "axis"))
    if len(ax) != 1:
        raise Reject(f"axis must be one integer, got {ax}")
    op = CumSum(axis(ax[0], len(ctx.shape(x))), bool(node.attr("exclusive", 0)), bool(node.attr("reverse", 0)))
    ctx.emit(op, [x], node.outputs, node.name)

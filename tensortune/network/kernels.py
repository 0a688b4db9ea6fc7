"""Kernels of graph nodes: each node declared as tensor expressions over the storage of its values (plain or
NCHW[x]c), with a default schedule, and the binding of each kernel argument to a graph value or to a
constant packed for the kernel (packed once at compile time).

This module holds what every kernel uses (``KernelArgs`` and ``KernelDef``, reading logical elements from
plain or blocked storage, elementwise and reduction schedules) and the kernels of the nodes that are not
convolutions (``conv.py``); ``declare.py`` picks a node's kernel. Nodes that only rename or re-view memory
(``Reshape`` and ``Identity`` on plain tensors, a ``Relayout`` that moves nothing) have no kernel: ``is_alias``
says which.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .. import te
from ..errors import TensortuneError
from ..graph.interpret import pool_divisor
from ..graph.ir import Graph, Layout, Node, Value
from ..graph.ops import (LRN, Binary, Cast, Identity, Math, Pad, PadMode, Pool, PoolKind, Relayout, Reshape, Slice,
                         Unary, binary_formula, unary_formula)
from ..schedule import Schedule, create_schedule
from ..target import Target
from ..te import Expr, Tensor


class NetworkCompileError(TensortuneError, ValueError):
    """A graph node cannot be compiled (a kind of node or input the kernels do not handle)."""


@dataclass(frozen=True)
class Arg:
    """A kernel argument: a graph value (stored in its layout) or a constant packed for this kernel."""

    value: str | None = None
    const: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        assert (self.value is None) != (self.const is None), "an argument is a value or a constant"


@dataclass
class KernelDef:
    """One node's kernel before lowering: its schedule, its arguments (inputs, then the output) and their
    bindings, and ``key``: everything that decides its code (two nodes with equal keys share one kernel)."""

    kind: str
    schedule: Schedule
    tensors: tuple[Tensor, ...]
    args: tuple[Arg, ...]
    key: tuple
    flops: int = 0
    template: str | None = None  # the tuning template whose config scheduled it, if any


# ------------------------------------------------------------------------------------------- storage and reads

def storage_index(layout: Layout, idx: Sequence[Expr]) -> tuple[Expr, ...]:
    """The storage index of logical element ``idx`` of a tensor in ``layout``."""
    if not layout.blocked:
        return tuple(idx)
    n, c, h, w = idx
    return (n, c // layout.block, h, w, c % layout.block)


def logical_index(layout: Layout, axes: Sequence[Expr]) -> tuple[Expr, ...]:
    """The logical index of the element at storage ``axes``."""
    if not layout.blocked:
        return tuple(axes)
    n, cb, h, w, b = axes
    return (n, cb * layout.block + b, h, w)


def read(t: Tensor, layout: Layout, idx: Sequence[Expr]) -> Expr:
    return t[storage_index(layout, idx)]


def read_broadcast(t: Tensor, v: Value, layout: Layout, idx: Sequence[Expr]) -> Expr:
    """Element ``idx`` of an output that ``v`` broadcasts to (numpy rules: trailing axes align)."""
    off = len(idx) - len(v.shape)
    own = [te.const(0, "int32") if d == 1 else idx[off + k] for k, d in enumerate(v.shape)]
    return read(t, layout, own) if len(own) else t[(te.const(0, "int32"),)]


def storage_compute(out: Value, body: Callable[[tuple[Expr, ...]], Expr], name: str = "out") -> Tensor:
    """``out``'s storage computed elementwise from the logical index of each element."""
    return te.compute(out.layout.storage_shape(out.shape), lambda *axes: body(logical_index(out.layout, axes)), name)


class TeMath(Math):
    """Tensor-expression functions on expressions of one dtype."""

    def __init__(self, dtype):
        self.dtype = dtype

    def const(self, value: float) -> Expr:
        return te.const(value, self.dtype)

    maximum = staticmethod(te.maximum)
    minimum = staticmethod(te.minimum)
    exp = staticmethod(te.exp)
    tanh = staticmethod(te.tanh)


def unary_expr(op: Unary, x: Expr) -> Expr:
    return unary_formula(op, x, TeMath(x.dtype))


def binary_expr(op: Binary, a: Expr, b: Expr) -> Expr:
    return binary_formula(op, a, b, TeMath(a.dtype))


# ------------------------------------------------------------------------------------------- arguments

class KernelArgs:
    """The placeholders of one kernel and what each is bound to, in order; ``done`` makes the ``KernelDef``."""

    def __init__(self, g: Graph):
        self.g = g
        self.tensors: list[Tensor] = []
        self.args: list[Arg] = []
        self.key: list = []

    def value(self, name: str, hint: str, view: tuple[int, ...] | None = None) -> Tensor:
        """A placeholder for graph value ``name`` in its storage layout, or seen with the shape ``view`` of the same
        elements in the same order (a constant, bound as an array, is reshaped to it)."""
        v = self.g.values[name]
        if self.g.is_constant(name):
            array = self.g.constants[name]
            return self.const(array if view is None else array.reshape(view), hint)
        shape = view or v.layout.storage_shape(v.shape) or (1,)
        assert math.prod(shape) == v.type.size, (shape, v)
        t = te.placeholder(shape, v.dtype, f"{hint}{len(self.tensors)}")
        self.tensors.append(t)
        self.args.append(Arg(value=name))
        self.key.append(("value", v.shape, v.layout.block, v.dtype))
        return t

    def const(self, array: np.ndarray, hint: str) -> Tensor:
        array = np.ascontiguousarray(array).reshape(array.shape or (1,))
        t = te.placeholder(array.shape, array.dtype.name, f"{hint}{len(self.tensors)}")
        self.tensors.append(t)
        self.args.append(Arg(const=array))
        self.key.append(("const", array.shape, array.dtype.name))
        return t

    def done(self, kind: str, node: Node, out: Tensor, s: Schedule, flops: int = 0, extra_key: tuple = ()) -> KernelDef:
        v = self.g.values[node.outputs[0]]
        key = (kind, node.op, tuple(self.key), v.shape, v.layout.block, v.dtype) + extra_key
        return KernelDef(kind, s, tuple(self.tensors) + (out,), tuple(self.args) + (Arg(value=node.outputs[0]),),
                         key, flops)


# ------------------------------------------------------------------------------------------- schedules

def schedule_elementwise(s: Schedule, t: Tensor, lanes: int, min_parallel: int = 1 << 14) -> None:
    """Vectorize the innermost axis when it is whole vectors; run the outer axes, fused, in parallel (when the
    tensor is big enough to be worth threads). The two innermost axes stay loops of their own, so that the
    elements of a row are addressed without division."""
    st = s[t]
    axes = list(st.axis)
    if len(axes) >= 4:
        axes = [st.fuse(*axes[:-2])] + axes[-2:]
    inner = axes[-1]
    if inner.extent % lanes == 0 and lanes > 1:
        outer, vec = st.split(inner, lanes)
        st.vectorize(vec)
        if outer.extent == 1 and len(axes) > 1:
            axes = axes[:-1]
    if math.prod(t.shape) >= min_parallel and axes[0].extent > 1:
        st.parallel(axes[0])


def schedule_reductions(s: Schedule, stages: Sequence[Tensor], lanes: int) -> None:
    """Root stages with reductions: parallel over their fused spatial axes; others elementwise."""
    for t in stages:
        st = s[t]
        if st.reduce_axis:
            spatial = list(st.axis)
            fused = st.fuse(*spatial) if len(spatial) > 1 else spatial[0]
            if fused.extent > 1 and math.prod(t.shape) >= 256:
                st.parallel(fused)
        else:
            schedule_elementwise(s, t, lanes)


def _map(args: KernelArgs, node: Node, lanes: int, body: Callable[[tuple[Expr, ...]], Expr], kind: str) -> KernelDef:
    out_v = args.g.values[node.outputs[0]]
    out = storage_compute(out_v, body)
    s = create_schedule(out)
    schedule_elementwise(s, out, lanes)
    return args.done(kind, node, out, s)


def pad_blocked(data: Tensor, pads: tuple[int, int, int, int], value: float = 0.0, name: str = "data_pad",
                block: int | None = None) -> Tensor:
    """Pad the rows and columns (axes 2, 3) of a plain or blocked NCHW tensor; ``data`` itself when no pads. With
    ``block``, a plain NCHW ``data`` is blocked as well, ``[N, C/block, H', W', block]``: the padding copy is its
    relayout too."""
    t, l, b, r = pads
    if not any(pads):
        return data
    shape = list(data.shape) if block is None else [data.shape[0], data.shape[1] // block, *data.shape[2:], block]
    h, w = shape[2], shape[3]
    shape[2], shape[3] = h + t + b, w + l + r

    def body(*ax):
        y, x = ax[2], ax[3]
        inside = te.logical_and(y >= t, y < h + t, x >= l, x < w + l)
        src = list(ax) if block is None else [ax[0], ax[1] * block + ax[4]]
        src[2:4] = y - t, x - l
        return te.select(inside, data[tuple(src)], te.const(value, data.dtype))

    return te.compute(tuple(shape), body, name)


# ------------------------------------------------------------------------------------------- elementwise nodes

def elementwise_kernel(g: Graph, node: Node, lanes: int) -> KernelDef:
    a = KernelArgs(g)
    ins = [(a.value(i, "in"), g.values[i]) for i in node.inputs]

    def body(idx):
        vals = [read_broadcast(t, v, v.layout if not g.is_constant(v.name) else Layout(), idx) for t, v in ins]
        if isinstance(node.op, Unary):
            return unary_expr(node.op, vals[0])
        if isinstance(node.op, Binary):
            return binary_expr(node.op, vals[0], vals[1])
        return vals[0]  # Relayout, Identity, Cast to the same dtype: a copy

    kind = node.op.fn.value if isinstance(node.op, (Unary, Binary)) else "copy"
    return _map(a, node, lanes, body, kind)


def transpose_kernel(g: Graph, node: Node, lanes: int) -> KernelDef:
    a = KernelArgs(g)
    x, v = a.value(node.inputs[0], "in"), g.values[node.inputs[0]]
    perm = node.op.perm

    def body(idx):
        src = [None] * len(idx)
        for k, p in enumerate(perm):
            src[p] = idx[k]
        return read(x, v.layout, src)

    return _map(a, node, lanes, body, "transpose")


def slice_kernel(g: Graph, node: Node, lanes: int) -> KernelDef:
    a = KernelArgs(g)
    x, v = a.value(node.inputs[0], "in"), g.values[node.inputs[0]]
    op: Slice = node.op
    return _map(a, node, lanes, lambda idx: read(x, v.layout, [
        i * st + s0 if st != 1 else i + s0 for i, s0, st in zip(idx, op.starts, op.steps)]), "slice")


def clamp(e: Expr, hi: int) -> Expr:
    return te.minimum(te.maximum(e, te.const(0, "int32")), te.const(hi, "int32"))


def pad_kernel(g: Graph, node: Node, lanes: int) -> KernelDef:
    a = KernelArgs(g)
    x, v = a.value(node.inputs[0], "in"), g.values[node.inputs[0]]
    op: Pad = node.op
    r = len(v.shape)

    def body(idx):
        src, inside = [], []
        for d, i in enumerate(idx):
            j, n = i - op.pads[d], v.shape[d]
            if op.mode is PadMode.REFLECT:
                j = (n - 1) - te.abs_((n - 1) - te.abs_(j)) if n > 1 else te.const(0, "int32")
            elif op.mode is PadMode.EDGE or (op.pads[d] or op.pads[d + r]):
                inside += [j >= 0, j < n] if op.mode is PadMode.CONSTANT else []
                j = clamp(j, n - 1)
            src.append(j)
        val = read(x, v.layout, src)
        if inside:
            val = te.select(te.logical_and(*inside), val, te.const(op.value, v.dtype))
        return val

    return _map(a, node, lanes, body, "pad")


def concat_kernel(g: Graph, node: Node, lanes: int) -> KernelDef:
    a = KernelArgs(g)
    parts = [(a.value(i, "in"), g.values[i]) for i in node.inputs]
    axis = node.op.axis

    def body(idx):
        offsets = np.cumsum([0] + [v.shape[axis] for _, v in parts])
        val = None
        for k in reversed(range(len(parts))):
            t, v = parts[k]
            src = list(idx)
            src[axis] = clamp(idx[axis] - int(offsets[k]), v.shape[axis] - 1)
            lay = v.layout if not g.is_constant(v.name) else Layout()
            this = read(t, lay, src)
            val = this if val is None else te.select(idx[axis] < int(offsets[k + 1]), this, val)
        return val

    return _map(a, node, lanes, body, "concat")


# ------------------------------------------------------------------------------------------- matmul

def matmul_kernel(g: Graph, node: Node, lanes: int) -> KernelDef:
    a = KernelArgs(g)
    av, bv, out_v = g.values[node.inputs[0]], g.values[node.inputs[1]], g.values[node.outputs[0]]
    if len(av.shape) < 2 or len(bv.shape) < 2:
        raise NetworkCompileError(f"MatMul '{node.name}': 1-D operands are not supported; reshape them to 2-D")
    ta, tb = a.value(node.inputs[0], "a"), a.value(node.inputs[1], "b")
    kdim = av.shape[-1]
    r = te.reduce_axis(kdim, "k")

    def body(*idx):
        batch = idx[:-2]
        ai = _bcast_index(av.shape[:-2], batch) + (idx[-2], r)
        bi = _bcast_index(bv.shape[:-2], batch) + (r, idx[-1])
        return te.sum(ta[ai] * tb[bi], axis=r)

    out = te.compute(out_v.shape, body, "out")
    s = create_schedule(out)
    schedule_reductions(s, [out], lanes)
    return a.done("matmul", node, out, s, 2 * math.prod(out_v.shape) * kdim)


def _bcast_index(shape: tuple[int, ...], batch: tuple[Expr, ...]) -> tuple[Expr, ...]:
    off = len(batch) - len(shape)
    return tuple(te.const(0, "int32") if d == 1 else batch[off + k] for k, d in enumerate(shape))


# ------------------------------------------------------------------------------------------- pooling, LRN, softmax

def pool_kernel(g: Graph, node: Node, target: Target, lanes: int) -> KernelDef:
    a = KernelArgs(g)
    op: Pool = node.op
    xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
    x = a.value(node.inputs[0], "data")
    oh, ow = out_v.shape[2], out_v.shape[3]
    t, l, b, r = op.pads
    eh = max(0, (oh - 1) * op.strides[0] + op.dilations[0] * (op.kernel[0] - 1) + 1 - (xv.shape[2] + t + b))
    ew = max(0, (ow - 1) * op.strides[1] + op.dilations[1] * (op.kernel[1] - 1) + 1 - (xv.shape[3] + l + r))
    is_max = op.mode is PoolKind.MAX
    # A max-pooling window always holds an element of the input (pads are smaller than the window), so reading the
    # nearest row or column of the input for a padded position gives the same maximum without a padded copy
    # (with dilation the nearest row may not be one the window samples: then the input is padded with -inf).
    nearest = is_max and op.dilations == (1, 1)
    dp = x if nearest else pad_blocked(x, (t, l, b + eh, r + ew), -math.inf if is_max else 0.0)
    kh, kw = te.reduce_axis(op.kernel[0], "kh"), te.reduce_axis(op.kernel[1], "kw")
    (sy, sx), (dy, dx) = op.strides, op.dilations
    shape = out_v.layout.storage_shape(out_v.shape)
    reducer = te.max if is_max else te.sum
    h, w = xv.shape[2], xv.shape[3]

    def body(*ax):
        src = list(ax)
        src[2], src[3] = ax[2] * sy + kh * dy, ax[3] * sx + kw * dx
        if nearest:
            src[2], src[3] = clamp(src[2] - t, h - 1), clamp(src[3] - l, w - 1)
        return reducer(dp[tuple(src)], axis=[kh, kw])

    acc = te.compute(shape, body, "acc" if not is_max else "out")
    stages = [acc]
    if not is_max:
        div = pool_divisor(op, xv.shape[2], xv.shape[3], (oh, ow))
        if np.all(div == div.flat[0]):
            inv = te.const(float(1.0 / div.flat[0]), out_v.dtype)
            out = te.compute(shape, lambda *ax: acc[ax] * inv, "out")
        else:
            table = a.const((1.0 / div).astype(out_v.dtype), "inv_count")
            out = te.compute(shape, lambda *ax: acc[ax] * table[ax[2], ax[3]], "out")
        stages.append(out)
    out = stages[-1]
    s = create_schedule(out)
    if dp is not x:
        p = s[dp]
        p.parallel(p.fuse(*p.axis[:3]))
    accum = s.cache_write(acc, "local") if is_max else acc
    st = s[out]
    axes = list(st.axis)
    blocked = out_v.layout.blocked
    outer = st.fuse(*axes[:3])
    if math.prod(shape) >= 4096:
        st.parallel(outer)
    if blocked:
        st.vectorize(axes[4])
        s[accum].compute_at(st, axes[3])
        ax = s[accum].axis
        s[accum].reorder(*s[accum].reduce_axis, ax[-1])
        s[accum].vectorize(ax[-1])
    else:
        s[accum].compute_at(st, axes[3])
    return a.done("pool", node, out, s, math.prod(out_v.shape) * op.kernel[0] * op.kernel[1])


def lrn_kernel(g: Graph, node: Node, lanes: int) -> KernelDef:
    a = KernelArgs(g)
    op: LRN = node.op
    xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
    x = a.value(node.inputs[0], "data")
    c = xv.shape[1]
    lo = (op.size - 1) // 2
    k = te.reduce_axis(op.size, "k")
    dt = out_v.dtype

    def sq_body(*ax):
        idx = list(logical_index(out_v.layout, ax))
        ch = idx[1] + k - lo
        idx[1] = clamp(ch, c - 1)
        v = read(x, xv.layout, idx)
        return te.sum(te.select(te.logical_and(ch >= 0, ch < c), v * v, te.const(0, dt)), axis=k)

    shape = out_v.layout.storage_shape(out_v.shape)
    sq = te.compute(shape, sq_body, "square_sum")
    scale = te.const(op.alpha / op.size, dt)
    out = te.compute(shape, lambda *ax: x[ax] / te.exp(te.const(op.beta, dt) * te.log(
        te.const(op.bias, dt) + scale * sq[ax])), "out") if xv.layout == out_v.layout else None
    assert out is not None, "LRN reads and writes one layout"
    s = create_schedule(out)
    schedule_reductions(s, [sq, out], lanes)
    return a.done("lrn", node, out, s)


def softmax_kernel(g: Graph, node: Node, lanes: int) -> KernelDef:
    a = KernelArgs(g)
    axis = node.op.axis
    xv = g.values[node.inputs[0]]
    x = a.value(node.inputs[0], "data")
    shape = xv.shape
    red_shape = tuple(1 if d == axis else n for d, n in enumerate(shape))
    k1, k2 = te.reduce_axis(shape[axis], "k"), te.reduce_axis(shape[axis], "j")

    def at(idx, k):
        src = list(idx)
        src[axis] = k
        return tuple(src)

    mx = te.compute(red_shape, lambda *i: te.max(x[at(i, k1)], axis=k1), "row_max")
    zero = te.const(0, "int32")
    ex = te.compute(shape, lambda *i: te.exp(x[i] - mx[at(i, zero)]), "exp")
    sm = te.compute(red_shape, lambda *i: te.sum(ex[at(i, k2)], axis=k2), "row_sum")
    out = te.compute(shape, lambda *i: ex[i] / sm[at(i, zero)], "out")
    s = create_schedule(out)
    schedule_reductions(s, [mx, ex, sm, out], lanes)
    return a.done("softmax", node, out, s)


# ------------------------------------------------------------------------------------------- dispatch

def is_alias(g: Graph, node: Node) -> bool:
    """Whether the node's output can share its input's memory (no kernel runs for it)."""
    op = node.op
    if isinstance(op, (Reshape, Identity)) or (isinstance(op, Cast) and op.to == g.values[node.inputs[0]].dtype):
        return not g.values[node.inputs[0]].layout.blocked and not g.values[node.outputs[0]].layout.blocked
    if isinstance(op, Relayout):
        src, dst = g.values[node.inputs[0]], g.values[node.outputs[0]]
        return src.layout == dst.layout or same_memory_order(src.shape, src.layout, dst.layout)
    return False


def same_memory_order(shape: tuple[int, ...], a: Layout, b: Layout) -> bool:
    """Whether a tensor lies in memory identically in layouts ``a`` and ``b`` (1x1 images, one channel)."""
    return len(shape) == 4 and (shape[2] * shape[3] == 1 or shape[1] == 1 or a == b)


def cast_kernel(g: Graph, node: Node, lanes: int) -> KernelDef:
    if node.op.to != g.values[node.inputs[0]].dtype:
        raise NetworkCompileError(f"Cast '{node.name}' from {g.values[node.inputs[0]].dtype} to {node.op.to} of a "
                                  "run-time tensor is not supported")
    return elementwise_kernel(g, node, lanes)


def reshape_kernel(g: Graph, node: Node, lanes: int) -> KernelDef:
    """A reshape (or cast) that must copy: row-major position of each output element in the input."""
    a = KernelArgs(g)
    xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
    x = a.value(node.inputs[0], "in")

    def body(idx):
        flat = idx[0]
        for d, n in zip(idx[1:], out_v.shape[1:]):
            flat = flat * n + d
        src, rest = [], flat
        for n in reversed(xv.shape):
            src.append(rest % n)
            rest = rest // n
        return read(x, xv.layout, tuple(reversed(src)))

    return _map(a, node, lanes, body, "reshape")

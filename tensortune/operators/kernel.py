"""What every node's kernel is made of: its arguments bound to graph values or packed constants, reads of logical
elements from plain or blocked storage, and the default schedules of elementwise and reduction stages.

A node's kernel is a ``KernelDef``: tensor expressions with a schedule, the binding of each argument (a graph value
in its layout, or a constant packed for this kernel once at compile time), and a key of everything that decides
its code (two nodes with equal keys share one kernel function). Operators build theirs with ``KernelArgs``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .. import te
from ..dtype import DType
from ..errors import DTypeError
from ..graph.errors import NetworkCompileError
from ..graph.ir import Graph, Layout, Node, Value
from ..schedule import Schedule, create_schedule
from ..target import Target
from ..te import Expr, Tensor
from ..ops.schedule_helpers import schedule_elementwise  # noqa: F401 - the operators' default, defined with the ops


@dataclass(frozen=True)
class Arg:
    """A kernel argument: a graph value (stored in its layout) or a constant packed for this kernel."""

    value: str | None = None
    const: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        assert (self.value is None) != (self.const is None), "an argument is a value or a constant"


@dataclass(frozen=True)
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


def lanes_of(target: Target, dtype: str | DType, node: Node | None = None) -> int:
    """Elements of ``dtype`` in one vector of ``target`` (1 on scalar targets); a ``NetworkCompileError`` naming the
    node for a dtype no kernel computes."""
    try:
        return max(1, target.lanes(DType.of(dtype)))
    except DTypeError:
        where = f"node '{node.name}' " if node is not None else ""
        raise NetworkCompileError(f"{where}computes a {dtype} tensor at run time, which no kernel computes; compiled "
                                  "networks compute the dtypes of tensortune.dtype.DType") from None


# ------------------------------------------------------------------------------------------- storage and reads

def storage_index(layout: Layout, idx: Sequence[Expr]) -> tuple[Expr, ...]:
    """The storage index of logical element ``idx`` of a tensor in ``layout``."""
    return layout.storage_index(idx)


def logical_index(layout: Layout, axes: Sequence[Expr]) -> tuple[Expr, ...]:
    """The logical index of the element at storage ``axes``."""
    return layout.logical_index(axes)


def read(t: Tensor, layout: Layout, idx: Sequence[Expr]) -> Expr:
    return t[storage_index(layout, idx)]


def zero_index() -> tuple[Expr]:
    """The index of the one element of a scalar (stored as one element)."""
    return (te.const(0, "int32"),)


def broadcast_index(shape: Sequence[int], idx: Sequence[Expr]) -> list[Expr]:
    """The index in a tensor of ``shape`` of the element that numpy broadcasting gives output element ``idx``
    (trailing axes align; axes of size 1 read element 0)."""
    off = len(idx) - len(shape)
    return [te.const(0, "int32") if d == 1 else idx[off + k] for k, d in enumerate(shape)]


def read_broadcast(t: Tensor, v: Value, layout: Layout, idx: Sequence[Expr]) -> Expr:
    """Element ``idx`` of an output that ``v`` broadcasts to (numpy rules: trailing axes align)."""
    own = broadcast_index(v.shape, idx)
    return read(t, layout, own) if len(own) else t[zero_index()]


def storage_compute(out: Value, body: Callable[[tuple[Expr, ...]], Expr], name: str = "out") -> Tensor:
    """``out``'s storage computed elementwise from the logical index of each element (a scalar's, ``()``, stored
    as one element)."""
    if not out.shape:
        return te.compute((1,), lambda _: body(()), name)
    return te.compute(out.layout.storage_shape(out.shape), lambda *axes: body(logical_index(out.layout, axes)), name)


def clamp(e: Expr, hi: int) -> Expr:
    return te.minimum(te.maximum(e, te.const(0, "int32")), te.const(hi, "int32"))


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
        self.key.append(("value", v.shape, v.layout.block, v.layout.axis, v.dtype))
        return t

    def layout(self, name: str) -> Layout:
        """The layout a value's placeholder reads: its own, plain for a constant (bound as a plain array)."""
        return Layout() if self.g.is_constant(name) else self.g.values[name].layout

    def const(self, array: np.ndarray, hint: str) -> Tensor:
        array = np.ascontiguousarray(array).reshape(array.shape or (1,))
        t = te.placeholder(array.shape, array.dtype.name, f"{hint}{len(self.tensors)}")
        self.tensors.append(t)
        self.args.append(Arg(const=array))
        self.key.append(("const", array.shape, array.dtype.name))
        return t

    def done(self, kind: str, node: Node, out: Tensor, s: Schedule, flops: int = 0, extra_key: tuple = (),
             template: str | None = None) -> KernelDef:
        v = self.g.values[node.outputs[0]]
        key = (kind, node.op, tuple(self.key), v.shape, v.layout.block, v.layout.axis, v.dtype) + extra_key
        return KernelDef(kind, s, tuple(self.tensors) + (out,), tuple(self.args) + (Arg(value=node.outputs[0]),),
                         key, flops, template)


# ------------------------------------------------------------------------------------------- schedules

def schedule_reductions(s: Schedule, stages: Sequence[Tensor], lanes: int, min_parallel: int = 256) -> None:
    """Root stages with reductions: parallel over their fused spatial axes (when they have ``min_parallel``
    elements); others elementwise."""
    for t in stages:
        st = s[t]
        if st.reduce_axis:
            spatial = list(st.axis)
            fused = st.fuse(*spatial) if len(spatial) > 1 else spatial[0]
            if fused.extent > 1 and math.prod(t.shape) >= min_parallel:
                st.parallel(fused)
        else:
            schedule_elementwise(s, t, lanes)


def map_kernel(args: KernelArgs, node: Node, lanes: int, body: Callable[[tuple[Expr, ...]], Expr],
               kind: str) -> KernelDef:
    """The kernel computing each element of the node's output from its logical index (``body``), elementwise
    schedule."""
    out_v = args.g.values[node.outputs[0]]
    out = storage_compute(out_v, body)
    s = create_schedule(out)
    schedule_elementwise(s, out, lanes)
    return args.done(kind, node, out, s)


def pad_blocked(data: Tensor, pads: tuple[int, ...], value: float = 0.0, name: str = "data_pad",
                block: int | None = None) -> Tensor:
    """Pad the spatial axes (2 and on: rows and columns, or depth, rows and columns) of a plain or blocked NC[D]HW
    tensor by ``pads`` (the begins of those axes, then their ends); ``data`` itself when no pads. With ``block``, a
    plain NCHW ``data`` is blocked as well, ``[N, C/block, H', W', block]``: the padding copy is its relayout too."""
    if not any(pads):
        return data
    rank = len(pads) // 2
    begin, end = pads[:rank], pads[rank:]
    shape = list(data.shape) if block is None else [data.shape[0], data.shape[1] // block, *data.shape[2:], block]
    sizes = shape[2:2 + rank]
    shape[2:2 + rank] = [n + b + e for n, b, e in zip(sizes, begin, end)]

    def body(*ax):
        at = ax[2:2 + rank]
        inside = te.logical_and(*(c for y, n, b in zip(at, sizes, begin) for c in (y >= b, y < n + b)))
        src = list(ax) if block is None else [ax[0], ax[1] * block + ax[-1]]
        src[2:2 + rank] = [y - b for y, b in zip(at, begin)]
        return te.select(inside, data[tuple(src)], te.const(value, data.dtype))

    return te.compute(tuple(shape), body, name)

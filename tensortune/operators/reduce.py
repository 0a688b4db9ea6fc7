"""Reductions over axes: ``Reduction`` (ONNX ReduceMean, ReduceSum, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare: one class, its ``mode`` a ``ReduceKind``) and ``ArgReduce``
(ArgMax, ArgMin: the index of the first, or last, extreme element along one axis, as int64).

Each reduction kind is one row of ``FORMULAS``: a reducer (sum, max, min, product) over a function of each element,
then a function of the result (the mean divides by the count, L2 takes the square root), written once with the
functions of ``operators.math`` for the numpy reference and the kernel. Float inputs are reduced in float32 (float16
and bfloat16 too) or float64, integers (int32, int64) in their own type by the kinds that are exact on them (sum,
max, min, product, L1, sum of squares). Log-sum-exp subtracts the maximum before the exponentials. A reduction
computes the elementwise nodes after it as its epilogue (``passes.fuse_epilogues``), like a pooling.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Sequence

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node, TensorType
from ..graph.op import Op, Pattern, check_count, is_float
from ..schedule import create_schedule
from ..target import Target
from ..te import Expr, Reducer, Tensor
from .elementwise import EpilogueStep, WithEpilogue, apply_epilogue, check_epilogue
from .epilogue import epilogue_operands, epilogue_stages
from .kernel import KernelArgs, KernelDef, lanes_of, schedule_reductions, zero_index
from .math import Math, NumpyMath, TeMath
from .onnx_convert import ImportContext, OnnxNode, Reject, axis, converter, ints
from .reshape import Identity

#: the integer dtypes reductions take (onnxruntime's kernels reduce these)
INT_DTYPES = ("int32", "int64")
#: the input elements a reduction kernel reads before it shares its outputs among threads
MIN_PARALLEL_ELEMENTS = 1 << 14


class ReduceKind(Enum):
    """The ONNX reduction operators, by their names."""

    MEAN = "ReduceMean"
    SUM = "ReduceSum"
    MAX = "ReduceMax"
    MIN = "ReduceMin"
    PROD = "ReduceProd"
    L1 = "ReduceL1"
    L2 = "ReduceL2"
    LOG_SUM = "ReduceLogSum"
    LOG_SUM_EXP = "ReduceLogSumExp"
    SUM_SQUARE = "ReduceSumSquare"


def _same(x, m: Math):
    return x


def _square(x, m: Math):
    return x * x


def _kept(acc, count: int, m: Math):
    return acc


def _mean(acc, count: int, m: Math):
    return acc / m.const(count)


@dataclass(frozen=True)
class Formula:
    """One reduction kind: ``reducer`` over ``pre(element)``, then ``post(result, count of reduced elements)``;
    ``ints``: exact on integers; ``shifted``: the maximum is subtracted from each element and added to the result
    (log-sum-exp, so that no exponential overflows)."""

    reducer: Reducer
    pre: Callable = _same
    post: Callable = _kept
    ints: bool = True
    shifted: bool = False

    @property
    def of_one_element_is_itself(self) -> bool:
        """Whether reducing a single element gives it back (the sum, mean, extremes and product do; L2 does not)."""
        return self.pre is _same and self.post in (_kept, _mean) and not self.shifted


FORMULAS: dict[ReduceKind, Formula] = {
    ReduceKind.MEAN: Formula(Reducer.SUM, post=_mean, ints=False),
    ReduceKind.SUM: Formula(Reducer.SUM),
    ReduceKind.MAX: Formula(Reducer.MAX),
    ReduceKind.MIN: Formula(Reducer.MIN),
    ReduceKind.PROD: Formula(Reducer.PROD),
    ReduceKind.L1: Formula(Reducer.SUM, pre=lambda x, m: m.abs(x)),
    ReduceKind.L2: Formula(Reducer.SUM, pre=_square, post=lambda a, n, m: m.sqrt(a), ints=False),
    ReduceKind.LOG_SUM: Formula(Reducer.SUM, post=lambda a, n, m: m.log(a), ints=False),
    ReduceKind.LOG_SUM_EXP: Formula(Reducer.SUM, pre=lambda x, m: m.exp(x), post=lambda a, n, m: m.log(a),
                                    ints=False, shifted=True),
    ReduceKind.SUM_SQUARE: Formula(Reducer.SUM, pre=_square),
}

_NUMPY_REDUCERS = {Reducer.SUM: np.add, Reducer.MAX: np.maximum, Reducer.MIN: np.minimum, Reducer.PROD: np.multiply}
_TE_REDUCERS = {Reducer.SUM: te.sum, Reducer.MAX: te.max, Reducer.MIN: te.min, Reducer.PROD: te.prod}


# ------------------------------------------------------------------------------------------- shared pieces

def reduced_shape(shape: tuple[int, ...], axes: Sequence[int], keepdims: bool) -> tuple[int, ...]:
    """The shape after reducing ``axes`` (kept as 1 with ``keepdims``, else dropped)."""
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def check_reduced(op: Op, x: TensorType, axes: Sequence[int]) -> None:
    """The axes in range, none of them empty."""
    for d in axes:
        if not 0 <= d < len(x.shape):
            raise GraphError(f"{op}: axis {d} is out of range for shape {x.shape}")
        if x.shape[d] == 0:
            raise GraphError(f"{op}: reducing the empty axis {d} of {x} is not supported")


def compute_dtype(dtype: str) -> str:
    """The dtype a kernel reduces ``dtype`` in: float32 for the 16-bit floats, else ``dtype`` itself."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def element_reader(x: Tensor, shape: tuple[int, ...], axes: Sequence[int], keepdims: bool,
                   dtype: str) -> Callable[[Sequence[Expr], Sequence], Expr]:
    """``read(out_index, reduce_vars)``: the input element (of a plain tensor of ``shape``) that reduce variables
    ``reduce_vars`` (one per axis of ``axes``) reach from output element ``out_index``, in ``dtype``."""
    def read(o: Sequence[Expr], r: Sequence) -> Expr:
        kept, red = iter(o), iter(r)
        idx = []
        for d in range(len(shape)):
            if d in axes:
                idx.append(next(red))
                if keepdims:
                    next(kept)
            else:
                idx.append(next(kept))
        e = x[tuple(idx)] if idx else x[zero_index()]
        return te.cast(dtype, e)
    return read


def reduce_vars(shape: tuple[int, ...], axes: Sequence[int], name: str) -> list[te.IterVar]:
    """One reduce variable per axis of ``axes`` (one of extent 1 when there is none: a scalar's "reduction")."""
    return [te.reduce_axis(shape[d], f"{name}{k}") for k, d in enumerate(axes)] or [te.reduce_axis(1, name)]


def parallel_from(count: int) -> int:
    """The fewest outputs of reductions of ``count`` elements each worth running on several threads (about 16K
    elements read in all)."""
    return max(2, -(-MIN_PARALLEL_ELEMENTS // count))


def _out_index(idx: tuple, rank: int) -> tuple:
    """The output element of a kernel's axes (a scalar output is computed as one element)."""
    return idx[:rank]


# ------------------------------------------------------------------------------------------- Reduce*

@dataclass(frozen=True, slots=True)
class Reduction(WithEpilogue):
    """Reduce ``axes`` (sorted, distinct; none: each element alone) by ``mode``, keeping them as axes of size 1 with
    ``keepdims``, then the ``epilogue`` (its inputs: the data, then one operand per binary step)."""

    pattern = Pattern.REDUCTION
    mode: ReduceKind
    axes: tuple[int, ...]
    keepdims: bool = True
    epilogue: tuple[EpilogueStep, ...] = ()

    @property
    def num_base_inputs(self) -> int:
        return 1

    def __post_init__(self) -> None:
        if list(self.axes) != sorted(set(self.axes)) or any(not isinstance(a, int) or a < 0 for a in self.axes):
            raise GraphError(f"{self}: axes must be distinct non-negative integers in increasing order, "
                             f"got {self.axes!r}")

    @property
    def formula(self) -> Formula:
        return FORMULAS[self.mode]

    def __str__(self) -> str:
        return self.mode.value + Op.__str__(self)[len("Reduction"):]

    def attrs(self) -> dict[str, object]:
        out = Op.attrs(self)
        out.pop("mode")
        return out

    def infer(self, inputs):
        check_count(self, inputs, 1 + sum(s.has_operand for s in self.epilogue))
        x = inputs[0]
        if not (is_float(x.dtype) or (x.dtype in INT_DTYPES and self.formula.ints)):
            takes = "float tensors" + (f" and {', '.join(INT_DTYPES)}" if self.formula.ints else "")
            raise GraphError(f"{self}: the input is {x.dtype}; {self.mode.value} takes {takes}")
        check_reduced(self, x, self.axes)
        out = TensorType(reduced_shape(x.shape, self.axes, self.keepdims), x.dtype)
        check_epilogue(self, out, self.epilogue, inputs[1:])
        return (out,)

    def reference(self, x: np.ndarray, *operands: np.ndarray) -> np.ndarray:
        f = self.formula
        v = x if np.issubdtype(x.dtype, np.integer) else x.astype(np.float64)
        m = NumpyMath(v.dtype)
        shift = v.max(axis=self.axes, keepdims=True) if f.shifted else None
        pre = f.pre(v if shift is None else v - shift, m)
        acc = _NUMPY_REDUCERS[f.reducer].reduce(pre, axis=self.axes, keepdims=True, dtype=v.dtype)
        y = f.post(acc, math.prod(x.shape[d] for d in self.axes), m)
        y = y if shift is None else y + shift
        y = np.asarray(y if self.keepdims else y.reshape(reduced_shape(x.shape, self.axes, False))).astype(x.dtype)
        return apply_epilogue(self.epilogue, y, operands)

    def flops(self, g: Graph, node: Node) -> int:
        return g.values[node.inputs[0]].type.size

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        a = KernelArgs(g)
        f = self.formula
        xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
        work = compute_dtype(xv.dtype)
        read = element_reader(a.value(node.inputs[0], "data"), xv.shape, self.axes, self.keepdims, work)
        shape, rank = out_v.shape or (1,), len(out_v.shape)
        m = TeMath(work)
        reductions = []
        shift = None
        if f.shifted:
            r0 = reduce_vars(xv.shape, self.axes, "m")
            shift = te.compute(shape, lambda *o: te.max(read(_out_index(o, rank), r0), axis=r0), "row_max")
            reductions.append(shift)
        r1 = reduce_vars(xv.shape, self.axes, "r")

        def reduce(*o):
            e = read(_out_index(o, rank), r1)
            return _TE_REDUCERS[f.reducer](f.pre(e if shift is None else e - shift[o], m), axis=r1)

        plain = f.post is _kept and shift is None and work == out_v.dtype
        acc = te.compute(shape, reduce, "out" if plain and not self.epilogue else "acc")
        reductions.append(acc)
        count = math.prod(xv.shape[d] for d in self.axes)

        def finish(*o):
            y = f.post(acc[o], count, m)
            return te.cast(out_v.dtype, y if shift is None else y + shift[o])

        result = acc if plain else te.compute(shape, finish, "result" if self.epilogue else "out")
        stages = epilogue_stages(result, self, None, epilogue_operands(a, g, node), lambda o: _out_index(o, rank))
        out = stages[-1] if stages else result
        s = create_schedule(out)
        for t in ([result] if result is not acc and result is not out else []) + stages[:-1]:
            s[t].compute_inline()
        schedule_reductions(s, reductions + ([out] if out is not acc else []), lanes_of(target, out_v.dtype, node),
                            parallel_from(count))
        return a.done("reduce", node, out, s, xv.type.size)


def _emit_reduction(ctx: ImportContext, node: OnnxNode, axes: list[int] | None, noop_with_empty_axes: bool) -> None:
    """Reduce ``axes`` (none: all of them; with ``noop_with_empty_axes``, none of them: the kind's function of each
    element alone, as onnxruntime computes it, ``|x|`` for ReduceL1)."""
    x = node.input(0)
    rank = len(ctx.shape(x))
    kind = ReduceKind(node.op_type)
    if not axes and noop_with_empty_axes and FORMULAS[kind].of_one_element_is_itself:
        ctx.emit(Identity(), [x], node.outputs, node.name)
        return
    if not axes:
        axes = [] if noop_with_empty_axes else list(range(rank))
    resolved = sorted(axis(a, rank) for a in axes)
    if len(set(resolved)) != len(resolved):
        raise Reject(f"axes {axes} name an axis twice")
    op = Reduction(kind, tuple(resolved), bool(node.attr("keepdims", 1)))
    ctx.emit(op, [x], node.outputs, node.name)


_OTHERS = tuple(k.value for k in ReduceKind if k is not ReduceKind.SUM)


@converter(*_OTHERS, attrs=("axes", "keepdims"), until=17)
@converter("ReduceSum", attrs=("axes", "keepdims"), until=12)
def _reduce_axes_attribute(ctx: ImportContext, node: OnnxNode) -> None:
    """Axes as an attribute (every reduction before opset 18, ReduceSum before 13)."""
    axes = node.attr("axes")
    _emit_reduction(ctx, node, ints(axes) if axes is not None else None, False)


@converter(*_OTHERS, attrs=("keepdims", "noop_with_empty_axes"), since=18)
@converter("ReduceSum", attrs=("keepdims", "noop_with_empty_axes"), since=13)
def _reduce_axes_input(ctx: ImportContext, node: OnnxNode) -> None:
    """Axes as an optional second input, which must be known when the model is imported."""
    axes = ctx.need_static(node, 1, "axes")
    _emit_reduction(ctx, node, ints(axes) if axes is not None else None,
                    bool(node.attr("noop_with_empty_axes", 0)))


# ------------------------------------------------------------------------------------------- ArgMax, ArgMin

class ArgKind(Enum):
    MAX = "ArgMax"
    MIN = "ArgMin"


@dataclass(frozen=True, slots=True)
class ArgReduce(Op):
    """The index (int64) of the largest (``ArgKind.MAX``) or smallest element along ``axis``: the first of equal
    ones, or the last with ``select_last_index``; the axis is kept as one of size 1 with ``keepdims``."""

    pattern = Pattern.REDUCTION
    mode: ArgKind
    axis: int
    keepdims: bool = True
    select_last_index: bool = False

    def __str__(self) -> str:
        return self.mode.value + Op.__str__(self)[len("ArgReduce"):]

    def attrs(self) -> dict[str, object]:
        out = Op.attrs(self)
        out.pop("mode")
        return out

    def infer(self, inputs):
        check_count(self, inputs, 1)
        x = inputs[0]
        if not (is_float(x.dtype) or x.dtype in INT_DTYPES):
            raise GraphError(f"{self}: the input is {x.dtype}; it takes float tensors and {', '.join(INT_DTYPES)}")
        check_reduced(self, x, (self.axis,))
        return (TensorType(reduced_shape(x.shape, (self.axis,), self.keepdims), "int64"),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        v = x if np.issubdtype(x.dtype, np.integer) else x.astype(np.float64)
        find = np.argmax if self.mode is ArgKind.MAX else np.argmin
        if self.select_last_index:
            idx = x.shape[self.axis] - 1 - find(np.flip(v, self.axis), axis=self.axis)
        else:
            idx = find(v, axis=self.axis)
        return (np.expand_dims(idx, self.axis) if self.keepdims else idx).astype(np.int64)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        """Two reductions: the extreme value, then the least (greatest) index holding it."""
        a = KernelArgs(g)
        xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
        read = element_reader(a.value(node.inputs[0], "data"), xv.shape, (self.axis,), self.keepdims,
                              compute_dtype(xv.dtype))
        shape, rank = out_v.shape or (1,), len(out_v.shape)
        n = xv.shape[self.axis]
        (r1,), (r2,) = reduce_vars(xv.shape, (self.axis,), "r"), reduce_vars(xv.shape, (self.axis,), "q")
        extreme = te.max if self.mode is ArgKind.MAX else te.min
        best = te.compute(shape, lambda *o: extreme(read(_out_index(o, rank), [r1]), axis=r1), "best")

        def index(*o):
            hit = te.equal(read(_out_index(o, rank), [r2]), best[o])
            k = te.cast("int64", r2)
            if self.select_last_index:
                return te.max(te.select(hit, k, te.const(-1, "int64")), axis=r2)
            return te.min(te.select(hit, k, te.const(n, "int64")), axis=r2)

        out = te.compute(shape, index, "out")
        s = create_schedule(out)
        schedule_reductions(s, [best, out], lanes_of(target, out_v.dtype, node), parallel_from(n))
        return a.done("arg_reduce", node, out, s, 2 * xv.type.size)


@converter("ArgMax", "ArgMin", attrs=("axis", "keepdims"), until=11)
@converter("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"), since=12)
def _arg_reduce(ctx: ImportContext, node: OnnxNode) -> None:
    x = node.input(0)
    op = ArgReduce(ArgKind(node.op_type), axis(int(node.attr("axis", 0)), len(ctx.shape(x))),
                   bool(node.attr("keepdims", 1)), bool(node.attr("select_last_index", 0)))
    ctx.emit(op, [x], node.outputs, node.name)

"""Pooling: ``Pool``, max, average or Lp norm over 2-D windows of NCHW data or 3-D windows of NCDHW data (ONNX
MaxPool, AveragePool, LpPool and their global forms; 1-D windows run as 2-D ones of one row), in any channel block,
with the elementwise consumers fused into it as its epilogue (a reduction computes them on each result before
storing it, ``passes.fuse_epilogues``)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node, TensorType
from ..graph.op import LayoutRule, Op, Pattern, check_count, check_float, check_ints, check_rank
from ..schedule import create_schedule
from ..target import Target
from .elementwise import EpilogueStep, WithEpilogue, apply_epilogue, check_epilogue
from .epilogue import epilogue_operands, epilogue_stages
from .kernel import KernelArgs, KernelDef, clamp, logical_index, pad_blocked
from .onnx_convert import ImportContext, OnnxNode, Reject, converter, only_output
from .window import conv_out, lift_1d, window_attrs, windows


class PoolKind(Enum):
    MAX = "max"
    AVG = "avg"
    LP = "lp"


_NAMES = {PoolKind.MAX: "MaxPool", PoolKind.AVG: "AvgPool", PoolKind.LP: "LpPool"}


@dataclass(frozen=True, slots=True)
class Pool(WithEpilogue):
    """Max, average or Lp pooling of NCHW or NCDHW data over ``kernel`` windows of 2 or 3 spatial axes (padding is
    -inf for max pooling, 0 for the others; average pooling divides by the window's size with ``count_include_pad``,
    else by its valid elements; Lp pooling is ``(sum |x|^p)^(1/p)``), then its ``epilogue`` (its inputs: the data, then
    one operand per binary step). ``pads``: the begins of the spatial axes, then their ends (ONNX's order)."""

    pattern = Pattern.REDUCTION
    layout_rule = LayoutRule.WINDOW
    mode: PoolKind
    kernel_shape: tuple[int, ...]
    strides: tuple[int, ...] = (1, 1)
    pads: tuple[int, ...] = (0, 0, 0, 0)
    dilations: tuple[int, ...] = (1, 1)
    ceil_mode: bool = False
    count_include_pad: bool = False
    epilogue: tuple[EpilogueStep, ...] = ()
    p: int = 2  # Lp pooling's exponent

    @property
    def num_base_inputs(self) -> int:
        return 1

    @property
    def rank(self) -> int:
        """Spatial axes of a window."""
        return len(self.kernel_shape)

    def __post_init__(self) -> None:
        rank = self.rank
        if rank not in (2, 3):
            raise GraphError(f"Pool: windows of 2 or 3 spatial axes are supported, got kernel {self.kernel_shape}")
        check_ints(self, "kernel", self.kernel_shape, rank)
        check_ints(self, "strides", self.strides, rank)
        check_ints(self, "pads", self.pads, 2 * rank, minimum=0)
        check_ints(self, "dilations", self.dilations, rank)
        check_ints(self, "p", (self.p,), 1)
        if any(p >= k for p, k in zip(self.pads, self.kernel_shape * 2)):
            raise GraphError(f"Pool: pads {self.pads} must be smaller than the kernel {self.kernel_shape}")

    def infer(self, inputs):
        check_count(self, inputs, 1 + sum(s.has_operand for s in self.epilogue))
        x = inputs[0]
        check_rank(self, x, 2 + self.rank, "the data")
        check_float(self, x, "the data")
        out = TensorType(self._output_shape(x.shape), x.dtype)
        check_epilogue(self, out, self.epilogue, inputs[1:])
        return (out,)

    def _output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        r = self.rank
        return shape[:2] + tuple(conv_out(n, k, s, b, e, d, self, self.ceil_mode) for n, k, s, b, e, d in zip(
            shape[2:], self.kernel_shape, self.strides, self.pads[:r], self.pads[r:], self.dilations))

    def __str__(self) -> str:
        return _NAMES[self.mode] + Op.__str__(self)[len("Pool"):]

    def attrs(self) -> dict[str, object]:
        out = Op.attrs(self)
        out.pop("mode")
        out["kernel"] = out.pop("kernel_shape")
        return {"kernel": out.pop("kernel"), **out}

    def reference(self, x: np.ndarray, *operands: np.ndarray) -> np.ndarray:
        return apply_epilogue(self.epilogue, self._pool(x), operands)

    def _pool(self, x: np.ndarray) -> np.ndarray:
        r = self.rank
        out = self._output_shape(x.shape)[2:]
        extra = self._extra(x.shape[2:], out)
        fill = -np.inf if self.mode is PoolKind.MAX else 0
        widths = [(0, 0), (0, 0)] + [(b, e + more) for b, e, more in zip(self.pads[:r], self.pads[r:], extra)]
        win = windows(np.pad(x, widths, constant_values=fill), self.kernel_shape, self.strides, self.dilations, out)
        axes = tuple(range(-r, 0))
        if self.mode is PoolKind.MAX:
            return win.max(axis=axes)
        if self.mode is PoolKind.LP:
            return ((np.abs(win.astype(np.float64)) ** self.p).sum(axis=axes) ** (1.0 / self.p)).astype(x.dtype)
        total = win.sum(axis=axes, dtype=np.float64)
        return (total / self.divisor(x.shape[2:], out)).astype(x.dtype)

    def _extra(self, sizes: tuple[int, ...], out: tuple[int, ...]) -> tuple[int, ...]:
        """Elements past the padding, per spatial axis, that ceil mode's last windows reach."""
        r = self.rank
        return tuple(max(0, (o - 1) * s + d * (k - 1) + 1 - (n + b + e)) for n, o, k, s, d, b, e in zip(
            sizes, out, self.kernel_shape, self.strides, self.dilations, self.pads[:r], self.pads[r:]))

    def divisor(self, sizes: tuple[int, ...], out: tuple[int, ...]) -> np.ndarray:
        """``out``-shaped: how many elements each average-pooling window divides by (ONNX's rule: the padded
        positions count with ``count_include_pad``; positions past the padding never count)."""
        r = self.rank
        begin, end = self.pads[:r], self.pads[r:]
        inside = np.zeros((1, 1) + tuple(n + b + e for n, b, e in zip(sizes, begin, end)), np.float64)
        if self.count_include_pad:
            inside[...] = 1
        else:
            inside[(0, 0) + tuple(slice(b, b + n) for n, b in zip(sizes, begin))] = 1
        inside = np.pad(inside, [(0, 0), (0, 0)] + [(0, more) for more in self._extra(sizes, out)])
        return windows(inside, self.kernel_shape, self.strides, self.dilations, out).sum(axis=tuple(range(-r, 0)))[0, 0]

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        return pool_kernel(g, node)


def _lp_power(x: te.Expr, p: int) -> te.Expr:
    """``|x|^p``."""
    if p == 2:
        return x * x
    return te.abs_(x) if p == 1 else te.call(te.MathFunc.POW, te.abs_(x), te.const(float(p), x.dtype))


def _lp_root(s: te.Expr, p: int) -> te.Expr:
    """``s^(1/p)``."""
    if p == 2:
        return te.sqrt(s)
    return s if p == 1 else te.call(te.MathFunc.POW, s, te.const(1.0 / p, s.dtype))


def pool_kernel(g: Graph, node: Node) -> KernelDef:
    a = KernelArgs(g)
    op: Pool = node.op
    r = op.rank
    xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
    x = a.value(node.inputs[0], "data")
    sizes, out_sp = xv.shape[2:], out_v.shape[2:]
    begin, end = op.pads[:r], op.pads[r:]
    extra = op._extra(sizes, out_sp)
    is_max = op.mode is PoolKind.MAX
    # A max-pooling window always holds an element of the input (pads are smaller than the window), so reading the
    # nearest element of the input for a padded position gives the same maximum without a padded copy
    # (with dilation the nearest one may not be one the window samples: then the input is padded with -inf).
    nearest = is_max and all(d == 1 for d in op.dilations)
    pads = tuple(begin) + tuple(e + more for e, more in zip(end, extra))
    dp = x if nearest else pad_blocked(x, pads, -math.inf if is_max else 0.0)
    red = [te.reduce_axis(k, name) for k, name in zip(op.kernel_shape, ("kd", "kh", "kw")[-r:])]
    shape = out_v.layout.storage_shape(out_v.shape)
    reducer = te.max if is_max else te.sum

    def body(*ax):
        src = list(ax)
        for i in range(r):
            src[2 + i] = ax[2 + i] * op.strides[i] + red[i] * op.dilations[i]
        if nearest:
            for i in range(r):
                src[2 + i] = clamp(src[2 + i] - begin[i], sizes[i] - 1)
        value = dp[tuple(src)]
        return reducer(_lp_power(value, op.p) if op.mode is PoolKind.LP else value, axis=red)

    fused = bool(op.epilogue)  # the result is a stage before the epilogue's, its name not the output's
    acc = te.compute(shape, body, "acc" if not is_max or fused else "out")
    result = acc
    if op.mode is PoolKind.AVG:
        div = op.divisor(sizes, out_sp)
        name = "mean" if fused else "out"
        if np.all(div == div.flat[0]):
            inv = te.const(float(1.0 / div.flat[0]), out_v.dtype)
            result = te.compute(shape, lambda *ax: acc[ax] * inv, name)
        else:
            table = a.const((1.0 / div).astype(out_v.dtype), "inv_count")
            result = te.compute(shape, lambda *ax: acc[ax] * table[ax[2:2 + r]], name)
    elif op.mode is PoolKind.LP:
        result = te.compute(shape, lambda *ax: _lp_root(acc[ax], op.p), "norm" if fused else "out")
    epilogue = epilogue_stages(result, op, None, epilogue_operands(a, g, node),
                               lambda ax: logical_index(out_v.layout, ax))
    out = epilogue[-1] if epilogue else result
    s = create_schedule(out)
    for stage in ([result] if result is not acc and fused else []) + epilogue[:-1]:
        s[stage].compute_inline()
    if dp is not x:
        p = s[dp]
        p.parallel(p.fuse(*p.axis[:3]))
    accum = s.cache_write(acc, "local") if acc is out else acc
    st = s[out]
    axes = list(st.axis)
    blocked = out_v.layout.blocked
    outer = st.fuse(*axes[:1 + r])
    if math.prod(shape) >= 4096:
        st.parallel(outer)
    if blocked:
        st.vectorize(axes[2 + r])
        s[accum].compute_at(st, axes[1 + r])
        ax = s[accum].axis
        s[accum].reorder(*s[accum].reduce_axis, ax[-1])
        s[accum].vectorize(ax[-1])
    else:
        s[accum].compute_at(st, axes[1 + r])
    return a.done("pool", node, out, s, math.prod(out_v.shape) * math.prod(op.kernel_shape))


def _pool_kind(node: OnnxNode) -> PoolKind:
    return PoolKind.MAX if "Max" in node.op_type else PoolKind.LP if "Lp" in node.op_type else PoolKind.AVG


def _exponent(node: OnnxNode) -> int:
    """Lp pooling's ``p`` (an integer since opset 2, a float before): an integer >= 1, else rejected."""
    p = node.attr("p", 2)
    if float(p) != int(p) or int(p) < 1:
        raise Reject(f"p={p}: only integer exponents >= 1 are supported")
    return int(p)


_WINDOW = ("auto_pad", "kernel_shape", "pads", "strides")


@converter("MaxPool", attrs=_WINDOW + ("ceil_mode", "dilations", "storage_order"))
@converter("AveragePool", attrs=_WINDOW + ("ceil_mode", "count_include_pad", "dilations"))
@converter("LpPool", attrs=_WINDOW + ("p",), until=17)
@converter("LpPool", attrs=_WINDOW + ("ceil_mode", "dilations", "p"), since=18)
def _pool(ctx: ImportContext, node: OnnxNode) -> None:
    only_output(node, "indices")
    kernel = tuple(int(k) for k in node.attr("kernel_shape", ()))
    x = node.input(0)
    strides, dilations, pads = window_attrs(node, ctx.shape(x), kernel)
    op = Pool(_pool_kind(node), (1, *kernel) if len(kernel) == 1 else kernel, strides, pads, dilations,
              bool(node.attr("ceil_mode", 0)), bool(node.attr("count_include_pad", 0)), p=_exponent(node))
    lift_1d(ctx, node, op, [x], lifted=(0,))


@converter("GlobalAveragePool", "GlobalMaxPool")
@converter("GlobalLpPool", attrs=("p",))
def _global_pool(ctx: ImportContext, node: OnnxNode) -> None:
    shape = ctx.shape(node.input(0))
    if len(shape) not in (3, 4, 5):
        raise Reject(f"only NCW, NCHW and NCDHW inputs are supported, got shape {list(shape)}")
    window = tuple(shape[2:]) if len(shape) > 3 else (1, shape[2])
    op = Pool(_pool_kind(node), window, (1,) * len(window), (0,) * 2 * len(window), (1,) * len(window),
              p=_exponent(node))
    lift_1d(ctx, node, op, [node.input(0)], lifted=(0,))

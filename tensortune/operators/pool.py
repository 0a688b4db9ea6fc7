"""Pooling: ``Pool``, max or average over 2-D windows of NCHW data (ONNX MaxPool, AveragePool and their global
forms), in any channel block, with the elementwise consumers fused into it as its epilogue (a reduction computes
them on each result before storing it, ``passes.fuse_epilogues``)."""
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


@dataclass(frozen=True, slots=True)
class Pool(WithEpilogue):
    """Max or average pooling of NCHW data over ``kernel`` windows (padding is -inf for max pooling;
    average pooling divides by the window's size with ``count_include_pad``, else by its valid elements), then its
    ``epilogue`` (its inputs: the data, then one operand per binary step)."""

    pattern = Pattern.REDUCTION
    layout_rule = LayoutRule.WINDOW
    mode: PoolKind
    kernel_shape: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilations: tuple[int, int] = (1, 1)
    ceil_mode: bool = False
    count_include_pad: bool = False
    epilogue: tuple[EpilogueStep, ...] = ()

    @property
    def num_base_inputs(self) -> int:
        return 1

    def __post_init__(self) -> None:
        check_ints(self, "kernel", self.kernel_shape, 2)
        check_ints(self, "strides", self.strides, 2)
        check_ints(self, "pads", self.pads, 4, minimum=0)
        check_ints(self, "dilations", self.dilations, 2)
        if any(p >= k for p, k in zip(self.pads, self.kernel_shape * 2)):
            raise GraphError(f"Pool: pads {self.pads} must be smaller than the kernel {self.kernel_shape}")

    def infer(self, inputs):
        check_count(self, inputs, 1 + sum(s.has_operand for s in self.epilogue))
        x = inputs[0]
        check_rank(self, x, 4, "the data")
        check_float(self, x, "the data")
        out = TensorType(self._output_shape(x.shape), x.dtype)
        check_epilogue(self, out, self.epilogue, inputs[1:])
        return (out,)

    def _output_shape(self, shape: tuple[int, ...]) -> tuple[int, int, int, int]:
        n, c, h, w = shape
        oh = conv_out(h, self.kernel_shape[0], self.strides[0], self.pads[0], self.pads[2], self.dilations[0], self,
                      self.ceil_mode)
        ow = conv_out(w, self.kernel_shape[1], self.strides[1], self.pads[1], self.pads[3], self.dilations[1], self,
                      self.ceil_mode)
        return n, c, oh, ow

    def __str__(self) -> str:
        return ("MaxPool" if self.mode is PoolKind.MAX else "AvgPool") + Op.__str__(self)[len("Pool"):]

    def attrs(self) -> dict[str, object]:
        out = Op.attrs(self)
        out.pop("mode")
        out["kernel"] = out.pop("kernel_shape")
        return {"kernel": out.pop("kernel"), **out}

    def reference(self, x: np.ndarray, *operands: np.ndarray) -> np.ndarray:
        return apply_epilogue(self.epilogue, self._pool(x), operands)

    def _pool(self, x: np.ndarray) -> np.ndarray:
        oh, ow = self._output_shape(x.shape)[2:]
        eh, ew = self._extra(x.shape[2:], (oh, ow))
        t, l, b, r = self.pads
        fill = -np.inf if self.mode is PoolKind.MAX else 0
        xp = np.pad(x, ((0, 0), (0, 0), (t, b + eh), (l, r + ew)), constant_values=fill)
        win = windows(xp, self.kernel_shape, self.strides, self.dilations, (oh, ow))
        if self.mode is PoolKind.MAX:
            return win.max(axis=(-1, -2))
        total = win.sum(axis=(-1, -2), dtype=np.float64)
        return (total / self.divisor(x.shape[2], x.shape[3], (oh, ow))).astype(x.dtype)

    def _extra(self, hw: tuple[int, int], out_hw: tuple[int, int]) -> tuple[int, int]:
        """Rows and columns past the padding that ceil mode's last windows reach."""
        t, l, b, r = self.pads
        (oh, ow), (h, w) = out_hw, hw
        eh = max(0, (oh - 1) * self.strides[0] + self.dilations[0] * (self.kernel_shape[0] - 1) + 1 - (h + t + b))
        ew = max(0, (ow - 1) * self.strides[1] + self.dilations[1] * (self.kernel_shape[1] - 1) + 1 - (w + l + r))
        return eh, ew

    def divisor(self, h: int, w: int, out_hw: tuple[int, int]) -> np.ndarray:
        """``[OH, OW]``: how many elements each average-pooling window divides by (ONNX's rule: the padded
        positions count with ``count_include_pad``; positions past the padding never count)."""
        t, l, b, r = self.pads
        inside = np.zeros((1, 1, h + t + b, w + l + r), np.float64)
        if self.count_include_pad:
            inside[...] = 1
        else:
            inside[:, :, t:t + h, l:l + w] = 1
        extra_h = max(0, (out_hw[0] - 1) * self.strides[0] + self.dilations[0] * (self.kernel_shape[0] - 1) + 1
                      - inside.shape[2])
        extra_w = max(0, (out_hw[1] - 1) * self.strides[1] + self.dilations[1] * (self.kernel_shape[1] - 1) + 1
                      - inside.shape[3])
        inside = np.pad(inside, ((0, 0), (0, 0), (0, extra_h), (0, extra_w)))
        return windows(inside, self.kernel_shape, self.strides, self.dilations, out_hw).sum(axis=(-1, -2))[0, 0]

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        return pool_kernel(g, node)


def pool_kernel(g: Graph, node: Node) -> KernelDef:
    a = KernelArgs(g)
    op: Pool = node.op
    xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
    x = a.value(node.inputs[0], "data")
    oh, ow = out_v.shape[2], out_v.shape[3]
    t, l, b, r = op.pads
    eh, ew = op._extra(xv.shape[2:], (oh, ow))
    is_max = op.mode is PoolKind.MAX
    # A max-pooling window always holds an element of the input (pads are smaller than the window), so reading the
    # nearest row or column of the input for a padded position gives the same maximum without a padded copy
    # (with dilation the nearest row may not be one the window samples: then the input is padded with -inf).
    nearest = is_max and op.dilations == (1, 1)
    dp = x if nearest else pad_blocked(x, (t, l, b + eh, r + ew), -math.inf if is_max else 0.0)
    kh, kw = te.reduce_axis(op.kernel_shape[0], "kh"), te.reduce_axis(op.kernel_shape[1], "kw")
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

    fused = bool(op.epilogue)  # the result is a stage before the epilogue's, its name not the output's
    acc = te.compute(shape, body, "acc" if not is_max or fused else "out")
    result = acc
    if not is_max:
        div = op.divisor(xv.shape[2], xv.shape[3], (oh, ow))
        name = "mean" if fused else "out"
        if np.all(div == div.flat[0]):
            inv = te.const(float(1.0 / div.flat[0]), out_v.dtype)
            result = te.compute(shape, lambda *ax: acc[ax] * inv, name)
        else:
            table = a.const((1.0 / div).astype(out_v.dtype), "inv_count")
            result = te.compute(shape, lambda *ax: acc[ax] * table[ax[2], ax[3]], name)
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
    return a.done("pool", node, out, s, math.prod(out_v.shape) * op.kernel_shape[0] * op.kernel_shape[1])


def _pool_kind(node: OnnxNode) -> PoolKind:
    return PoolKind.MAX if "Max" in node.op_type else PoolKind.AVG


@converter("MaxPool", attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"))
@converter("AveragePool", attrs=("auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads",
                                 "strides"))
def _pool(ctx: ImportContext, node: OnnxNode) -> None:
    only_output(node, "indices")
    kernel = tuple(int(k) for k in node.attr("kernel_shape", ()))
    x = node.input(0)
    strides, dilations, pads = window_attrs(node, ctx.shape(x), kernel)
    op = Pool(_pool_kind(node), (1, *kernel) if len(kernel) == 1 else kernel, strides, pads, dilations,
              bool(node.attr("ceil_mode", 0)), bool(node.attr("count_include_pad", 0)))  # type: ignore[arg-type]
    lift_1d(ctx, node, op, [x], lifted=(0,))


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: ImportContext, node: OnnxNode) -> None:
    shape = ctx.shape(node.input(0))
    if len(shape) not in (3, 4):
        raise Reject(f"only NCW and NCHW inputs are supported, got shape {list(shape)}")
    window = (shape[2], shape[3]) if len(shape) == 4 else (1, shape[2])
    lift_1d(ctx, node, Pool(_pool_kind(node), window), [node.input(0)], lifted=(0,))

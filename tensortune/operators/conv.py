"""2-D convolution: the ``Conv`` operator (with its fused bias and epilogue), its ONNX converter, numpy reference,
kernels (``conv_kernels``) and tuning tasks (``conv_tasks``).

``ConvLike`` is what a convolution and a dense layer (``matmul.Dense``, a 1x1 convolution of 1x1 images) share: a
constant weight, an optional bias, an epilogue, the blocked kernels and the templates that tune them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..graph.errors import GraphError
from ..graph.ir import Graph, Node, TensorType
from ..graph.op import LayoutRule, check_count, check_float, check_ints, check_rank
from ..target import Target
from .conv_kernels import ConvShape, conv_kernel
from .conv_tasks import node_blocks, node_tasks, tuned_conv, untuned_key, workload_kind
from .elementwise import EpilogueStep, WithEpilogue, apply_epilogue, check_epilogue
from .kernel import KernelDef
from .onnx_convert import ImportContext, OnnxNode, Reject, converter
from .window import conv_out, lift_1d, window_attrs, windows


class ConvLike(WithEpilogue):
    """A convolution or a dense layer (``dense``): kernels, tasks and FLOPs (see the module docstring)."""

    __slots__ = ()
    dense: ClassVar[bool] = False

    @property
    def num_base_inputs(self) -> int:
        return 3 if self.has_bias else 2  # type: ignore[attr-defined]

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        return conv_kernel(g, node, target)

    def tasks(self, g: Graph, node: Node, target: Target) -> tuple:
        return node_tasks(g, node, target)

    def tuned_kernel(self, g: Graph, node: Node, task, index: int) -> KernelDef:
        """The node's kernel scheduled by config ``index`` of ``task`` (one of ``tasks``); ``conv_tasks.
        BlockMismatch`` when that config cannot run the node's layout."""
        return tuned_conv(g, node, task, index)

    def workload_kind(self, g: Graph, node: Node) -> str:
        return workload_kind(g, node)

    def untuned_key(self, g: Graph, node: Node) -> str:
        return untuned_key(g, node)

    def flops(self, g: Graph, node: Node) -> int:
        return ConvShape.of(g, node).flops

    def layer_blocks(self, g: Graph, node: Node) -> tuple[int, int] | None:
        return node_blocks(g, node)

    def data_and_weight(self, inputs, rank: int):
        """The data's and the weight's types, once the number of inputs and their ranks are checked."""
        base = self.num_base_inputs
        check_count(self, inputs, base, base + len(self.epilogue))  # type: ignore[attr-defined]
        check_rank(self, inputs[0], rank, "the data")
        check_rank(self, inputs[1], rank, "the weight")
        return inputs[0], inputs[1]

    def output(self, out: TensorType, inputs) -> tuple[TensorType]:
        """``(out,)``, once the epilogue's operands are checked against it."""
        check_epilogue(self, out, self.epilogue, inputs[self.num_base_inputs:])  # type: ignore[attr-defined]
        return (out,)


@dataclass(frozen=True, slots=True)
class Conv(ConvLike):
    """2-D convolution of NCHW data by OIHW weights (``[O, C/groups, KH, KW]``), with an optional bias and
    a fused elementwise ``epilogue``. Inputs: data, weight, bias (when ``has_bias``), epilogue operands."""

    layout_rule = LayoutRule.CONV
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilations: tuple[int, int] = (1, 1)
    groups: int = 1
    has_bias: bool = False
    epilogue: tuple[EpilogueStep, ...] = ()

    def __post_init__(self) -> None:
        check_ints(self, "strides", self.strides, 2)
        check_ints(self, "pads", self.pads, 4, minimum=0)
        check_ints(self, "dilations", self.dilations, 2)
        check_ints(self, "groups", (self.groups,), 1)

    def infer(self, inputs):
        x, w = self.data_and_weight(inputs, 4)
        check_float(self, x, "the data")
        n, c, h, wd = x.shape
        o, cg, kh, kw = w.shape
        if c % self.groups or o % self.groups or cg * self.groups != c:
            raise GraphError(f"Conv: {c} input channels in {self.groups} group(s) need weights [O, {c // self.groups}, "
                             f"KH, KW] with O divisible by the groups, got {w.shape}")
        if self.has_bias and inputs[2].shape != (o,):
            raise GraphError(f"Conv: the bias must have shape ({o},), got {inputs[2].shape}")
        oh = conv_out(h, kh, self.strides[0], self.pads[0], self.pads[2], self.dilations[0], self)
        ow = conv_out(wd, kw, self.strides[1], self.pads[1], self.pads[3], self.dilations[1], self)
        return self.output(TensorType((n, o, oh, ow), x.dtype), inputs)

    def is_depthwise(self, channels: int, out_channels: int) -> bool:
        return self.groups == channels == out_channels and channels > 1

    def reference(self, x: np.ndarray, w: np.ndarray, *rest: np.ndarray) -> np.ndarray:
        y = conv2d(self, x, w)
        if self.has_bias:
            y = y + rest[0][None, :, None, None]
        return apply_epilogue(self.epilogue, y, rest[self.num_base_inputs - 2:])


def conv2d(op: Conv, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The convolution of ``op`` without bias and epilogue (numpy)."""
    t, l, b, r = op.pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    o, cg, kh, kw = w.shape
    oh = conv_out(x.shape[2], kh, op.strides[0], t, b, op.dilations[0], op)
    ow = conv_out(x.shape[3], kw, op.strides[1], l, r, op.dilations[1], op)
    win = windows(xp, (kh, kw), op.strides, op.dilations, (oh, ow))
    g = op.groups
    og = o // g
    parts = [np.einsum("ncyxhw,ochw->noyx", win[:, k * cg:(k + 1) * cg], w[k * og:(k + 1) * og], optimize=True)
             for k in range(g)]
    return np.concatenate(parts, axis=1).astype(x.dtype, copy=False)


@converter("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def _conv(ctx: ImportContext, node: OnnxNode) -> None:
    x, w, b = node.input(0), node.input(1), node.input(2)
    if w is None or ctx.static(w) is None:
        raise Reject("its weight must be a constant (weights computed at run time are not supported)")
    if b is not None and ctx.static(b) is None:
        raise Reject("its bias must be a constant")
    w_shape = ctx.shape(w)
    kernel = tuple(node.attr("kernel_shape", w_shape[2:]))
    if kernel != tuple(w_shape[2:]):
        raise Reject(f"kernel_shape {list(kernel)} differs from the weight's {list(w_shape[2:])}")
    strides, dilations, pads = window_attrs(node, ctx.shape(x), kernel)
    op = Conv(strides, pads, dilations, int(node.attr("group", 1)), has_bias=b is not None)
    lift_1d(ctx, node, op, [x, w] + ([b] if b else []), lifted=(0, 1))


"""Convolutions: the 2-D ``Conv`` operator (with its fused bias and epilogue; 1-D ones run as 2-D ones of one row),
its kernels (``conv_kernels``) and tuning tasks (``conv_tasks``); the 3-D ``Conv3d`` and its default kernel
(``conv3d_kernels``); their ONNX converter and numpy reference.

``ConvLike`` is what a convolution and a dense layer (``matmul.Dense``, a 1x1 convolution of 1x1 images) share: a
constant weight, an optional bias, an epilogue, the blocked kernels and the templates that tune them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..graph.errors import GraphError
from ..graph.ir import Graph, Node, TensorType
from ..graph.op import LayoutRule, check_count, check_float, check_ints, check_rank
from ..target import Target
from .conv3d_kernels import conv3d_kernel
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
        return conv_type(self, inputs)

    def is_depthwise(self, channels: int, out_channels: int) -> bool:
        return self.groups == channels == out_channels and channels > 1

    def reference(self, x: np.ndarray, w: np.ndarray, *rest: np.ndarray) -> np.ndarray:
        return conv_reference(self, x, w, rest)


@dataclass(frozen=True, slots=True)
class Conv3d(ConvLike):
    """3-D convolution of NCDHW data by OIDHW weights (``[O, C/groups, KD, KH, KW]``), with an optional bias and a
    fused elementwise ``epilogue``; inputs as ``Conv``'s. Plain layouts; no template tunes it: its kernel is the
    default one of ``conv3d_kernels``, and its task group (``conv3d``) has no task."""

    strides: tuple[int, int, int] = (1, 1, 1)
    pads: tuple[int, ...] = (0, 0, 0, 0, 0, 0)  # the begins of depth, rows and columns, then their ends
    dilations: tuple[int, int, int] = (1, 1, 1)
    groups: int = 1
    has_bias: bool = False
    epilogue: tuple[EpilogueStep, ...] = ()

    def __post_init__(self) -> None:
        check_ints(self, "strides", self.strides, 3)
        check_ints(self, "pads", self.pads, 6, minimum=0)
        check_ints(self, "dilations", self.dilations, 3)
        check_ints(self, "groups", (self.groups,), 1)

    def infer(self, inputs):
        return conv_type(self, inputs)

    def reference(self, x: np.ndarray, w: np.ndarray, *rest: np.ndarray) -> np.ndarray:
        return conv_reference(self, x, w, rest)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        return conv3d_kernel(g, node, target)

    def tasks(self, g: Graph, node: Node, target: Target) -> tuple:
        return ()

    def workload_kind(self, g: Graph, node: Node) -> str:
        return "conv3d"

    def untuned_key(self, g: Graph, node: Node) -> str:
        """``[N,C,D,H,W]->O k3x3x3 s1x1x1 p1,1,1,1,1,1 d1x1x1 g1``, then its dtype unless float32."""
        dtype = g.values[node.outputs[0]].dtype
        shape = ",".join(map(str, g.values[node.inputs[0]].shape))
        o, _, *kernel = g.values[node.inputs[1]].shape
        return (f"[{shape}]->{o} k{'x'.join(map(str, kernel))} s{'x'.join(map(str, self.strides))} "
                f"p{','.join(map(str, self.pads))} d{'x'.join(map(str, self.dilations))} g{self.groups}"
                + ("" if dtype == "float32" else f" {dtype}"))

    def flops(self, g: Graph, node: Node) -> int:
        _, cg, *kernel = g.values[node.inputs[1]].shape
        return 2 * math.prod(g.values[node.outputs[0]].shape) * cg * math.prod(kernel)

    def layer_blocks(self, g: Graph, node: Node) -> None:
        return None


def conv_type(op: Conv | Conv3d, inputs) -> tuple[TensorType]:
    """The output type of a 2-D or 3-D convolution (``infer``)."""
    rank = len(op.strides)
    x, w = op.data_and_weight(inputs, 2 + rank)
    check_float(op, x, "the data")
    (n, c), (o, cg) = x.shape[:2], w.shape[:2]
    if c % op.groups or o % op.groups or cg * op.groups != c:
        raise GraphError(f"{op.kind}: {c} input channels in {op.groups} group(s) need weights [O, {c // op.groups}, "
                         f"{', '.join(('KD', 'KH', 'KW')[-rank:])}] with O divisible by the groups, got {w.shape}")
    if op.has_bias and inputs[2].shape != (o,):
        raise GraphError(f"{op.kind}: the bias must have shape ({o},), got {inputs[2].shape}")
    spatial = tuple(conv_out(size, k, s, b, e, d, op) for size, k, s, b, e, d in zip(
        x.shape[2:], w.shape[2:], op.strides, op.pads[:rank], op.pads[rank:], op.dilations))
    return op.output(TensorType((n, o) + spatial, x.dtype), inputs)


def conv_reference(op: Conv | Conv3d, x: np.ndarray, w: np.ndarray, rest: tuple[np.ndarray, ...]) -> np.ndarray:
    """A 2-D or 3-D convolution with its bias and epilogue (numpy)."""
    y = convolve(op, x, w)
    if op.has_bias:
        y = y + rest[0].reshape((-1,) + (1,) * (y.ndim - 2))
    return apply_epilogue(op.epilogue, y, rest[op.num_base_inputs - 2:])


def convolve(op: Conv | Conv3d, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The convolution of ``op`` without bias and epilogue (numpy)."""
    rank = len(op.strides)
    begin, end = op.pads[:rank], op.pads[rank:]
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(begin, end)))
    o, cg, *kernel = w.shape
    out = [conv_out(n, k, s, b, e, d, op) for n, k, s, b, e, d in zip(x.shape[2:], kernel, op.strides, begin, end,
                                                                       op.dilations)]
    win = windows(xp, kernel, op.strides, op.dilations, out)
    g = op.groups
    og = o // g
    at, taps = "zyx"[-rank:], "dhw"[-rank:]
    spec = f"nc{at}{taps},oc{taps}->no{at}"
    parts = [np.einsum(spec, win[:, k * cg:(k + 1) * cg], w[k * og:(k + 1) * og], optimize=True) for k in range(g)]
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
    kind = Conv3d if len(kernel) == 3 else Conv
    op = kind(strides, pads, dilations, int(node.attr("group", 1)), has_bias=b is not None)  # type: ignore[arg-type]
    lift_1d(ctx, node, op, [x, w] + ([b] if b else []), lifted=(0, 1))

"""Convolution and dense kernels on blocked tensors, with their fused epilogues.

A convolution (or depthwise convolution) is an ``Operator`` with the parts the convolution templates schedule
(``Part.PADDED_INPUT``, ``Part.ACCUMULATOR``) and its fused epilogue as ``Operator.epilogue``, so a tuned
config of ``conv2d_nchwc_packed`` applies to the fused kernel (``conv_tasks.tuned_conv``). ``winograd_operator`` is
the Winograd kernel of a 3x3, stride-1 convolution, its epilogue in the output transform, which configs of
``conv2d_winograd_nchwc_packed`` schedule; with no tuned config, ``default_winograd_tile`` picks it (or not) by a
rule (``ops.winograd.default_tile_size``). A dense layer is the 1x1 convolution of ``M`` 1x1 images of ``K``
channels (``[M, K]`` data lies in memory as such images). Grouped convolutions whose groups are narrower than a
channel block (ResNeXt's and RegNet's groups of 4 to 16 channels) run as convolutions of fewer, wider groups whose
weights are block-diagonal (``merged_groups``): a few times the multiply-adds, all in whole vectors, where a loop
nest per channel would run scalar. Those that cannot (at most ``MAX_MERGE`` groups merged) run a plain loop nest
(``generic_conv_kernel``).

The nodes are ``conv.Conv`` and ``matmul.Dense`` (told apart by ``op.dense``); their inputs are the data, the
weight, the bias when ``op.has_bias``, then the operands of the epilogue's binary steps.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from .. import te
from ..autotvm.workload import Conv2d, DepthwiseConv2d
from ..graph.errors import NetworkCompileError
from ..graph.ir import Graph, Node, TensorType, Value
from ..ops import Operator, Part, conv2d_winograd_nchwc, default_block
from ..ops.schedule_helpers import default_blocked_schedule
from ..ops.winograd import default_tile_size, winograd_weight
from ..schedule import create_schedule
from ..target import Target
from ..te import Tensor
from .kernel import KernelArgs, KernelDef, clamp, lanes_of, logical_index, pad_blocked, read
from .epilogue import epilogue_operands, epilogue_stages
from .reshape import Relayout

def _operands(a: KernelArgs, g: Graph, node: Node, one_row: bool = False) -> list[tuple[Tensor, Value, bool]]:
    """The epilogue's operands (``epilogue.epilogue_operands``); with ``one_row``, each seen as broadcasting to the
    output's pixels as one row (``flat_shape``; its value a view of that shape)."""
    if not one_row:
        return epilogue_operands(a, g, node)
    _, _, h, w = g.values[node.outputs[0]].shape
    return epilogue_operands(a, g, node, lambda v: Value(v.name, TensorType(flat_shape(v.shape, h, w), v.dtype),
                                                         v.layout))


def _no_reference(*_args):
    raise NotImplementedError("a network kernel is checked against the graph interpreter, not a reference")


# ------------------------------------------------------------------------------------------- convolutions

@dataclass(frozen=True)
class ConvShape:
    """The geometry of one convolution node, in the terms of its kernel."""

    N: int
    C: int
    H: int
    W: int
    O: int
    KH: int
    KW: int
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilations: tuple[int, int]
    groups: int
    OH: int
    OW: int

    @staticmethod
    def of(g: Graph, node: Node) -> "ConvShape":
        """A convolution's geometry; a dense layer's as a 1x1 convolution of 1x1 images (``[M, K]`` data lies in
        memory as ``M`` images of ``K`` channels, blocked or not)."""
        x, w, out = (g.values[node.inputs[0]], g.values[node.inputs[1]], g.values[node.outputs[0]])
        if node.op.dense:
            (m, k), n = x.shape, w.shape[0]
            return ConvShape(m, k, 1, 1, n, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1, 1, 1)
        n, c, h, wd = x.shape
        o, _, kh, kw = w.shape
        op = node.op
        return ConvShape(n, c, h, wd, o, kh, kw, op.strides, op.pads, op.dilations, op.groups, out.shape[2],
                         out.shape[3])

    def one_row(self) -> "ConvShape":
        """A 1x1, stride-1, unpadded convolution seen over its pixels as one row of ``H*W``
        (``conv_tasks.flat_workload``: the same memory in NCHW[x]c)."""
        assert (self.KH, self.KW, self.strides, self.pads) == (1, 1, (1, 1), (0, 0, 0, 0)), self
        return ConvShape(self.N, self.C, 1, self.H * self.W, self.O, 1, 1, (1, 1), (0, 0, 0, 0), self.dilations,
                         self.groups, 1, self.OH * self.OW)

    @property
    def flops(self) -> int:
        return 2 * self.N * self.O * self.OH * self.OW * (self.C // self.groups) * self.KH * self.KW

    @property
    def depthwise(self) -> bool:
        return self.groups == self.C == self.O and self.C > 1


#: the most groups ``merged_groups`` makes one (the work grows by as much)
MAX_MERGE = 16


def merged_groups(sh: ConvShape, icb: int, ocb: int) -> int | None:
    """The groups a convolution runs as: its own where they hold whole channel blocks, else the most groups, each
    ``m <= MAX_MERGE`` neighbours merged, that do; None when none do."""
    m = group_merge(sh.groups, ((sh.C, icb), (sh.O, ocb)))
    return None if m is None else sh.groups // m


def runs_as(sh: ConvShape, groups: int, icb: int, ocb: int) -> bool:
    """Whether the convolution's groups, merged by whole neighbours, are ``groups`` groups of whole channel
    blocks."""
    return sh.groups % groups == 0 and sh.C // groups % icb == 0 and sh.O // groups % ocb == 0


def group_merge(groups: int, channels_and_blocks) -> int | None:
    """The fewest neighbouring groups (``m <= MAX_MERGE``, dividing ``groups``) that, merged, hold whole blocks of
    each ``(channels, block)``; None when there are none."""
    for m in range(1, min(MAX_MERGE, groups) + 1):
        if groups % m == 0 and all(c // (groups // m) % b == 0 for c, b in channels_and_blocks):
            return m
    return None


def merge_group_weights(w: np.ndarray, groups: int, merged: int) -> np.ndarray:
    """``[O, C/groups, KH, KW]`` weights as those of ``merged`` groups: each output channel's weights at its own
    group's place among the merged group's input channels, zeros elsewhere."""
    if merged == groups:
        return w
    o, cg = w.shape[:2]
    m = groups // merged
    out = np.zeros((o, cg * m, *w.shape[2:]), w.dtype)
    for oc in range(o):
        j = oc // (o // groups) % m
        out[oc, j * cg:(j + 1) * cg] = w[oc]
    return out


def pack_conv_weight(w: np.ndarray, groups: int, icb: int, ocb: int) -> np.ndarray:
    """OIHW weights -> ``[O/ocb, C/groups/icb, KH, KW, icb, ocb]``."""
    o, cg, kh, kw = w.shape
    return w.reshape(o // ocb, ocb, cg // icb, icb, kh, kw).transpose(0, 2, 4, 5, 3, 1)


def pack_depthwise_weight(w: np.ndarray, cb: int) -> np.ndarray:
    """``[C, 1, KH, KW]`` depthwise weights -> ``[C/cb, KH, KW, cb]``."""
    c, _, kh, kw = w.shape
    return w.reshape(c // cb, cb, kh, kw).transpose(0, 2, 3, 1)


def blocked_conv(shape: ConvShape, icb: int, ocb: int, dtype: str, epilogue: Callable[[Tensor], list[Tensor]],
                 inputs: Callable[[], tuple[Tensor, Tensor, list[Tensor]]], ow_tile: int = 1,
                 plain_data: bool = False, flops: int | None = None) -> Operator:
    """Convolution of NCHW[icb]c data by packed weights into NCHW[ocb]c, with its epilogue stages.

    The groups must hold whole channel blocks; the output block ``oc`` reads the input blocks of its group.
    ``inputs()`` makes the placeholders (data, packed weight, the epilogue's), ``epilogue(acc)`` its stages.
    ``ow_tile``: accumulate over the output width rounded up to whole tiles of that many columns (columns past
    the end read the last one's inputs again and are dropped; as ``ops.conv2d_nchwc_packed``). ``plain_data``: the
    data is plain NCHW, blocked by the padding stage as it pads (``plain_source``).
    """
    sh = shape
    data, wp, extra = inputs()
    dp = pad_blocked(data, sh.pads, block=icb if plain_data else None)
    cg_blocks = sh.C // sh.groups // icb
    og_blocks = sh.O // sh.groups // ocb
    ico, ici = te.reduce_axis(cg_blocks, "ico"), te.reduce_axis(icb, "ici")
    kh, kw = te.reduce_axis(sh.KH, "kh"), te.reduce_axis(sh.KW, "kw")
    (sy, sx), (dy, dx) = sh.strides, sh.dilations
    stages: list[Tensor] = []

    owp = -(-sh.OW // ow_tile) * ow_tile

    def body(n, oc, y, x, ob):
        block = ico if sh.groups == 1 else oc // og_blocks * cg_blocks + ico
        col = te.minimum(x, sh.OW - 1) if owp > sh.OW else x
        return te.sum(dp[n, block, y * sy + kh * dy, col * sx + kw * dx, ici] * wp[oc, ico, kh, kw, ici, ob],
                      axis=[ico, kh, kw, ici])

    acc = te.compute((sh.N, sh.O // ocb, sh.OH, owp, ocb), body, "acc")
    base = acc if owp == sh.OW else te.compute((sh.N, sh.O // ocb, sh.OH, sh.OW, ocb), lambda *i: acc[i], "acc_crop")
    stages = epilogue(base)
    out = stages[-1] if stages else base
    between = ([base] if base is not acc and stages else []) + stages[:-1]
    parts = {Part.ACCUMULATOR: acc} | ({} if dp is data else {Part.PADDED_INPUT: dp})
    return Operator("conv2d", (data, wp, *extra), out, flops or sh.flops, _no_reference, default_blocked_schedule,
                    parts=parts, epilogue=tuple(between))


def depthwise_conv(shape: ConvShape, cb: int, epilogue: Callable[[Tensor], list[Tensor]],
                   inputs: Callable[[], tuple[Tensor, Tensor, list[Tensor]]]) -> Operator:
    """Depthwise convolution of NCHW[cb]c data by ``[C/cb, KH, KW, cb]`` weights, with its epilogue stages."""
    sh = shape
    data, wp, extra = inputs()
    kh, kw = te.reduce_axis(sh.KH, "kh"), te.reduce_axis(sh.KW, "kw")
    (sy, sx), (dy, dx), (pt, pl, _, _) = sh.strides, sh.dilations, sh.pads

    def body(n, c, y, x, b):
        # padding read in place (a row and column test per tap, the same for a vector of channels) rather than
        # from a padded copy of the input: the convolution is bound by memory, and the copy would double its traffic
        iy, ix = y * sy + kh * dy - pt, x * sx + kw * dx - pl
        inside = te.logical_and(iy >= 0, iy < sh.H, ix >= 0, ix < sh.W)
        tap = te.select(inside, data[n, c, clamp(iy, sh.H - 1), clamp(ix, sh.W - 1), b], te.const(0, data.dtype))
        return te.sum(tap * wp[c, kh, kw, b], axis=[kh, kw])

    acc = te.compute((sh.N, sh.C // cb, sh.OH, sh.OW, cb), body if any(sh.pads) else lambda n, c, y, x, b: te.sum(
        data[n, c, y * sy + kh * dy, x * sx + kw * dx, b] * wp[c, kh, kw, b], axis=[kh, kw]), "acc")
    stages = epilogue(acc)
    out = stages[-1] if stages else acc
    parts = {Part.ACCUMULATOR: acc}
    return Operator("depthwise_conv2d", (data, wp, *extra), out, sh.flops, _no_reference, default_blocked_schedule,
                    parts=parts, epilogue=tuple(stages[:-1]))


def conv_blocks(g: Graph, node: Node, lanes: int) -> tuple[int, int]:
    """The input and output channel blocks of a convolution (its values' layouts) or of a dense layer (its
    features blocked like channels, ``lanes`` per vector)."""
    if node.op.dense:
        sh = ConvShape.of(g, node)
        return default_block(sh.C, lanes), default_block(sh.O, lanes)
    return g.values[node.inputs[0]].layout.block, g.values[node.outputs[0]].layout.block


def is_blocked_conv(g: Graph, node: Node, lanes: int) -> bool:
    """Whether the node runs as a structured blocked convolution (groups holding whole blocks) or depthwise."""
    sh = ConvShape.of(g, node)
    icb, ocb = conv_blocks(g, node, lanes)
    if not icb or not ocb:
        return False
    if sh.depthwise:
        return icb == ocb
    return merged_groups(sh, icb, ocb) is not None


def fused_io(g: Graph, node: Node, a: KernelArgs, ocb: int, data_view: tuple[int, ...] | None,
             pack: Callable[[np.ndarray], np.ndarray], one_row: bool = False, data: str | None = None,
             prefix: str = "") -> tuple[Callable[[], tuple[Tensor | None, Tensor, list[Tensor]]],
                                        Callable[[Tensor], list[Tensor]]]:
    """``inputs()`` and ``epilogue(acc)`` of a node's fused convolution, arguments bound in ``a``: the data (the
    value ``data``, default the node's input, seen as ``data_view`` if given; none when ``data`` is ``""``: the
    kernel computes it), the node's constant OIHW weights packed by ``pack`` (once, here), the bias and the
    epilogue's operands (seen over the pixels as one row with ``one_row``); then the stages of its bias and
    epilogue after ``acc`` (blocks of ``ocb`` channels; names after ``prefix``)."""
    sh = ConvShape.of(g, node)
    out_v = g.values[node.outputs[0]]
    w = g.constants.get(node.inputs[1])
    if w is None:
        raise NetworkCompileError(f"{node.op.kind} '{node.name}': its weight must be a constant")
    w = w.reshape(sh.O, sh.C // sh.groups, sh.KH, sh.KW)
    bias_t: list[Tensor] = []
    operands: list[tuple[Tensor, Value, bool]] = []

    def inputs():
        x = None if data == "" else a.value(data or node.inputs[0], "data", data_view)
        wp = a.const(pack(w), "weight")
        if node.op.has_bias:
            bias_t.append(a.value(node.inputs[2], "bias"))
        operands.extend(_operands(a, g, node, one_row))
        return x, wp, bias_t + [t for t, _, _ in operands]

    def logical(ax):
        return (ax[0], ax[1] * ocb + ax[4]) if node.op.dense else logical_index(out_v.layout, ax)

    def epilogue(acc):
        return epilogue_stages(acc, node.op, bias_t[0] if bias_t else None, operands, logical, prefix)

    return inputs, epilogue


def conv_operator(g: Graph, node: Node, a: KernelArgs, lanes: int, ow_tile: int = 1,
                  dense_blocks: tuple[int, int] | None = None, one_row: bool = False,
                  groups: int | None = None) -> Operator:
    """The blocked convolution (or depthwise) operator of a Conv or Dense node, its arguments bound in ``a``
    (``ow_tile``: see ``blocked_conv``; ``dense_blocks``: the channel blocks of a dense layer, whose plain ``[M, K]``
    and ``[M, N]`` lie in memory as 1x1 images blocked any way, default ``conv_blocks``; ``one_row``: a 1x1,
    stride-1, unpadded convolution computed over its pixels as one row, ``ConvShape.one_row``; ``groups``: the
    groups the kernel runs, the node's merged by whole neighbours (a tuned workload's), default
    ``merged_groups``)."""
    sh = ConvShape.of(g, node)
    icb, ocb = dense_blocks if dense_blocks and node.op.dense else conv_blocks(g, node, lanes)
    sh = sh.one_row() if one_row else sh
    flops = sh.flops
    if not sh.depthwise:
        groups = merged_groups(sh, icb, ocb) if groups is None else groups
        if groups is None or not runs_as(sh, groups, icb, ocb):
            raise NetworkCompileError(f"{node.op.kind} '{node.name}': its {sh.groups} groups do not run as "
                                      f"{groups or 'fewer'} groups of whole channel blocks ({icb}/{ocb})")
        sh, own = replace(sh, groups=groups), sh.groups

    def pack(w):
        if sh.depthwise:
            return pack_depthwise_weight(w, ocb)
        return pack_conv_weight(merge_group_weights(w, own, sh.groups), sh.groups, icb, ocb)

    # the data as blocked images of the kernel's shape: a dense layer's [M, K] as 1x1 images, a one-row view's
    view = (sh.N, sh.C // icb, sh.H, sh.W, icb) if one_row or node.op.dense else None
    source = None if one_row or sh.depthwise else plain_source(g, node)
    inputs, epilogue = fused_io(g, node, a, ocb, view, pack, one_row, source)
    if sh.depthwise:
        return depthwise_conv(sh, ocb, epilogue, inputs)
    return blocked_conv(sh, icb, ocb, g.values[node.outputs[0]].dtype, epilogue, inputs, ow_tile, source is not None,
                        flops)


def plain_source(g: Graph, node: Node) -> str | None:
    """The plain NCHW value that a padded convolution's blocked input was relaid out from (by a ``Relayout`` node:
    the network's image input), or None. The convolution copies its input into a padded buffer anyway, so its
    padding stage reads the plain value and blocks it as it copies (``blocked_conv``'s ``plain_data``): one pass
    over the input instead of two. The relayout then has no reader left and does not run
    (``program.network_steps``)."""
    if node.op.dense or not any(node.op.pads):
        return None
    producer = next((n for n in g.nodes if node.inputs[0] in n.outputs), None)  # no map of the graph per node
    if producer is None or not isinstance(producer.op, Relayout):
        return None
    src = g.values[producer.inputs[0]]
    return producer.inputs[0] if not src.layout.blocked and src.shape == g.values[node.inputs[0]].shape else None


def winograd_operator(g: Graph, node: Node, a: KernelArgs, lanes: int, tile: int = 4, p_tile: int | None = None,
                      target: Target | None = None) -> Operator:
    """The Winograd F(tile x tile, 3 x 3) operator (``ops.conv2d_winograd_nchwc``) of a Conv node, its epilogue
    inlined into the output transform, its arguments bound in ``a``: the node's constant weights transformed once,
    here (``winograd_weight``). A ``NetworkCompileError`` for a node Winograd does not compute
    (``winograd_applies``)."""
    if not winograd_applies(g, node) or not is_blocked_conv(g, node, lanes):
        raise NetworkCompileError(f"{node.op.kind} '{node.name}' is not a 3x3, stride-1, ungrouped convolution with "
                                  "equal pads in the blocked layout: Winograd does not compute it")
    sh = ConvShape.of(g, node)
    icb, ocb = conv_blocks(g, node, lanes)
    inputs, epilogue = fused_io(g, node, a, ocb, None, lambda w: winograd_weight(w, tile, icb, ocb))
    return conv2d_winograd_nchwc(sh.N, sh.C, sh.H, sh.W, sh.O, 3, 1, sh.pads[0], tile, icb, ocb,
                                 g.values[node.outputs[0]].dtype, p_tile=p_tile, target=target, inputs=inputs,
                                 epilogue=epilogue)


def conv_kind(g: Graph, node: Node) -> str:
    if node.op.dense:
        return "dense"
    return "depthwise_conv2d" if ConvShape.of(g, node).depthwise else "conv2d"


def default_winograd_tile(g: Graph, node: Node, target: Target, lanes: int) -> int | None:
    """The tile size of the Winograd kernel that runs a 3x3, stride-1 convolution with no tuned config, or None
    for the direct convolution's default schedule (``ops.winograd.default_tile_size``: a rule measured on the
    network's layers)."""
    if not winograd_applies(g, node) or not is_blocked_conv(g, node, lanes):
        return None
    sh = ConvShape.of(g, node)
    return default_tile_size(target, sh.N, sh.H, sh.W, sh.pads[0])


def conv_kernel(g: Graph, node: Node, target: Target) -> KernelDef:
    """The kernel of a Conv or Dense node with its default schedule: Winograd where ``default_winograd_tile`` says,
    else the blocked convolution, else plain loops."""
    lanes = lanes_of(target, g.values[node.outputs[0]].dtype, node)
    tile = default_winograd_tile(g, node, target, lanes)
    if tile is not None:
        return winograd_kernel(g, node, target, lanes, tile)
    a = KernelArgs(g)
    if is_blocked_conv(g, node, lanes):
        op = conv_operator(g, node, a, lanes)
        return a.done(conv_kind(g, node), node, op.output, op.default_schedule(target), op.flops)
    return generic_conv_kernel(g, node, a, lanes)


def winograd_kernel(g: Graph, node: Node, target: Target, lanes: int, tile: int) -> KernelDef:
    """The Winograd F(tile x tile, 3 x 3) kernel of a 3x3, stride-1 node (``winograd_operator``) with the operator's
    default schedule."""
    a = KernelArgs(g)
    op = winograd_operator(g, node, a, lanes, tile, target=target)
    return a.done(conv_kind(g, node), node, op.output, op.default_schedule(target), op.flops,
                  extra_key=("winograd", tile))


def generic_conv_kernel(g: Graph, node: Node, a: KernelArgs, lanes: int) -> KernelDef:
    """Any convolution on any layouts (groups not holding whole blocks, channel multipliers): plain loops."""
    sh = ConvShape.of(g, node)
    xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
    x = a.value(node.inputs[0], "data")
    w = a.value(node.inputs[1], "weight")
    bias = a.value(node.inputs[2], "bias") if node.op.has_bias else None
    ops = _operands(a, g, node)
    cg, og = sh.C // sh.groups, sh.O // sh.groups
    rc, kh, kw = te.reduce_axis(cg, "rc"), te.reduce_axis(sh.KH, "kh"), te.reduce_axis(sh.KW, "kw")
    (sy, sx), (dy, dx), (pt, pl, _, _) = sh.strides, sh.dilations, sh.pads

    def body(*axes):
        n, o, y, xx = logical_index(out_v.layout, axes)
        c = o // og * cg + rc
        iy, ix = y * sy + kh * dy - pt, xx * sx + kw * dx - pl
        inside = te.logical_and(iy >= 0, iy < sh.H, ix >= 0, ix < sh.W)
        val = read(x, xv.layout, (n, c, clamp(iy, sh.H - 1), clamp(ix, sh.W - 1)))
        return te.sum(te.select(inside, val, te.const(0, out_v.dtype)) * w[o, rc, kh, kw], axis=[rc, kh, kw])

    acc = te.compute(out_v.layout.storage_shape(out_v.shape), body, "acc")
    stages = epilogue_stages(acc, node.op, bias, ops, lambda ax: logical_index(out_v.layout, ax))
    out = stages[-1] if stages else acc
    s = create_schedule(out)
    for t in stages[:-1]:
        s[t].compute_inline()
    fused = s[out].fuse(*s[out].axis)
    s[out].parallel(fused)
    if stages:
        s[acc].compute_at(s[out], fused)
    return a.done("conv2d_generic", node, out, s, sh.flops)


# ------------------------------------------------------------------------------------------- geometry of tasks

def layer_workload(g: Graph, node: Node) -> Conv2d | DepthwiseConv2d | None:
    """The workload of a convolution node that templates compute (square kernel, equal strides, equal pads, no
    dilation, blocked layout; depthwise, or in groups that run blocked: ``Conv2d(..., groups=)`` of the groups the
    kernel runs, ``merged_groups`` of the layout's blocks), of a dense layer ``[M, K] x [K, N]`` as the 1x1
    convolution ``Conv2d(M, K, 1, 1, N, 1, 1, 0)`` of 1x1 images; else None."""
    x, w, out = g.values[node.inputs[0]], g.values[node.inputs[1]], g.values[node.outputs[0]]
    if node.op.dense:
        (m, k), n = x.shape, w.shape[0]
        return Conv2d(m, k, 1, 1, n, 1, 1, 0, dtype=out.dtype)
    op = node.op
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    regular = kh == kw and op.strides[0] == op.strides[1] and len(set(op.pads)) == 1 and op.dilations == (1, 1)
    if not regular or not x.layout.blocked:
        return None
    if op.is_depthwise(c, o):
        return DepthwiseConv2d(n, c, h, wd, kh, op.strides[0], op.pads[0], dtype=out.dtype)
    groups = 1 if op.groups == 1 else merged_groups(ConvShape.of(g, node), x.layout.block, out.layout.block)
    if groups is None:
        return None
    return Conv2d(n, c, h, wd, o, kh, op.strides[0], op.pads[0], dtype=out.dtype, groups=groups)


def winograd_applies(g: Graph, node: Node) -> bool:
    """Whether Winograd's F(m x m, 3 x 3) computes the node: a regular, ungrouped 3x3, stride-1 convolution (the
    node's own groups: a grouped one whose workload merges its groups into one, with block-diagonal weights, has
    weights Winograd does not transform)."""
    wl = layer_workload(g, node) if not node.op.dense else None
    return isinstance(wl, Conv2d) and (wl.K, wl.stride, wl.groups) == (3, 1, 1) and node.op.groups == 1


def flat_shape(shape: tuple[int, ...], h: int, w: int) -> tuple[int, ...] | None:
    """A tensor of ``shape`` that broadcasts to an ``[..., h, w]`` output, seen as broadcasting to ``[..., 1, h*w]``
    (the same elements in the same order): its last two axes ``(h, w)`` become ``(1, h*w)``, and a tensor that
    broadcasts over both is seen as it is; None for one that broadcasts over one of the two only."""
    rows, cols = ((1, 1) + tuple(shape))[-2:]
    if (rows, cols) == (1, 1):
        return tuple(shape)
    if (rows, cols) == (h, w) and len(shape) >= 2:
        return tuple(shape[:-2]) + (1, h * w)
    return None

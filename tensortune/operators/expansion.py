"""A 1x1 expansion fused into the depthwise convolution that reads it: one kernel, no expanded tensor in memory.

In an inverted-residual block (MobileNetV2) a 1x1 convolution expands a few channels into many (16 -> 96 at
112x112: a 4.8 MB tensor), and the depthwise convolution after it reads that tensor back. Fused, the expanded
rows are computed per band of the depthwise output's rows and per group of channel blocks, into a buffer on the
stack that the depthwise taps read while it is in the core's cache; the expanded tensor is never written.

Which pairs fuse is this module's rule (``expansion_into_depthwise``, registered with ``graph.op.producer_fusion``;
``passes.fuse_producers`` applies it): a depthwise node takes in the 1x1 convolution it reads where that convolution
is stride-1, unpadded and ungrouped on the blocked layout, its epilogue takes no operands (bias and activations
only), its output is read by the depthwise node alone, is not a graph output and is at least ``MIN_EXPANDED_BYTES``
(smaller ones stay in the cache between two kernels: fused, they measured slower). CPU targets only: the fused
kernel's tiling is a CPU's. The fused node takes the depthwise node's place and name; the expansion's node is gone,
so tuning, refining and profiling see one node and one call. The kernel's stages (``expand_depthwise_kernel``):

* ``expand_acc`` -- the 1x1 convolution over the depthwise layer's *padded* domain (rows and columns the taps read,
  the columns rounded up to whole register tiles; positions in the padding read the nearest input pixel, their
  values are replaced by zeros next), accumulated in a register tile of ``tile`` columns x the group's vectors;
* ``expanded`` -- its bias and activations, then zero where the depthwise layer pads (``select``), computed at the
  output's channel-group loop inside a band of rows: the band's rows plus the taps' halo (recomputed by the
  neighbouring band), which is all that band reads;
* ``acc`` / the depthwise epilogue -- the depthwise convolution of ``expanded``, a register tile of ``dw_tile``
  columns per row and channel block, written once through its bias and activations.

The bands run in parallel. Recomputing the halo rows costs ``((R-1)*stride + KH) / (R*stride)`` of the 1x1's
arithmetic; the band height ``R`` is the largest whose buffer fits the stack limit with a number of bands the
threads share evenly (``expansion_plan``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .. import te
from ..codegen.c import STACK_LIMIT_BYTES
from ..dtype import DType
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node, Value
from ..graph.op import Op, producer_fusion
from ..schedule import create_schedule
from ..target import Target, TargetKind
from .conv import Conv
from .conv_kernels import (ConvShape, conv_blocks, fused_io, is_blocked_conv, pack_conv_weight,
                           pack_depthwise_weight)
from .kernel import KernelArgs, KernelDef, clamp, lanes_of

#: the kind of the fused kernel (``KernelDef.kind``, and a compiled module's ``KernelInfo.kind``)
KIND = "expand_depthwise"
#: a group of two vectors of channels is taken where its band recomputes at most this much of the expansion
MAX_RECOMPUTE = 1.15
#: the most columns of the 1x1's register tile
MAX_TILE = 12


@dataclass(frozen=True, slots=True)
class ExpandDepthwise(Op):
    """A 1x1 convolution ``expand`` (the node ``expand_node``) and the depthwise convolution ``depthwise`` that
    reads its output ``expanded``, computed by one kernel. Inputs: the expansion's (data, weight, bias), then the
    depthwise convolution's after its data (weight, bias, epilogue operands); output: the depthwise's. The node
    keeps the depthwise node's name."""

    expand: Conv
    depthwise: Conv
    expand_node: str
    expanded: Value

    def __post_init__(self) -> None:
        if any(s.has_operand for s in self.expand.epilogue):
            raise GraphError("ExpandDepthwise: the expansion's epilogue cannot take operands")

    def infer(self, inputs):
        n = self.expand.num_base_inputs
        (mid,) = self.expand.infer(inputs[:n])
        if mid != self.expanded.type:
            raise GraphError(f"ExpandDepthwise: the expansion makes {mid}, not {self.expanded.type}")
        return self.depthwise.infer([mid, *inputs[n:]])

    def reference(self, *args: np.ndarray) -> np.ndarray:
        n = self.expand.num_base_inputs
        return self.depthwise.reference(self.expand.reference(*args[:n]), *args[n:])

    def unfused(self, g: Graph, node: Node) -> tuple[Graph, tuple[Node, Node]]:
        """The two nodes it fuses (the expansion, the depthwise convolution) in a graph of their own, the expanded
        value in its layout."""
        n = self.expand.num_base_inputs
        mid = self.expanded.name
        pw = Node(self.expand, node.inputs[:n], (mid,), self.expand_node)
        dw = Node(self.depthwise, (mid, *node.inputs[n:]), node.outputs, node.name)
        names = dict.fromkeys([*node.inputs, *node.outputs])
        values = {name: g.values[name] for name in names} | {mid: self.expanded}
        inputs = tuple(i for i in names if i in node.inputs and not g.is_constant(i))
        consts = {i: g.constants[i] for i in names if g.is_constant(i)}
        return Graph(g.name, inputs, node.outputs, (pw, dw), values, consts), (pw, dw)

    def flops(self, g: Graph, node: Node) -> int:
        sub, parts = self.unfused(g, node)
        return sum(n.op.flops(sub, n) for n in parts)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        sub, (pw, dw) = self.unfused(g, node)
        return expand_depthwise_kernel(sub, pw, dw, target)

    def __str__(self) -> str:
        return f"ExpandDepthwise[{self.expand_node}: {self.expand} -> {self.depthwise}]"


#: expanded tensors smaller than this are left to the two kernels (they stay in the cache between them)
MIN_EXPANDED_BYTES = 1 << 20


def fusable_expansion(g: Graph, node: Node, lanes: int) -> Node | None:
    """The 1x1 expansion that depthwise ``node`` reads and can compute itself (see the module docstring), or
    None."""
    if not isinstance(node.op, Conv) or not is_blocked_conv(g, node, lanes) or not ConvShape.of(g, node).depthwise:
        return None
    src = node.inputs[0]
    pw = next((n for n in g.nodes if src in n.outputs), None)
    if pw is None or not isinstance(pw.op, Conv) or not is_blocked_conv(g, pw, lanes):
        return None
    sh = ConvShape.of(g, pw)
    if (sh.KH, sh.KW, sh.strides, sh.pads, sh.groups) != (1, 1, (1, 1), (0, 0, 0, 0), 1):
        return None
    if any(step.has_operand for step in pw.op.epilogue) or src in g.outputs:
        return None
    if any(src in n.inputs for n in g.nodes if n is not node):
        return None
    if g.values[src].type.nbytes < MIN_EXPANDED_BYTES:
        return None
    return pw


@producer_fusion
def expansion_into_depthwise(g: Graph, node: Node, target: Target) -> tuple[Node, Node] | None:
    """The expansion depthwise ``node`` computes itself on a CPU target (``fusable_expansion``), and the
    ``ExpandDepthwise`` node of the pair; else None."""
    if target.kind is not TargetKind.C or not isinstance(node.op, Conv):
        return None
    pw = fusable_expansion(g, node, lanes_of(target, g.values[node.outputs[0]].dtype, node))
    if pw is None:
        return None
    op = ExpandDepthwise(pw.op, node.op, pw.name, g.values[pw.outputs[0]])
    return pw, Node(op, pw.inputs + node.inputs[1:], node.outputs, node.name)


@dataclass(frozen=True)
class ExpansionPlan:
    """How the fused kernel is tiled: ``rows`` output rows per band, ``group`` channel blocks per expanded
    buffer, ``tile`` columns of the 1x1's register tile, ``dw_tile`` columns of the depthwise one."""

    rows: int
    group: int
    tile: int
    dw_tile: int


def expansion_plan(dw: ConvShape, cb: int, target: Target, dtype: DType = DType.float32) -> ExpansionPlan:
    """The tiling of a fused expansion + depthwise kernel on ``target`` (blocks of ``cb`` channels): for a group
    of one or two vectors of channels (two: each broadcast input feeds both), the tallest band of rows whose
    expanded buffer fits the stack, preferring a number of bands the threads share evenly; the group of two where
    its band recomputes at most ``MAX_RECOMPUTE`` of the expansion, else the group recomputing least. Then the
    widest 1x1 register tile that fits the registers beside its operands (up to ``MAX_TILE`` columns) and the
    widest depthwise tile dividing the output width (up to 8)."""
    lanes = max(1, target.lanes(dtype))
    vectors = max(1, cb // lanes)
    blocks = dw.C // cb
    threads = target.num_cores
    plans = []
    for group in sorted({d for d in range(1, blocks + 1) if blocks % d == 0 and d * vectors <= 2}, reverse=True):
        tile = max(1, min(MAX_TILE, target.accumulator_budget(group * vectors) // (group * vectors)))
        width = _expanded_width(dw, tile)

        def fits(r: int) -> bool:
            return group * cb * _band_rows(dw, r) * width * dtype.bytes <= STACK_LIMIT_BYTES

        rows = max([r for r in range(1, dw.OH + 1) if dw.OH % r == 0 and fits(r)] or [1],
                   key=lambda r: ((dw.OH // r) % threads == 0, r))
        recompute = _band_rows(dw, rows) / (rows * dw.strides[0])
        plans.append((recompute, ExpansionPlan(rows, group, tile, 0)))
    _, plan = next(((r, p) for r, p in plans if r <= MAX_RECOMPUTE), min(plans, key=lambda rp: rp[0]))
    dw_tile = max(d for d in range(1, min(8, dw.OW) + 1) if dw.OW % d == 0)
    return dataclasses.replace(plan, dw_tile=dw_tile)


def _band_rows(dw: ConvShape, rows: int) -> int:
    return (rows - 1) * dw.strides[0] + (dw.KH - 1) * dw.dilations[0] + 1


def _expanded_width(dw: ConvShape, tile: int) -> int:
    """Columns of the padded expanded domain the taps read, rounded up to whole 1x1 tiles."""
    cols = (dw.OW - 1) * dw.strides[1] + (dw.KW - 1) * dw.dilations[1] + 1
    return -(-cols // tile) * tile


def expand_depthwise_kernel(g: Graph, pw: Node, dw: Node, target: Target, plan: ExpansionPlan | None = None
                            ) -> KernelDef:
    """The fused kernel of 1x1 expansion ``pw`` and depthwise ``dw`` (``fusable_expansion``):
    reads ``pw``'s input, writes ``dw``'s output."""
    dtype = DType.of(g.values[dw.outputs[0]].dtype)
    lanes = lanes_of(target, dtype, dw)
    psh, dsh = ConvShape.of(g, pw), ConvShape.of(g, dw)
    icb, cb = conv_blocks(g, pw, lanes)
    plan = plan or expansion_plan(dsh, cb, target, dtype)
    a = KernelArgs(g)
    pw_inputs, pw_epilogue = fused_io(g, pw, a, cb, None, lambda w: pack_conv_weight(w, 1, icb, cb),
                                      prefix="expand_")
    dw_inputs, dw_epilogue = fused_io(g, dw, a, cb, None, lambda w: pack_depthwise_weight(w, cb), data="")
    x, wp, _ = pw_inputs()
    _, wd, _ = dw_inputs()

    (sy, sx), (dy, dx), (pt, pl, _, _) = dsh.strides, dsh.dilations, dsh.pads
    rows = (dsh.OH - 1) * sy + (dsh.KH - 1) * dy + 1
    cols = _expanded_width(dsh, plan.tile)
    ico, ici = te.reduce_axis(psh.C // icb, "ico"), te.reduce_axis(icb, "ici")

    def expand(n, c, y, xx, b):  # positions in the padding read the nearest pixel (replaced by zeros next)
        return te.sum(x[n, ico, clamp(y - pt, psh.H - 1), clamp(xx - pl, psh.W - 1), ici] * wp[c, ico, 0, 0, ici, b],
                      axis=[ico, ici])

    shape = (psh.N, psh.O // cb, rows, cols, cb)
    acc_pw = te.compute(shape, expand, "expand_acc")
    pw_stages = pw_epilogue(acc_pw)
    act = pw_stages[-1] if pw_stages else acc_pw
    zero = te.const(0, act.dtype)

    def padded(n, c, y, xx, b):
        inside = te.logical_and(y >= pt, y < psh.H + pt, xx >= pl, xx < psh.W + pl)
        return te.select(inside, act[n, c, y, xx, b], zero)

    mid = te.compute(shape, padded, "expanded")
    kh, kw = te.reduce_axis(dsh.KH, "kh"), te.reduce_axis(dsh.KW, "kw")
    acc = te.compute((dsh.N, dsh.C // cb, dsh.OH, dsh.OW, cb), lambda n, c, y, xx, b: te.sum(
        mid[n, c, y * sy + kh * dy, xx * sx + kw * dx, b] * wd[c, kh, kw, b], axis=[kh, kw]), "acc")
    dw_stages = dw_epilogue(acc)
    out = dw_stages[-1] if dw_stages else acc

    s = create_schedule(out)
    for t in pw_stages + dw_stages[:-1]:
        s[t].compute_inline()
    accum = s.cache_write(acc, "local") if acc is out else acc
    o = s[out]
    n, c, y, xx, b = o.axis
    yo, yi = o.split(y, plan.rows)
    co, ci = o.split(c, plan.group)
    xo, xi = o.split(xx, plan.dw_tile)
    o.reorder(n, yo, co, ci, yi, xo, xi, b)
    o.parallel(o.fuse(n, yo))
    o.unroll(xi)
    o.vectorize(b)
    d = s[accum]
    d.compute_at(o, xo)
    _, _, _, dx_, db = d.axis
    d.reorder(*d.reduce_axis, dx_, db)
    d.unroll(d.reduce_axis[1])
    d.unroll(dx_)
    d.vectorize(db)
    m = s[mid]
    m.compute_at(o, co)
    mn, mc, my, mx, mb = m.axis
    mxo, mxi = m.split(mx, plan.tile)
    m.reorder(mn, my, mxo, mc, mxi, mb)
    m.unroll(mc)  # the register tile is read back in straight-line code: its accumulators stay in registers
    m.unroll(mxi)
    m.vectorize(mb)
    p = s[acc_pw]
    p.compute_at(m, mxo)
    _, pc, _, px, pb = p.axis
    p.reorder(*p.reduce_axis, px, pc, pb)
    p.unroll(px)
    p.unroll(pc)
    p.vectorize(pb)
    return a.done(KIND, dw, out, s, psh.flops + dsh.flops, extra_key=("expand", pw.op, psh, plan))

"""``fuse_expansions``: a 1x1 expansion and the depthwise convolution that reads it become one node
(``operators.ExpandDepthwise``), computed by one kernel that never stores the expanded tensor.

A depthwise node fuses the 1x1 convolution it reads where that convolution is stride-1, unpadded and ungrouped on
the blocked layout, its epilogue takes no operands (bias and activations only), its output is read by the
depthwise node alone, is not a graph output and is at least ``MIN_EXPANDED_BYTES`` (smaller ones stay in the
cache between two kernels: fused, they measured slower). CPU targets only: the fused kernel's tiling is a CPU's.
The fused node takes the depthwise node's place and name; the expansion's node is gone, so tuning, refining and
profiling see one node and one call.
"""
from __future__ import annotations

from ..graph.ir import Graph, GraphBuilder, Node
from ..operators import Conv, ExpandDepthwise
from ..operators.conv_kernels import ConvShape, is_blocked_conv
from ..operators.kernel import lanes_of
from ..target import Target, TargetKind

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


def fuse_expansions(g: Graph, target: Target) -> Graph:
    if target.kind is not TargetKind.C:
        return g
    pairs = {}
    for node in g.nodes:
        if isinstance(node.op, Conv) and (pw := fusable_expansion(
                g, node, lanes_of(target, g.values[node.outputs[0]].dtype, node))) is not None:
            pairs[node.name] = pw
    if not pairs:
        return g
    fused = {pw.name for pw in pairs.values()}
    b = GraphBuilder.like(g)
    for node in g.nodes:
        if node.name in fused:
            continue
        pw = pairs.get(node.name)
        if pw is None:
            b.keep(node, g)
            continue
        op = ExpandDepthwise(pw.op, node.op, pw.name, g.values[pw.outputs[0]])
        b.keep(Node(op, pw.inputs + node.inputs[1:], node.outputs, node.name), g)
    return b.build()

"""The kernel of a 3-D convolution (``conv.Conv3d``) on plain NCDHW tensors, with its bias and fused epilogue.

No template tunes it; its schedule follows the untuned 2-D convolution's (``ops.schedule_helpers.
default_blocked_schedule``) with the output row in the vector lanes instead of a channel block: a register tile of
``ot`` output channels x one output row is accumulated over (the group's input channels, kd, kh, kw), each step one
row of inputs (a vector load at stride 1) times a broadcast weight per channel, then written once through the
epilogue; parallel over batch, channel tiles and output depth. A padded input is copied into a padded buffer first
(in parallel), so the inner loop reads without tests.
"""
from __future__ import annotations

from .. import te
from ..graph.ir import Graph, Node
from ..schedule import create_schedule
from ..target import Target
from .epilogue import epilogue_operands, epilogue_stages
from .kernel import KernelArgs, KernelDef, lanes_of, logical_index, pad_blocked


def row_tile(channels: int, width: int, lanes: int, registers: int) -> tuple[int, int]:
    """``(ot, columns)`` of a register tile: ``columns`` the whole row, or its largest divisor of at least one vector
    whose vectors fit ``registers`` accumulators when the row's do not (a row with no such divisor stays whole,
    accumulated in memory); ``ot`` the most output channels, a divisor of ``channels``, whose rows fit too."""
    vectors = -(-width // lanes)
    if vectors > registers:
        fit = [d for d in range(lanes, registers * lanes + 1) if width % d == 0]
        width = fit[-1] if fit else width
        vectors = -(-width // lanes)
    ot = max(d for d in range(1, channels + 1) if channels % d == 0 and (d == 1 or d * vectors <= registers))
    return ot, width


def conv3d_kernel(g: Graph, node: Node, target: Target) -> KernelDef:
    """The kernel of a ``Conv3d`` node with its default schedule (see the module docstring)."""
    op = node.op
    wv, out_v = g.values[node.inputs[1]], g.values[node.outputs[0]]
    a = KernelArgs(g)
    x = a.value(node.inputs[0], "data")
    w = a.value(node.inputs[1], "weight")
    bias = a.value(node.inputs[2], "bias") if op.has_bias else None
    operands = epilogue_operands(a, g, node)
    o, cg, *kernel = wv.shape
    og = o // op.groups
    dp = pad_blocked(x, op.pads)
    rc = te.reduce_axis(cg, "rc")
    taps = [te.reduce_axis(k, name) for k, name in zip(kernel, ("kd", "kh", "kw"))]

    def body(n, oc, z, y, col):
        c = rc if op.groups == 1 else oc // og * cg + rc
        src = [i * s + k * d for i, s, k, d in zip((z, y, col), op.strides, taps, op.dilations)]
        return te.sum(dp[(n, c, *src)] * w[(oc, rc, *taps)], axis=[rc, *taps])

    acc = te.compute(out_v.shape, body, "acc")
    stages = epilogue_stages(acc, op, bias, operands, lambda ax: logical_index(out_v.layout, ax))
    out = stages[-1] if stages else acc

    s = create_schedule(out)
    for t in stages[:-1]:
        s[t].compute_inline()
    if dp is not x:
        pad = s[dp]
        pad.parallel(pad.fuse(*pad.axis[:3]))
    accum = s.cache_write(acc, "local") if acc is out else acc
    lanes = lanes_of(target, out_v.dtype, node)
    ot, columns = row_tile(og, out_v.shape[4], lanes, target.max_accumulators())
    st = s[out]
    n, oc, z, y, col = st.axis
    oco, oci = st.split(oc, ot)
    xo, xi = st.split(col, columns)
    st.reorder(n, oco, z, y, xo, oci, xi)
    st.parallel(st.fuse(n, oco, z))
    st.vectorize(xi)
    s[accum].compute_at(st, xo)
    _, a_oc, _, _, a_col = s[accum].axis
    s[accum].reorder(*s[accum].reduce_axis, a_oc, a_col)
    s[accum].unroll(a_oc)
    s[accum].vectorize(a_col)
    return a.done("conv3d", node, out, s, op.flops(g, node))

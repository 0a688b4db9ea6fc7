"""Convolution templates for CPUs with pre-packed weights: NCHW input and output, or (the packed
view, ``conv2d_nchwc_packed``) the NCHW16c layout a compiled network keeps between layers.

Each accumulates a register tile of ``reg_n`` output columns x ``ob`` output channels (``ob``
channels are vector lanes), computed at a tile loop of the NCHW output and unpacked there.
The knobs choose the channel blocks, the row/column tiling, the order of outer and reduction
loops, unrolling and the parallel loops.
"""
from __future__ import annotations

from ...ops import (Operator, Part, conv2d_nchwc, conv2d_nchwc_packed, conv2d_spatial_pack, depthwise_conv2d_nchwc,
                    packed_blocks)
from ...ops.conv import conv_out_size
from ...ops.schedule_helpers import local_accumulator, parallel_input_transform
from ...schedule import Axis, Schedule, StageHandle, create_schedule
from ..space import SplitEntity
from ..task import template

#: accumulator registers available for the register tile (of 32 on AVX-512; leave some for operands)
MAX_ACC_REGS = 28
LANES = 16  # float32 lanes of an AVX-512 register; only used to bound the register tile in the filter


def _channel_block(e: SplitEntity) -> bool:
    """Blocks of whole vectors (multiples of 8 lanes, at most 64), or all channels when they are few."""
    return e.size[-1] <= 64 and (e.size[-1] % 8 == 0 or e.size[0] == 1)


def _define_tiles(cfg, channels: int, oh: int, ow: int, block_name: str) -> None:
    cfg.define_split(block_name, channels, num_outputs=2, filter=_channel_block)
    cfg.define_split("tile_oh", oh, num_outputs=2)
    cfg.define_split("tile_ow", ow, num_outputs=3, filter=lambda e: e.size[-1] <= 32)
    cfg.define_reorder("reorder_outer", [0, 1, 2], policy="all")
    cfg.define_knob("parallel", ["fuse1", "fuse2"])
    cfg.define_knob("unroll_kw", [True, False])
    cfg.define_knob("vectorize_unpack", [True, False])
    cfg.define_knob("unroll_unpack", [False, True])
    cfg.add_filter(lambda c: c["tile_ow"].size[-1] * -(-c[block_name].size[-1] // LANES) <= MAX_ACC_REGS)


def _tile_output(cfg, out: StageHandle, n: Axis, oo: Axis, oi: Axis, y: Axis, x: Axis,
                 *lanes: Axis) -> tuple[Axis, Axis]:
    """Tile the output's rows (``tile_oh``) and columns (``tile_ow``), order its loops as batch, the
    outer tiles of channels, rows and columns (``reorder_outer``), then the inner rows, the middle
    columns, ``oi``, the inner columns and ``lanes``, and run the batch fused with one or two outer
    tiles (``parallel``) in parallel. Returns the middle and the inner column loops."""
    yo, yi = cfg["tile_oh"].apply(out, y)
    xo, xm, xi = cfg["tile_ow"].apply(out, x)
    outer = cfg["reorder_outer"].apply(out, [oo, yo, xo])
    out.reorder(n, *outer, yi, xm, oi, xi, *lanes)
    fused = out.fuse(n, outer[0])
    if cfg["parallel"] == "fuse2":
        fused = out.fuse(fused, outer[1])
    out.parallel(fused)
    return xm, xi


def _schedule(cfg, op: Operator, block_name: str, reduce_order: list[int] | None) -> Schedule:
    """Shared schedule of the channel-blocked convolutions (see the module docstring)."""
    s = create_schedule(op.output)
    out, conv = s[op.output], s[op.part(Part.ACCUMULATOR)]
    parallel_input_transform(s, op)
    n, o, y, x = out.axis
    oo, oi = out.split(o, cfg[block_name].size[-1])
    xm, xi = _tile_output(cfg, out, n, oo, oi, y, x)
    if cfg["vectorize_unpack"]:
        out.vectorize(xi)
    if cfg["unroll_unpack"]:
        out.unroll(oi)
    conv.compute_at(out, xm)
    _, _, _, cx, cb = conv.axis
    red = list(conv.reduce_axis)
    kw = red[-2] if len(red) == 4 else red[-1]
    if reduce_order is not None:
        outer_red = [red[i] for i in reduce_order]
        conv.reorder(*outer_red, *red[len(reduce_order):], cx, cb)
    else:
        conv.reorder(*red, cx, cb)
    if cfg["unroll_kw"]:
        conv.unroll(kw)
    conv.unroll(cx)
    conv.vectorize(cb)
    return s


@template("conv2d_nchwc")
def conv2d_nchwc_template(cfg, N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1, pad: int = 0,
                          dtype: str = "float32"):
    """NCHW[x]c conv2d: input channels blocked (tile_ic), output channels in vector lanes (tile_oc)."""
    oh, ow = conv_out_size(H, K, stride, pad, "conv2d"), conv_out_size(W, K, stride, pad, "conv2d")
    cfg.define_split("tile_ic", C, num_outputs=2, filter=lambda e: e.size[-1] <= 64)
    _define_tiles(cfg, O, oh, ow, "tile_oc")
    cfg.define_reorder("reorder_reduce", [0, 1, 2], policy="all")  # order of (ic outer, kh, kw)
    op = conv2d_nchwc(N, C, H, W, O, K, stride, pad, cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1], dtype)
    return _schedule(cfg, op, "tile_oc", list(cfg["reorder_reduce"].perm)), op


@template("conv2d_nchw_spatial_pack")
def conv2d_spatial_pack_template(cfg, N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1,
                                 pad: int = 0, dtype: str = "float32"):
    """Spatial-pack conv2d: NCHW input read in place, output channels in vector lanes (tile_oc)."""
    oh, ow = conv_out_size(H, K, stride, pad, "conv2d"), conv_out_size(W, K, stride, pad, "conv2d")
    _define_tiles(cfg, O, oh, ow, "tile_oc")
    cfg.define_split("tile_rc", C, num_outputs=2)
    cfg.define_reorder("reorder_reduce", [0, 1, 2], policy="all")  # order of (rc inner, kh, kw)
    op = conv2d_spatial_pack(N, C, H, W, O, K, stride, pad, cfg["tile_oc"].size[-1], dtype)
    s = _schedule(cfg, op, "tile_oc", None)
    conv = s[op.part(Part.ACCUMULATOR)]
    rc, kh, kw = conv.reduce_axis
    rco, rci = cfg["tile_rc"].apply(conv, rc)
    inner = cfg["reorder_reduce"].apply(conv, [rci, kh, kw])
    _, _, _, cx, cb = conv.axis
    conv.reorder(rco, *inner, cx, cb)
    return s, op


@template("conv2d_nchwc_packed")
def conv2d_nchwc_packed_template(cfg, N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1,
                                 pad: int = 0, dtype: str = "float32", declare=None):
    """Conv2d on NCHW16c tensors (layout transforms outside the kernel, as inside a network).

    The register tile is ``tile_ow`` columns x ``tile_oc`` vectors of 16 output channels, accumulated
    in a local buffer over (input-channel block, kh, kw) in the order ``reorder_reduce`` and the
    16 channels of each input block, then written back once. ``declare``, called like
    ``ops.conv2d_nchwc_packed`` (with the blocks), makes the operator to schedule instead: one with the same
    axes and parts plus an elementwise epilogue (a network's fused convolution), inlined into the output.
    """
    oh, ow = conv_out_size(H, K, stride, pad, "conv2d"), conv_out_size(W, K, stride, pad, "conv2d")
    icb, ocb = packed_blocks(C, O, LANES)
    op = (declare or conv2d_nchwc_packed)(N, C, H, W, O, K, stride, pad, icb, ocb, dtype)
    vectors = -(-ocb // LANES)
    cfg.define_split("tile_oc", O // ocb, num_outputs=2, filter=lambda e: e.size[-1] * vectors <= 4)
    cfg.define_split("tile_oh", oh, num_outputs=2)
    cfg.define_split("tile_ow", ow, num_outputs=3, filter=lambda e: e.size[-1] <= 32)
    cfg.define_reorder("reorder_outer", [0, 1, 2], policy="all")
    cfg.define_reorder("reorder_reduce", [0, 1, 2], policy="all")  # order of (ic block, kh, kw)
    cfg.define_knob("parallel", ["fuse1", "fuse2"])
    cfg.define_knob("unroll_kw", [True, False])
    cfg.add_filter(lambda c: c["tile_ow"].size[-1] * c["tile_oc"].size[-1] * vectors <= MAX_ACC_REGS)

    s = create_schedule(op.output)
    out, acc = s[op.output], s[local_accumulator(s, op)]
    parallel_input_transform(s, op)
    n, oc, y, x, ob = out.axis
    oco, oci = cfg["tile_oc"].apply(out, oc)
    xm, _ = _tile_output(cfg, out, n, oco, oci, y, x, ob)
    out.vectorize(ob)
    acc.compute_at(out, xm)
    _, coc, _, cx, cb = acc.axis
    ico, kh, kw, ici = acc.reduce_axis
    acc.reorder(*cfg["reorder_reduce"].apply(acc, [ico, kh, kw]), ici, coc, cx, cb)
    if cfg["unroll_kw"]:
        acc.unroll(kw)
    acc.unroll(coc)
    acc.unroll(cx)
    acc.vectorize(cb)
    return s, op


@template("depthwise_conv2d_nchwc")
def depthwise_conv2d_template(cfg, N: int, C: int, H: int, W: int, K: int, stride: int = 1, pad: int = 0,
                              dtype: str = "float32"):
    """Depthwise conv2d with channels blocked into vector lanes (tile_c)."""
    oh, ow = conv_out_size(H, K, stride, pad, "depthwise_conv2d"), conv_out_size(W, K, stride, pad, "depthwise_conv2d")
    _define_tiles(cfg, C, oh, ow, "tile_c")
    cfg.define_reorder("reorder_reduce", [0, 1], policy="all")  # order of (kh, kw)
    op = depthwise_conv2d_nchwc(N, C, H, W, K, stride, pad, cfg["tile_c"].size[-1], dtype)
    return _schedule(cfg, op, "tile_c", list(cfg["reorder_reduce"].perm)), op

"""Convolution templates for CPUs with pre-packed weights: NCHW input and output, or (the packed
view, ``conv2d_nchwc_packed``) the NCHW[x]c layout a compiled network keeps between layers, with
blocks of one vector of the target (NCHW16c on AVX-512, NCHW8c on AVX2, NCHW4c on NEON) or, a knob of the
packed template, two.

Each accumulates a register tile of ``tile_ow[-1]`` output columns x the output channels of one
channel block (vectors of the target's lanes), computed at a tile loop of the output and written
back there. Its accumulators plus the operand vectors of one step must fit the target's vector
registers; the space holds no other tile. The column tile need not divide the output width: the
convolution is then accumulated over the width padded to whole tiles (see ``ops.conv_packed``).
The knobs choose the channel blocks, the row/column tiling, the order of outer and reduction
loops, unrolling and the parallel loops.
"""
from __future__ import annotations

import math

from ...ops import (Operator, Part, conv2d_nchwc, conv2d_nchwc_packed, conv2d_spatial_pack, depthwise_conv2d_nchwc,
                    group_block_choices, grouped_blocks, packed_blocks)
from ...ops.conv import conv_out_size
from ...ops.conv_packed import MAX_BLOCK_VECTORS
from ...ops.schedule_helpers import local_accumulator, parallel_input_transform
from ...schedule import Axis, Schedule, StageHandle, create_schedule
from ...target import CACHE_LINE, Target
from ..space import SplitEntity
from ..task import template
from ..workload import Conv2d, DepthwiseConv2d


#: the most vectors of output channels a register tile of the packed template holds: more than the widest block, so
#: that a layer whose channels divide into 5 or 6 vectors only (a 1000-class classifier: 125 vectors of 8) can hold
#: several independent accumulators
MAX_TILE_VECTORS = 6


def _vectors(channels: int, lanes: int) -> int:
    return -(-channels // lanes)


def fits_registers(target: Target, columns: int, vectors: int) -> bool:
    """Whether ``columns`` x ``vectors`` accumulators fit the target's vector registers next to the operands
    of one step (``Target.max_accumulators``)."""
    return columns * vectors <= target.max_accumulators(vectors)


def _define_column_tiles(cfg, ow: int) -> None:
    """``tile_ow``: (outer, middle, register tile) columns; register tiles up to the accumulator limit."""
    cfg.define_split("tile_ow", ow, num_outputs=3, policy="tiles",
                     inner=range(1, cfg.target.max_accumulators(1) + 1))


def _define_tiles(cfg, channels: int, oh: int, ow: int, block_name: str, dtype: str) -> None:
    target, lanes = cfg.target, cfg.target.lanes(dtype)

    def channel_block(e: SplitEntity) -> bool:  # whole or half vectors (a few), or all channels when few
        return e.size[-1] <= MAX_BLOCK_VECTORS * lanes and (e.size[-1] % max(1, lanes // 2) == 0 or e.size[0] == 1)

    cfg.define_split(block_name, channels, num_outputs=2, filter=channel_block)
    cfg.define_split("tile_oh", oh, num_outputs=2)
    _define_column_tiles(cfg, ow)
    cfg.define_reorder("reorder_outer", [0, 1, 2], policy="all")
    cfg.define_knob("parallel", ["fuse1", "fuse2"])
    cfg.define_knob("unroll_kw", [True, False])
    cfg.define_knob("vectorize_unpack", [True, False])
    cfg.define_knob("unroll_unpack", [False, True])
    cfg.add_filter(lambda c: fits_registers(target, c["tile_ow"].size[-1], _vectors(c[block_name].size[-1], lanes)))


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
    """Shared schedule of the channel-blocked convolutions with NCHW output (see the module docstring)."""
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


def _out_size(H: int, W: int, K: int, stride: int, pad: int, what: str) -> tuple[int, int]:
    return conv_out_size(H, K, stride, pad, what), conv_out_size(W, K, stride, pad, what)


@template("conv2d_nchwc", workload=Conv2d, layout="NCHW")
def conv2d_nchwc_template(cfg, N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1, pad: int = 0,
                          dtype: str = "float32"):
    """NCHW[x]c conv2d: input channels blocked (tile_ic), output channels in vector lanes (tile_oc)."""
    oh, ow = _out_size(H, W, K, stride, pad, "conv2d")
    cfg.define_split("tile_ic", C, num_outputs=2, filter=lambda e: e.size[-1] <= 64)
    _define_tiles(cfg, O, oh, ow, "tile_oc", dtype)
    cfg.define_reorder("reorder_reduce", [0, 1, 2], policy="all")  # order of (ic outer, kh, kw)
    op = conv2d_nchwc(N, C, H, W, O, K, stride, pad, cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1], dtype,
                      ow_tile=cfg["tile_ow"].size[-1])
    return _schedule(cfg, op, "tile_oc", list(cfg["reorder_reduce"].perm)), op


@template("conv2d_nchw_spatial_pack", workload=Conv2d, layout="NCHW", default=True)
def conv2d_spatial_pack_template(cfg, N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1,
                                 pad: int = 0, dtype: str = "float32"):
    """Spatial-pack conv2d: NCHW input read in place, output channels in vector lanes (tile_oc)."""
    oh, ow = _out_size(H, W, K, stride, pad, "conv2d")
    _define_tiles(cfg, O, oh, ow, "tile_oc", dtype)
    cfg.define_split("tile_rc", C, num_outputs=2)
    cfg.define_reorder("reorder_reduce", [0, 1, 2], policy="all")  # order of (rc inner, kh, kw)
    op = conv2d_spatial_pack(N, C, H, W, O, K, stride, pad, cfg["tile_oc"].size[-1], dtype,
                             ow_tile=cfg["tile_ow"].size[-1])
    s = _schedule(cfg, op, "tile_oc", None)
    conv = s[op.part(Part.ACCUMULATOR)]
    rc, kh, kw = conv.reduce_axis
    rco, rci = cfg["tile_rc"].apply(conv, rc)
    inner = cfg["reorder_reduce"].apply(conv, [rci, kh, kw])
    _, _, _, cx, cb = conv.axis
    conv.reorder(rco, *inner, cx, cb)
    return s, op


def packed_config_blocks(config, wl, lanes: int) -> tuple[int, int]:
    """The (input, output) channel blocks of a ``conv2d_nchwc_packed`` config (records written before the block
    knobs: the default blocks)."""
    icb, ocb = packed_blocks(wl.C, wl.O, lanes)
    return config.get("block_in", icb), config.get("block_out", ocb)


def outer_parallel_kind(config) -> tuple:
    """How a ``conv2d_nchwc_packed`` config shares work among threads: the outer loop run in parallel (the first of
    ``reorder_outer``: output-channel tiles, rows or columns) and how many are fused (``parallel``)."""
    order = config.get("reorder_outer")
    return (order[0], config.get("parallel")) if order else ()


@template("conv2d_nchwc_packed", workload=Conv2d, layout="NCHWc", network=True, channel_blocks=packed_config_blocks,
          config_kind=outer_parallel_kind)
def conv2d_nchwc_packed_template(cfg, N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1,
                                 pad: int = 0, dtype: str = "float32", groups: int = 1, declare=None):
    """Conv2d on NCHW[x]c tensors (layout transforms outside the kernel, as inside a network), in ``groups`` groups.

    The register tile is ``tile_ow`` columns x ``tile_oc`` vectors of output channels (counted in the default blocks:
    one vector, or all channels when they do not divide into vectors), accumulated in a local buffer over (input-channel
    block, kh, kw) in the order ``reorder_reduce`` and the channels of each input block, then written back once.
    ``block_in`` and ``block_out`` are the channel blocks of the input and output layouts (one vector or two,
    ``ops.block_choices``; in groups, those a group's channels hold whole, ``ops.group_block_choices``): a network
    plans its layout per layer from them (``network.layouts``). ``declare``, called like ``ops.conv2d_nchwc_packed``
    with keywords (the blocks ``icb`` and ``ocb``, ``ow_tile`` and ``groups``), makes the operator to schedule
    instead: one with the same axes and parts plus an elementwise epilogue (a network's fused convolution), inlined
    into the output.
    """
    target = cfg.target
    lanes = target.lanes(dtype)
    oh, ow = _out_size(H, W, K, stride, pad, "conv2d")
    base_icb, base_ocb = grouped_blocks(C, O, groups, lanes)
    vectors = _vectors(base_ocb, lanes)
    cfg.define_split("tile_oc", O // base_ocb, num_outputs=2,
                     filter=lambda e: e.size[-1] * vectors <= MAX_TILE_VECTORS)
    cfg.define_split("tile_oh", oh, num_outputs=2)
    _define_column_tiles(cfg, ow)
    cfg.define_reorder("reorder_outer", [0, 1, 2], policy="all")
    cfg.define_reorder("reorder_reduce", [0, 1, 2], policy="all")  # order of (ic block, kh, kw)
    cfg.define_knob("parallel", ["fuse1", "fuse2"])
    cfg.define_knob("unroll_kw", [True, False])
    cfg.define_knob("block_in", group_block_choices(C, groups, lanes), legacy=base_icb)
    cfg.define_knob("block_out", group_block_choices(O, groups, lanes), legacy=base_ocb)
    cfg.add_filter(lambda c: fits_registers(target, c["tile_ow"].size[-1], c["tile_oc"].size[-1] * vectors))
    cfg.add_filter(lambda c: c["tile_oc"].size[-1] % (c["block_out"] // base_ocb) == 0)  # whole output blocks

    icb, ocb = cfg["block_in"], cfg["block_out"]
    op = (declare or conv2d_nchwc_packed)(N=N, C=C, H=H, W=W, O=O, K=K, stride=stride, pad=pad, icb=icb, ocb=ocb,
                                          dtype=dtype, ow_tile=cfg["tile_ow"].size[-1], groups=groups)
    s = create_schedule(op.output)
    out, acc = s[op.output], s[local_accumulator(s, op)]
    parallel_input_transform(s, op)
    n, oc, y, x, ob = out.axis
    oco, oci = out.split(oc, max(1, cfg["tile_oc"].size[-1] // (ocb // base_ocb)))
    xm, _ = _tile_output(cfg, out, n, oco, oci, y, x, ob)
    out.vectorize(ob)
    acc.compute_at(out, xm)
    _, coc, _, cx, cb = acc.axis
    ico, kh, kw, ici = acc.reduce_axis
    # columns outside channel vectors: one broadcast input value serves every vector of its column
    acc.reorder(*cfg["reorder_reduce"].apply(acc, [ico, kh, kw]), ici, cx, coc, cb)
    _prefetch_weights(out, acc, oco, xm, ico, op.inputs[1], N)
    if cfg["unroll_kw"]:
        acc.unroll(kw)
    acc.unroll(coc)
    acc.unroll(cx)
    acc.vectorize(cb)
    return s, op


#: a block's weights are prefetched only when the block's arithmetic can hide them: at most this many cache lines
#: per iteration of the input-channel loop
MAX_PREFETCH_LINES = 4


def _prefetch_weights(out: StageHandle, acc: StageHandle, oco: Axis, xm: Axis, ico: Axis, weights, batch: int) -> None:
    """Fetch the next block of output channels' weights while this block's tiles compute, a share at each step of
    the input-channel loop. Inside a network the weights come from memory (the model's do not stay in the cache),
    and a block's first tile would wait for them. Only where the block's loop is the outermost (no loop around
    it reads the weights again, so they would be in the cache anyway) and its arithmetic per line is enough."""
    holder = out.loop_of(oco)
    names, extents = [a.name for a in out.leaf_axes], [a.extent for a in out.leaf_axes]
    first, tile = names.index(holder.name), names.index(xm.name)
    if math.prod(extents[:first]) != 1 or holder.extent != batch * oco.extent:
        return
    shares = math.prod(extents[first + 1:tile + 1]) * ico.extent  # steps of the input-channel loop per block
    lines = -(-math.prod(weights.shape) * weights.dtype.bytes // oco.extent // CACHE_LINE)
    if lines <= MAX_PREFETCH_LINES * shares:
        acc.prefetch(weights, holder, ico)


@template("depthwise_conv2d_nchwc", workload=DepthwiseConv2d, layout="NCHW", default=True)
def depthwise_conv2d_template(cfg, N: int, C: int, H: int, W: int, K: int, stride: int = 1, pad: int = 0,
                              dtype: str = "float32"):
    """Depthwise conv2d with channels blocked into vector lanes (tile_c)."""
    oh, ow = _out_size(H, W, K, stride, pad, "depthwise_conv2d")
    _define_tiles(cfg, C, oh, ow, "tile_c", dtype)
    cfg.define_reorder("reorder_reduce", [0, 1], policy="all")  # order of (kh, kw)
    op = depthwise_conv2d_nchwc(N, C, H, W, K, stride, pad, cfg["tile_c"].size[-1], dtype,
                                ow_tile=cfg["tile_ow"].size[-1])
    return _schedule(cfg, op, "tile_c", list(cfg["reorder_reduce"].perm)), op

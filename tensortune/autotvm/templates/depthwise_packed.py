"""Depthwise convolution on NCHW[x]c tensors (blocked in and out, as inside a compiled network): the template the
network's depthwise tasks tune.

The register tile is ``tile_oh`` x ``tile_ow`` outputs of one channel block (a vector of the target), accumulated
over (kh, kw) and written once; the batch and channel blocks (and the row tiles, with ``parallel="fuse3"``) run
in parallel, or (``parallel="rows"``) the row tiles, then the channel blocks: each thread then reads and writes a
band of rows of every channel, the part of its input a previous layer splitting its rows among the same threads
left in this core's cache. The channel block (``block``: one vector of the target or two, ``ops.block_choices``) is the layout of
the input and output, which a network plans per layer.
"""
from __future__ import annotations

from ...dtype import DType
from ...ops import block_choices, packed_blocks
from ...ops.conv import conv_out_size
from ...ops.depthwise_packed import depthwise_conv2d_nchwc_packed
from ...ops.schedule_helpers import local_accumulator, parallel_input_transform
from ...schedule import create_schedule
from ..task import template
from ..workload import DepthwiseConv2d

#: register-tile outputs at most (each a vector accumulator)
MAX_TILE = 16


def depthwise_config_blocks(config, wl, lanes: int) -> tuple[int, int]:
    """The channel block of a config, for its input and output (``block``; the default for older records)."""
    b = config.get("block", packed_blocks(wl.C, wl.C, lanes)[0])
    return b, b


def _config_kind(config) -> tuple:
    """How a config shares work among threads: how many outer loops are fused into the parallel one."""
    return (config["parallel"],) if "parallel" in config else ()


@template("depthwise_conv2d_nchwc_packed", workload=DepthwiseConv2d, layout="NCHWc", network=True,
          channel_blocks=depthwise_config_blocks, config_kind=_config_kind)
def depthwise_conv2d_nchwc_packed_template(cfg, N: int, C: int, H: int, W: int, K: int, stride: int = 1, pad: int = 0,
                                           dtype: str = "float32", declare=None):
    """Depthwise conv2d on NCHW[x]c tensors: a rows x columns register tile per channel block. ``declare``, called
    like ``ops.depthwise_conv2d_nchwc_packed`` with keywords (the block ``cb``), makes the operator to schedule
    instead: one with the same axes and parts plus an elementwise epilogue (a network's fused depthwise
    convolution)."""
    name = "depthwise_conv2d"
    oh, ow = conv_out_size(H, K, stride, pad, name), conv_out_size(W, K, stride, pad, name)
    lanes = max(1, cfg.target.lanes(DType.of(dtype)))
    cfg.define_split("tile_oh", oh, num_outputs=2, filter=lambda e: e.size[-1] <= 4)
    cfg.define_split("tile_ow", ow, num_outputs=2, filter=lambda e: e.size[-1] <= MAX_TILE)
    cfg.define_knob("parallel", ["fuse2", "fuse3", "rows"])
    cfg.define_knob("unroll_kw", [True, False])
    cfg.define_knob("block", block_choices(C, lanes), legacy=packed_blocks(C, C, lanes)[0])
    cfg.add_filter(lambda c: c["tile_oh"].size[-1] * c["tile_ow"].size[-1] <= MAX_TILE)
    op = (declare or depthwise_conv2d_nchwc_packed)(N=N, C=C, H=H, W=W, K=K, stride=stride, pad=pad, cb=cfg["block"],
                                                    dtype=dtype)

    s = create_schedule(op.output)
    out, acc = s[op.output], s[local_accumulator(s, op)]
    parallel_input_transform(s, op)
    n, c, y, x, b = out.axis
    yo, yi = cfg["tile_oh"].apply(out, y)
    xo, xi = cfg["tile_ow"].apply(out, x)
    if cfg["parallel"] == "rows":
        out.reorder(n, yo, c, xo, yi, xi, b)
        fused = out.fuse(out.fuse(n, yo), c)
    else:
        out.reorder(n, c, yo, xo, yi, xi, b)
        fused = out.fuse(n, c)
        if cfg["parallel"] == "fuse3":
            fused = out.fuse(fused, yo)
    out.parallel(fused)
    out.vectorize(b)
    acc.compute_at(out, xo)
    _, _, cy, cx, cv = acc.axis
    kh, kw = acc.reduce_axis
    acc.reorder(kh, kw, cy, cx, cv)
    for axis in ((kw,) if cfg["unroll_kw"] else ()) + (cy, cx):  # the register tile, and kw when the knob says so
        acc.unroll(axis)
    acc.vectorize(cv)
    return s, op

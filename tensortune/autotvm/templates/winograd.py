"""The Winograd convolution templates, beside the direct ones: 3x3, stride-1 convolutions on NCHW[x]c tensors
(``ops.conv2d_winograd_nchwc``), so that a network's tuner can measure both on each such layer and keep
the faster, and on NCHW tensors (``conv2d_winograd_nchw``: ``ops.conv2d_winograd_nchw``), beside the direct
templates that take NCHW, for a user's single convolution.

Knobs, after AutoTVM's CPU Winograd templates: the output tile size m (``tile_size``: F(2x2, 3x3),
F(4x4, 3x3) or F(6x6, 3x3)), the register tile of the batched product (``tile_p`` tiles x
``tile_oc`` output-channel blocks of one vector, whose accumulators must fit the target's vector
registers), the order of the product's outer loops (positions, tile blocks, channel blocks; the first
runs in parallel), the unrolling of the product's input-channel loop and of the transforms' column
loops, and the parallel loops of the output transform. The transforms' row loops are always
unrolled: that is what folds their constants.
"""
from __future__ import annotations

from ...ops import packed_blocks
from ...ops.conv_packed import MAX_BLOCK_VECTORS
from ...ops.winograd import (ProductLoop, WinogradPlan, check_winograd_shape, conv2d_winograd_nchw,
                             conv2d_winograd_nchwc, schedule_winograd, winograd_tiles)
from ..task import template
from ..workload import Conv2d
from .conv2d import fits_registers

#: output tile sizes m the template chooses from
TILE_SIZES = (2, 4, 6)
#: the outer loops of the product, in the order ``reorder_product`` permutes
PRODUCT_LOOPS = (ProductLoop.POSITION, ProductLoop.TILES, ProductLoop.CHANNELS)


@template("conv2d_winograd_nchwc_packed", workload=Conv2d, layout="NCHWc", network=True,
          applies=lambda wl: (wl.K, wl.stride) == (3, 1),
          channel_blocks=lambda config, wl, lanes: packed_blocks(wl.C, wl.O, lanes),
          config_kind=lambda config: (config["reorder_product"][0], config.get("tile_size"))
          if config.get("reorder_product") else ())
def conv2d_winograd_template(cfg, N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1, pad: int = 0,
                             dtype: str = "float32", declare=None):
    """Winograd conv2d on NCHW[x]c tensors (3x3, stride 1): tile size, register tile and loops of the product.

    ``declare``, called like ``ops.conv2d_winograd_nchwc`` with keywords (the tile size ``tile``, the blocks ``icb`` and
    ``ocb``, ``p_tile`` and ``target``), makes the operator to schedule instead: one with the same stages plus an
    elementwise epilogue (a network's fused convolution), inlined into the output transform.
    """
    return _winograd(cfg, N, C, H, W, O, K, stride, pad, dtype, declare or conv2d_winograd_nchwc)


@template("conv2d_winograd_nchw", workload=Conv2d, layout="NCHW", applies=lambda wl: (wl.K, wl.stride) == (3, 1))
def conv2d_winograd_nchw_template(cfg, N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1,
                                  pad: int = 0, dtype: str = "float32"):
    """Winograd conv2d with NCHW input and output (3x3, stride 1; ``ops.conv2d_winograd_nchw``): the knobs of
    ``conv2d_winograd_nchwc_packed``, the channel blocks inside the kernel one vector each."""
    return _winograd(cfg, N, C, H, W, O, K, stride, pad, dtype, conv2d_winograd_nchw)


def _winograd(cfg, N: int, C: int, H: int, W: int, O: int, K: int, stride: int, pad: int, dtype: str, declare):
    """Define the knobs (module docstring), then declare the operator with ``declare`` and schedule it."""
    check_winograd_shape(K, stride)
    target = cfg.target
    lanes = target.lanes(dtype)
    icb, ocb = packed_blocks(C, O, lanes)
    vectors = -(-ocb // lanes)
    tiles = {m: N * rows * cols for m in TILE_SIZES for *_, rows, cols in [winograd_tiles(H, W, pad, m)]}
    cfg.define_knob("tile_size", list(TILE_SIZES))
    cfg.define_knob("tile_p", list(range(1, target.max_accumulators(vectors) // vectors + 1)))
    cfg.define_split("tile_oc", O // ocb, num_outputs=2, filter=lambda e: e.size[-1] * vectors <= MAX_BLOCK_VECTORS)
    cfg.define_reorder("reorder_product", list(PRODUCT_LOOPS), policy="all")
    cfg.define_knob("unroll_channels", [False, True])
    cfg.define_knob("unroll_transforms", [False, True])
    cfg.define_knob("parallel_output_rows", [False, True])
    cfg.add_filter(lambda c: c["tile_p"] <= tiles[c["tile_size"]]
                   and fits_registers(target, c["tile_p"], c["tile_oc"].size[-1] * vectors))

    plan = WinogradPlan(p_tile=cfg["tile_p"], oc_vectors=cfg["tile_oc"].size[-1],
                        order=tuple(PRODUCT_LOOPS[i] for i in cfg["reorder_product"].perm),
                        unroll_channels=cfg["unroll_channels"], unroll_transforms=cfg["unroll_transforms"],
                        parallel_output_rows=cfg["parallel_output_rows"])
    op = declare(N=N, C=C, H=H, W=W, O=O, K=K, stride=stride, pad=pad, tile=cfg["tile_size"], icb=icb, ocb=ocb,
                 dtype=dtype, p_tile=cfg["tile_p"], target=target)
    return schedule_winograd(op, plan), op

"""Matmul / dense template for CPUs: packed B panels, a register block, K tiling, parallel tiles.

The register block is ``tile_y[-1]`` rows x ``tile_x[-1]`` columns (the panel width, whole vectors of
the target). Its accumulators must fit the target's vector registers next to the operands of one step
(``Target.max_accumulators``); the space holds no other block. Block sizes need not divide M or N: the product is then
accumulated over the matrix padded to whole blocks and cropped (see ``ops.matmul``).
"""
from __future__ import annotations

from ...ops import Part, matmul
from ...ops.schedule_helpers import local_accumulator
from ...schedule import create_schedule
from ..task import template
from ..workload import Matmul

MAX_PANEL_VECTORS = 4  # widest panel, in vector registers


def register_block(cfg, lanes: int) -> tuple[int, int]:
    """(accumulator registers, operand registers) of the config's register block."""
    vectors = -(-cfg["tile_x"].size[-1] // lanes)
    return cfg["tile_y"].size[-1] * vectors, vectors


@template("matmul", workload=Matmul, default=True)
def matmul_template(cfg, M: int, N: int, K: int, dtype: str = "float32", bias: bool = False, relu: bool = False,
                    transpose_b: bool = False):
    """C = A @ B (+bias, ReLU): rows x panel-width register blocks over packed panels of B."""
    target = cfg.target
    lanes = target.lanes(dtype)
    widest = MAX_PANEL_VECTORS * lanes  # panels: whole vectors (padded), or any divisor of N up to that width
    panels = sorted({lanes * v for v in range(1, MAX_PANEL_VECTORS + 1)} | {d for d in range(1, widest + 1)
                                                                            if N % d == 0})
    cfg.define_split("tile_y", M, num_outputs=3, policy="tiles", inner=range(1, target.max_accumulators(1) + 1))
    cfg.define_split("tile_x", N, num_outputs=3, policy="tiles", inner=panels)
    cfg.define_split("tile_k", K, num_outputs=2)
    cfg.define_reorder("order", [0, 1], policy="all")  # yt/xt order inside a parallel chunk
    cfg.define_knob("unroll_k", [1, 2, 4])
    cfg.define_knob("parallel", ["outer", "outer_fused", "none"])
    cfg.add_filter(lambda c: _fits(c, target, lanes))
    bm, bn = cfg["tile_y"].size[-1], cfg["tile_x"].size[-1]
    op = matmul(M, N, K, dtype, bias, relu, transpose_b, target=target, panel=bn, row_tile=bm)
    s = create_schedule(op.output)
    out, pack = op.output, op.part(Part.PACKED_WEIGHT)
    acc = local_accumulator(s, op)
    y, x = s[out].axis
    yo, yt, yi = cfg["tile_y"].apply(s[out], y)
    xo, xt, xi = cfg["tile_x"].apply(s[out], x)
    inner = cfg["order"].apply(s[out], [yt, xt])
    s[out].reorder(yo, xo, *inner, yi, xi)
    par = cfg["parallel"]
    if par == "outer_fused":
        s[out].parallel(s[out].fuse(yo, xo))
    elif par == "outer":
        s[out].parallel(yo)
    s[out].vectorize(xi)
    s[acc].compute_at(s[out], inner[-1])
    ai, aj = s[acc].axis
    (k,) = s[acc].reduce_axis
    ko, ki = cfg["tile_k"].apply(s[acc], k)
    kii_f = cfg["unroll_k"]
    if kii_f > 1 and cfg["tile_k"].size[-1] % kii_f == 0:
        ki, kii = s[acc].split(ki, kii_f)
        s[acc].reorder(ko, ki, kii, ai, aj)
        s[acc].unroll(kii)
    else:
        s[acc].reorder(ko, ki, ai, aj)
    s[acc].unroll(ai)
    s[acc].vectorize(aj)
    no, _, ni = s[pack].axis
    if par != "none":
        s[pack].parallel(no)
    s[pack].vectorize(ni)
    return s, op


def _fits(cfg, target, lanes: int) -> bool:
    accumulators, operands = register_block(cfg, lanes)
    return accumulators <= target.max_accumulators(operands)

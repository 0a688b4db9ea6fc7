"""Schedule templates for NVIDIA GPUs (``cuda -arch=...`` targets), after AutoTVM's CUDA templates.

Each output tile of a thread block is accumulated in registers (a ``local`` cache of the output), one
register tile per thread; the operands of one step of the reduction are staged in shared memory, filled
cooperatively by the block's threads with vector loads where the rows allow, and read by the unrolled
products of each thread's register tile (nvcc keeps each value read once in a register: the loads are not
repeated across the tile). Lowering places the barriers.

The knobs split the output axes into (blocks, threads, per-thread tile) and the reduction axes into
(staged, inner) parts, and choose the fill's vector width and the unrolling. Filters keep configs whose
blocks have 32 to 1024 threads, whose staged tiles fit the target's shared memory
(``target.gpu.shared_memory_per_block``) and whose register tiles fit ``MAX_ACCUMULATORS``.
"""
from __future__ import annotations

from ...ops import Operator, Part, conv2d_nchw, depthwise_conv2d_nchw, matmul_nn
from ...ops.conv import conv_out_size
from ...schedule import Axis, Schedule, StageHandle, create_schedule
from ...te import Tensor
from ..space import SplitEntity
from ...target import TargetKind
from ..task import template
from ..workload import Conv2d, DepthwiseConv2d, Matmul

MAX_ACCUMULATORS = 64  # floats of one thread's register tile (of 255 registers a thread may have)
MAX_THREADS_PER_AXIS = 32  # threads per block along one output axis
MAX_TILE_PER_AXIS = 8  # a thread's register tile along one output axis
MIN_THREADS = 32  # one warp


def _thread_split(e: SplitEntity) -> bool:
    """(blocks, threads, per-thread) splits with at most MAX_THREADS_PER_AXIS threads and MAX_TILE_PER_AXIS
    elements per thread."""
    return e.size[-2] <= MAX_THREADS_PER_AXIS and e.size[-1] <= MAX_TILE_PER_AXIS


def _define_output_split(cfg, name: str, extent: int) -> None:
    cfg.define_split(name, extent, num_outputs=3, filter=_thread_split)


def cooperative_fetch(stage: StageHandle, threads: list[tuple[Axis | None, int, str]], vector: int) -> None:
    """Spread the loops of a shared-memory fill over the block's threads: the innermost axis split into
    ``vector``-wide pieces (vectorized, when it divides), the rest fused and split over the thread indices
    ``threads`` (``(_, count, "threadIdx.x")``, innermost first), consecutive threads on consecutive pieces."""
    axes = list(stage.axis)
    last = axes[-1]
    vec = None
    if vector > 1 and last.extent % vector == 0 and last.extent > vector:
        last, vec = stage.split(last, vector)
    fused = stage.fuse(*axes[:-1], last) if len(axes) > 1 else last
    for _, count, index in threads:
        if count <= 1:
            continue
        fused, inner = stage.split(fused, count)
        stage.bind(inner, index)
    if vec is not None:
        stage.vectorize(vec)


def _shared_bytes(*tiles: int) -> int:
    return 4 * sum(tiles)


# ---------------------------------------------------------------------------------------------- matmul

@template("matmul_cuda", workload=Matmul, targets=(TargetKind.CUDA,), default=True)
def matmul_cuda_template(cfg, M: int, N: int, K: int, dtype: str = "float32"):
    """C = A @ B on a GPU: block tiles of C, per-thread register tiles, A and B tiles staged in shared memory."""
    limit = cfg.target.gpu.shared_memory_per_block
    _define_output_split(cfg, "tile_y", M)
    _define_output_split(cfg, "tile_x", N)
    cfg.define_split("tile_k", K, num_outputs=2, filter=lambda e: e.size[-1] <= 64)
    cfg.define_knob("vector", [1, 2, 4])
    cfg.define_knob("unroll_k", [False, True])

    def fits(c) -> bool:
        by, ty, yi = c["tile_y"].size
        bx, tx, xi = c["tile_x"].size
        bk = c["tile_k"].size[-1]
        threads = ty * tx
        return (MIN_THREADS <= threads <= 1024 and yi * xi <= MAX_ACCUMULATORS
                and _shared_bytes(ty * yi * bk, bk * tx * xi) <= limit)

    cfg.add_filter(fits)
    op = matmul_nn(M, N, K, dtype)
    s = create_schedule(op.output)
    A, B = op.inputs
    C = op.output
    CL = s.cache_write(C, "local")
    AA = s.cache_read(A, "shared", [CL])
    BB = s.cache_read(B, "shared", [CL])

    y, x = s[C].axis
    by, ty, yi = cfg["tile_y"].apply(s[C], y)
    bx, tx, xi = cfg["tile_x"].apply(s[C], x)
    s[C].reorder(by, bx, ty, tx, yi, xi)
    s[C].bind(by, "blockIdx.y")
    s[C].bind(bx, "blockIdx.x")
    s[C].bind(ty, "threadIdx.y")
    s[C].bind(tx, "threadIdx.x")
    if cfg["tile_x"].size[-1] in (2, 4, 8):
        s[C].vectorize(xi)
    s[CL].compute_at(s[C], tx)

    cy, cx = s[CL].axis
    (k,) = s[CL].reduce_axis
    ko, ki = cfg["tile_k"].apply(s[CL], k)
    s[CL].reorder(ko, ki, cy, cx)
    s[CL].unroll(cy)
    s[CL].unroll(cx)
    if cfg["unroll_k"]:
        s[CL].unroll(ki)
    for stage in (AA, BB):
        s[stage].compute_at(s[CL], ko)
    threads = [(None, cfg["tile_x"].size[1], "threadIdx.x"), (None, cfg["tile_y"].size[1], "threadIdx.y")]
    for stage in (AA, BB):
        cooperative_fetch(s[stage], threads, cfg["vector"])
    return s, op


# ---------------------------------------------------------------------------------------------- convolutions

def _conv_schedule(cfg, op: Operator, depthwise: bool) -> Schedule:
    """Direct NCHW convolution (AutoTVM's ``conv2d_nchw`` CUDA schedule without virtual threads)."""
    s = create_schedule(op.output)
    out = op.output
    for t in op.epilogue:
        s[t].compute_inline()
    acc = op.part(Part.ACCUMULATOR)
    assert acc is out, "GPU convolution templates schedule convolutions without an epilogue"
    data, weight = op.inputs[:2]
    padded: Tensor = op.parts.get(Part.PADDED_INPUT, data)
    OL = s.cache_write(out, "local")
    AA = s.cache_read(padded, "shared", [OL])
    WW = s.cache_read(weight, "shared", [OL])
    if padded is not data:
        s[padded].compute_inline()

    n, f, y, x = s[out].axis
    bf, tf, fi = cfg["tile_f"].apply(s[out], f)
    by, ty, yi = cfg["tile_y"].apply(s[out], y)
    bx, tx, xi = cfg["tile_x"].apply(s[out], x)
    s[out].reorder(n, bf, by, bx, tf, ty, tx, fi, yi, xi)
    s[out].bind(s[out].fuse(n, bf), "blockIdx.z")
    s[out].bind(by, "blockIdx.y")
    s[out].bind(bx, "blockIdx.x")
    s[out].bind(tf, "threadIdx.z")
    s[out].bind(ty, "threadIdx.y")
    s[out].bind(tx, "threadIdx.x")
    s[OL].compute_at(s[out], tx)

    _, of, oy, ox = s[OL].axis
    red = list(s[OL].reduce_axis)
    if depthwise:
        ry, rx = red
        ryo, ryi = cfg["tile_ry"].apply(s[OL], ry)
        rxo, rxi = cfg["tile_rx"].apply(s[OL], rx)
        s[OL].reorder(ryo, rxo, ryi, rxi, of, oy, ox)
        attach = rxo
    else:
        rc, ry, rx = red
        rco, rci = cfg["tile_rc"].apply(s[OL], rc)
        ryo, ryi = cfg["tile_ry"].apply(s[OL], ry)
        rxo, rxi = cfg["tile_rx"].apply(s[OL], rx)
        s[OL].reorder(rco, ryo, rxo, rci, ryi, rxi, of, oy, ox)
        attach = rxo
    s[OL].unroll(of)
    s[OL].unroll(oy)
    s[OL].unroll(ox)
    if cfg["unroll_rx"]:
        s[OL].unroll(rxi)
    s[AA].compute_at(s[OL], attach)
    s[WW].compute_at(s[OL], attach)
    threads = [(None, cfg["tile_x"].size[1], "threadIdx.x"), (None, cfg["tile_y"].size[1], "threadIdx.y"),
               (None, cfg["tile_f"].size[1], "threadIdx.z")]
    for stage in (AA, WW):
        cooperative_fetch(s[stage], threads, cfg["vector"])
    return s


def _conv_filter(cfg, stride: int, K: int, depthwise: bool):
    limit = cfg.target.gpu.shared_memory_per_block

    def fits(c) -> bool:
        _, tf, fi = c["tile_f"].size
        _, ty, yi = c["tile_y"].size
        _, tx, xi = c["tile_x"].size
        threads = tf * ty * tx
        if not (MIN_THREADS <= threads <= 1024 and tf <= 64 and fi * yi * xi <= MAX_ACCUMULATORS):
            return False
        ry, rx = c["tile_ry"].size[-1], c["tile_rx"].size[-1]
        rc = 1 if depthwise else c["tile_rc"].size[-1]
        channels = tf * fi if depthwise else rc
        rows = (ty * yi - 1) * stride + ry
        cols = (tx * xi - 1) * stride + rx
        weights = tf * fi * (1 if depthwise else rc) * ry * rx
        return _shared_bytes(channels * rows * cols, weights) <= limit

    return fits


def _define_conv_knobs(cfg, channels: int, oh: int, ow: int, K: int, C: int | None) -> None:
    _define_output_split(cfg, "tile_f", channels)
    _define_output_split(cfg, "tile_y", oh)
    _define_output_split(cfg, "tile_x", ow)
    if C is not None:
        cfg.define_split("tile_rc", C, num_outputs=2, filter=lambda e: e.size[-1] <= 64)
    cfg.define_split("tile_ry", K, num_outputs=2)
    cfg.define_split("tile_rx", K, num_outputs=2)
    cfg.define_knob("vector", [1, 2, 4])
    cfg.define_knob("unroll_rx", [True, False])


@template("conv2d_nchw_cuda", workload=Conv2d, layout="NCHW", targets=(TargetKind.CUDA,), default=True)
def conv2d_nchw_cuda_template(cfg, N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1, pad: int = 0,
                              dtype: str = "float32"):
    """Direct NCHW conv2d on a GPU: block tiles of (channels, rows, columns), staged input and weight tiles."""
    oh, ow = conv_out_size(H, K, stride, pad, "conv2d"), conv_out_size(W, K, stride, pad, "conv2d")
    _define_conv_knobs(cfg, O, oh, ow, K, C)
    cfg.add_filter(_conv_filter(cfg, stride, K, depthwise=False))
    op = conv2d_nchw(N, C, H, W, O, K, K, stride, pad, dtype)
    return _conv_schedule(cfg, op, depthwise=False), op


@template("depthwise_conv2d_nchw_cuda", workload=DepthwiseConv2d, layout="NCHW", targets=(TargetKind.CUDA,),
          default=True)
def depthwise_conv2d_nchw_cuda_template(cfg, N: int, C: int, H: int, W: int, K: int, stride: int = 1, pad: int = 0,
                                        dtype: str = "float32"):
    """Depthwise NCHW conv2d on a GPU: block tiles of (channels, rows, columns), staged input and weight tiles."""
    oh, ow = conv_out_size(H, K, stride, pad, "depthwise_conv2d"), conv_out_size(W, K, stride, pad,
                                                                                   "depthwise_conv2d")
    _define_conv_knobs(cfg, C, oh, ow, K, None)
    cfg.add_filter(_conv_filter(cfg, stride, K, depthwise=True))
    op = depthwise_conv2d_nchw(N, C, H, W, K, K, stride, pad, dtype)
    return _conv_schedule(cfg, op, depthwise=True), op


__all__ = ["conv2d_nchw_cuda_template", "cooperative_fetch", "depthwise_conv2d_nchw_cuda_template",
           "matmul_cuda_template"]

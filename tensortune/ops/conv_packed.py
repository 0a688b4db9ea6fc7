"""Convolutions computed in channel-blocked layouts.

Most take NCHW input and give NCHW output: inside the kernel the input is zero-padded and repacked
(timed), the convolution accumulates in a ``[N, O/ob, OH, OW, ob]`` layout so that ``ob`` output
channels form vector registers, and the result is unpacked back to NCHW (timed). The weights are
constants of a deployed model, so they are packed once by ``Operator.prepare`` outside the timed
region. ``conv2d_nchwc_packed`` is the convolution as it runs inside a compiled network, whose tensors
stay in NCHW[x]c between layers: its input and output are blocked, and only padding happens in the kernel.

Channel blocks default to one vector of the target (16 float32 channels on AVX-512, 8 on AVX2, 4 on
NEON). ``ow_tile``: the convolution is accumulated over the output width rounded up to a multiple of
it, so that a register tile of that many columns need not divide the width; columns past the end
read the last column's inputs again (valid memory, results thrown away).
"""
from __future__ import annotations

from typing import Callable

from .. import te
from ..errors import ShapeError
from ..target import Target
from ..schedule import Schedule, create_schedule
from ..te import Tensor
from .conv import check_groups, conv_out_size, conv_parts, conv2d_nchw, depthwise_conv2d_nchw
from .operator import Operator, Part
from .pad import pad_nchw, padded_read
from .schedule_helpers import largest_divisor, local_accumulator, parallel_input_transform


def _check_block(total: int, block: int, what: str) -> None:
    if block < 1 or total % block:
        raise ShapeError(f"{what} block {block} must divide {total}")


def _pack_data(data: Tensor, pad: int, cb: int, name: str = "data_pack") -> Tensor:
    """``[N, C/cb, H+2p, W+2p, cb]``: padded input with ``cb`` channels innermost."""
    n, c, h, w = data.shape
    return te.compute((n, c // cb, h + 2 * pad, w + 2 * pad, cb),
                      lambda b, co, y, x, ci: padded_read(data, pad, b, co * cb + ci, y, x), name)


def _unpack(conv, channels: int, ob: int, ow: int, name: str):
    n, _, oh, _, _ = conv.shape
    return te.compute((n, channels, oh, ow), lambda b, o, y, x: conv[b, o // ob, y, x, o % ob], name)


def _padded_width(ow: int, ow_tile: int, name: str) -> tuple[int, Callable]:
    """The accumulated width (``ow`` rounded up to whole tiles) and the column each output column reads."""
    if ow_tile < 1:
        raise ShapeError(f"{name}: ow_tile must be a positive integer, got {ow_tile}")
    owp = -(-ow // ow_tile) * ow_tile
    return owp, ((lambda x: te.minimum(x, ow - 1)) if owp > ow else (lambda x: x))


def _lanes(target: Target | None, dtype: str) -> int:
    return (target or Target.host()).lanes(dtype)


def _register_columns(op: Operator, target: Target, channels: int, width: int) -> int:
    """Output columns of a default register tile of ``channels`` output channels: as many as the target's
    registers hold, dividing ``width``."""
    vectors = -(-channels // max(1, target.lanes(op.output.dtype)))
    return largest_divisor(width, max(1, target.accumulator_budget(vectors) // vectors))


def _schedule_unpacked(op: Operator, target: Target) -> Schedule:
    """Default for blocked convolutions with NCHW output: per (batch, channel block, row) in parallel,
    tiles of columns x one channel block accumulated in registers, then unpacked to NCHW."""
    s = create_schedule(op.output)
    out, conv = s[op.output], s[op.part(Part.ACCUMULATOR)]
    parallel_input_transform(s, op)
    ob = op.part(Part.ACCUMULATOR).shape[-1]
    n, o, y, x = out.axis
    oo, oi = out.split(o, ob)
    xo, xi = out.split(x, _register_columns(op, target, ob, op.output.shape[3]))
    out.reorder(n, oo, y, xo, oi, xi)
    out.parallel(out.fuse(out.fuse(n, oo), y))
    _register_tile(conv, out, xo)
    return s


def _register_tile(acc, out, at) -> None:
    """Accumulate ``acc`` at loop ``at`` of ``out``: the reduction outside, columns unrolled, channels vectors."""
    acc.compute_at(out, at)
    _, _, _, cx, cb = acc.axis
    acc.reorder(*acc.reduce_axis, cx, cb)
    acc.unroll(cx)
    acc.vectorize(cb)


def _schedule_packed(op: Operator, target: Target) -> Schedule:
    """Default for ``conv2d_nchwc_packed``: per (batch, channel block, row) in parallel, tiles of columns x
    one channel block accumulated in registers over (input block, kh, kw, input channel)."""
    s = create_schedule(op.output)
    out, acc = s[op.output], s[local_accumulator(s, op)]
    parallel_input_transform(s, op)
    n, oc, y, x, ob = out.axis
    xo, xi = out.split(x, _register_columns(op, target, ob.extent, x.extent))
    out.reorder(n, oc, y, xo, xi, ob)
    out.parallel(out.fuse(out.fuse(n, oc), y))
    out.vectorize(ob)
    _register_tile(acc, out, xo)
    return s


def conv2d_nchwc(N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1, pad: int = 0, icb: int = 1,
                 ocb: int | None = None, dtype: str = "float32", name: str = "conv2d", ow_tile: int = 1,
                 target: Target | None = None) -> Operator:
    """NCHW[x]c convolution: input channels blocked by ``icb``, output channels by ``ocb`` (default: one
    vector of ``target``).

    Kernel inputs: ``data [N, C, H, W]`` and ``weight_packed [O/ocb, C/icb, K, K, icb, ocb]``.
    """
    ocb = ocb or packed_blocks(C, O, _lanes(target, dtype))[1]
    _check_block(C, icb, f"{name}: input channel")
    _check_block(O, ocb, f"{name}: output channel")
    OH, OW = conv_out_size(H, K, stride, pad, name), conv_out_size(W, K, stride, pad, name)
    data = te.placeholder((N, C, H, W), dtype, "data")
    wp = te.placeholder((O // ocb, C // icb, K, K, icb, ocb), dtype, "weight_packed")
    dp = _pack_data(data, pad, icb)
    ico, ici = te.reduce_axis(C // icb, "ico"), te.reduce_axis(icb, "ici")
    kh, kw = te.reduce_axis(K, "kh"), te.reduce_axis(K, "kw")
    owp, col = _padded_width(OW, ow_tile, name)
    conv = te.compute((N, O // ocb, OH, owp, ocb), lambda n, oc, y, x, ob: te.sum(
        dp[n, ico, y * stride + kh, col(x) * stride + kw, ici] * wp[oc, ico, kh, kw, ici, ob],
        axis=[ico, kh, kw, ici]), "conv")
    out = _unpack(conv, O, ocb, OW, name)
    ref = conv2d_nchw(N, C, H, W, O, K, stride=stride, pad=pad, dtype=dtype).reference

    def prepare(x, w):
        return [x, w.reshape(O // ocb, ocb, C // icb, icb, K, K).transpose(0, 2, 4, 5, 3, 1)]

    return Operator(name, (data, wp), out, 2 * N * O * OH * OW * C * K * K, ref, _schedule_unpacked, prepare,
                    ((N, C, H, W), (O, C, K, K)), parts={Part.PACKED_INPUT: dp, Part.ACCUMULATOR: conv})


MAX_BLOCK_VECTORS = 4  # widest channel block of a register tile, in vector registers


def default_block(channels: int, lanes: int) -> int:
    """The channel block of ``channels`` in the packed layout: one vector of ``lanes`` channels; all channels
    when they do not divide into vectors but fit ``MAX_BLOCK_VECTORS`` of them (the RGB input of a network, 24
    channels on AVX-512); otherwise the divisor of ``channels`` of at most that many vectors whose vectors are the
    fullest (the larger of equals): 40 of a 1000-class classifier's channels on AVX-512 (3 vectors, 83% full)."""
    if channels % lanes == 0:
        return lanes
    if channels <= MAX_BLOCK_VECTORS * lanes:
        return channels
    divisors = [d for d in range(1, MAX_BLOCK_VECTORS * lanes + 1) if channels % d == 0]
    return max(divisors, key=lambda d: (d / (-(-d // lanes) * lanes), d))


def packed_blocks(C: int, O: int, lanes: int) -> tuple[int, int]:
    """The default channel blocks (``default_block``) of a convolution's input and output."""
    return default_block(C, lanes), default_block(O, lanes)


def block_choices(channels: int, lanes: int) -> list[int]:
    """The channel blocks a layer may use in the packed layout, the default first: one vector of ``lanes`` channels,
    or two where they divide the channels (``default_block`` when they do not divide into vectors)."""
    base = default_block(channels, lanes)
    return [base] + ([2 * lanes] if base == lanes and channels % (2 * lanes) == 0 else [])


def group_block_choices(channels: int, groups: int, lanes: int) -> list[int]:
    """The blocks of ``block_choices`` that a group's ``channels / groups`` channels hold whole (a grouped
    convolution's output block reads the input blocks of its own group only), the default first; [] for none."""
    return [b for b in block_choices(channels, lanes) if channels // groups % b == 0]


def grouped_blocks(C: int, O: int, groups: int, lanes: int, name: str = "conv2d") -> tuple[int, int]:
    """The default channel blocks (``packed_blocks``) of a convolution in ``groups`` groups; a ``ShapeError`` when a
    group's channels hold no whole block."""
    check_groups(C, O, groups, name)
    ins, outs = group_block_choices(C, groups, lanes), group_block_choices(O, groups, lanes)
    if not ins or not outs:
        raise ShapeError(f"{name}: groups={groups} of {C // groups} input and {O // groups} output channels hold no "
                         f"whole channel block of the packed layout ({default_block(C, lanes)} input, "
                         f"{default_block(O, lanes)} output channels); give fewer, wider groups (a network runs "
                         "narrow groups so, merged with block-diagonal weights)")
    return ins[0], outs[0]


def _block_nchw(a, cb: int):
    """NCHW array -> ``[N, C/cb, H, W, cb]`` (numpy; for inputs and references)."""
    n, c, h, w = a.shape
    return a.reshape(n, c // cb, cb, h, w).transpose(0, 1, 3, 4, 2)


def conv2d_nchwc_packed(N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1, pad: int = 0,
                        icb: int | None = None, ocb: int | None = None, dtype: str = "float32",
                        name: str = "conv2d", ow_tile: int = 1, target: Target | None = None,
                        groups: int = 1) -> Operator:
    """Convolution on NCHW[x]c tensors: ``data [N, C/icb, H, W, icb]`` in, ``[N, O/ocb, OH, OW, ocb]`` out.

    Blocks default to one vector of ``target`` (``packed_blocks``; in ``groups`` groups, ``grouped_blocks``), and
    in groups must divide each group's channels: output block ``oc`` reads input block ``ico`` of its group. Kernel
    inputs: ``data_packed`` and ``weight_packed [O/ocb, C/groups/icb, K, K, icb, ocb]``; both are made from canonical
    NCHW/OIHW arrays (weights ``[O, C/groups, K, K]``) by ``prepare`` (outside the timed region), and the reference
    is the NCHW result in the same blocked layout.
    """
    check_groups(C, O, groups, name)
    if not icb or not ocb:
        default_icb, default_ocb = grouped_blocks(C, O, groups, _lanes(target, dtype), name)
        icb, ocb = icb or default_icb, ocb or default_ocb
    cg, og = C // groups, O // groups
    _check_block(cg, icb, f"{name}: input channel")
    _check_block(og, ocb, f"{name}: output channel")
    cg_blocks, og_blocks = cg // icb, og // ocb
    OH, OW = conv_out_size(H, K, stride, pad, name), conv_out_size(W, K, stride, pad, name)
    data = te.placeholder((N, C // icb, H, W, icb), dtype, "data_packed")
    wp = te.placeholder((O // ocb, cg_blocks, K, K, icb, ocb), dtype, "weight_packed")
    dp = data if not pad else te.compute((N, C // icb, H + 2 * pad, W + 2 * pad, icb),
                                         lambda b, co, y, x, ci: padded_read(data, pad, b, co, y, x, ci), "data_pad")
    ico, ici = te.reduce_axis(cg_blocks, "ico"), te.reduce_axis(icb, "ici")
    kh, kw = te.reduce_axis(K, "kh"), te.reduce_axis(K, "kw")
    owp, col = _padded_width(OW, ow_tile, name)

    def block(oc):  # the input block of reduction step ``ico`` for output block ``oc``: its group's
        return ico if groups == 1 else oc // og_blocks * cg_blocks + ico

    acc = te.compute((N, O // ocb, OH, owp, ocb), lambda n, oc, y, x, ob: te.sum(
        dp[n, block(oc), y * stride + kh, col(x) * stride + kw, ici] * wp[oc, ico, kh, kw, ici, ob],
        axis=[ico, kh, kw, ici]), name if owp == OW else f"{name}_acc")
    out = acc if owp == OW else te.compute((N, O // ocb, OH, OW, ocb), lambda *i: acc[i], name)
    nchw_ref = conv2d_nchw(N, C, H, W, O, K, stride=stride, pad=pad, dtype=dtype, groups=groups).reference

    def reference(x, w):
        return _block_nchw(nchw_ref(x, w), ocb)

    def prepare(x, w):
        return [_block_nchw(x, icb), w.reshape(O // ocb, ocb, cg_blocks, icb, K, K).transpose(0, 2, 4, 5, 3, 1)]

    return Operator(name, (data, wp), out, 2 * N * O * OH * OW * cg * K * K, reference, _schedule_packed, prepare,
                    ((N, C, H, W), (O, cg, K, K)), parts=conv_parts(data, dp, acc))


def conv2d_spatial_pack(N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1, pad: int = 0,
                        ocb: int | None = None, dtype: str = "float32", name: str = "conv2d", ow_tile: int = 1,
                        target: Target | None = None) -> Operator:
    """Spatial-pack convolution: NCHW input read in place, output channels blocked by ``ocb`` (default:
    one vector of ``target``).

    Kernel inputs: ``data [N, C, H, W]`` and ``weight_packed [O/ocb, C, K, K, ocb]``.
    """
    ocb = ocb or packed_blocks(C, O, _lanes(target, dtype))[1]
    _check_block(O, ocb, f"{name}: output channel")
    OH, OW = conv_out_size(H, K, stride, pad, name), conv_out_size(W, K, stride, pad, name)
    data = te.placeholder((N, C, H, W), dtype, "data")
    wp = te.placeholder((O // ocb, C, K, K, ocb), dtype, "weight_packed")
    dp = pad_nchw(data, pad)
    rc, kh, kw = te.reduce_axis(C, "rc"), te.reduce_axis(K, "kh"), te.reduce_axis(K, "kw")
    owp, col = _padded_width(OW, ow_tile, name)
    conv = te.compute((N, O // ocb, OH, owp, ocb), lambda n, oc, y, x, ob: te.sum(
        dp[n, rc, y * stride + kh, col(x) * stride + kw] * wp[oc, rc, kh, kw, ob], axis=[rc, kh, kw]), "conv")
    out = _unpack(conv, O, ocb, OW, name)
    ref = conv2d_nchw(N, C, H, W, O, K, stride=stride, pad=pad, dtype=dtype).reference

    def prepare(x, w):
        return [x, w.reshape(O // ocb, ocb, C, K, K).transpose(0, 2, 3, 4, 1)]

    return Operator(name, (data, wp), out, 2 * N * O * OH * OW * C * K * K, ref, _schedule_unpacked, prepare,
                    ((N, C, H, W), (O, C, K, K)), parts=conv_parts(data, dp, conv))


def depthwise_conv2d_nchwc(N: int, C: int, H: int, W: int, K: int, stride: int = 1, pad: int = 0,
                           cb: int | None = None, dtype: str = "float32", name: str = "depthwise_conv2d",
                           ow_tile: int = 1, target: Target | None = None) -> Operator:
    """Depthwise convolution with channels blocked by ``cb`` (vectorized across channels; default: one
    vector of ``target``).

    Kernel inputs: ``data [N, C, H, W]`` and ``weight_packed [C/cb, K, K, cb]``.
    """
    cb = cb or packed_blocks(C, C, _lanes(target, dtype))[1]
    _check_block(C, cb, f"{name}: channel")
    OH, OW = conv_out_size(H, K, stride, pad, name), conv_out_size(W, K, stride, pad, name)
    data = te.placeholder((N, C, H, W), dtype, "data")
    wp = te.placeholder((C // cb, K, K, cb), dtype, "weight_packed")
    dp = _pack_data(data, pad, cb)
    kh, kw = te.reduce_axis(K, "kh"), te.reduce_axis(K, "kw")
    owp, col = _padded_width(OW, ow_tile, name)
    conv = te.compute((N, C // cb, OH, owp, cb), lambda n, cc, y, x, b: te.sum(
        dp[n, cc, y * stride + kh, col(x) * stride + kw, b] * wp[cc, kh, kw, b], axis=[kh, kw]), "conv")
    out = _unpack(conv, C, cb, OW, name)
    ref = depthwise_conv2d_nchw(N, C, H, W, K, stride=stride, pad=pad, dtype=dtype).reference

    def prepare(x, w):
        return [x, w.reshape(C // cb, cb, K, K).transpose(0, 2, 3, 1)]

    return Operator(name, (data, wp), out, 2 * N * C * OH * OW * K * K, ref, _schedule_unpacked, prepare,
                    ((N, C, H, W), (C, 1, K, K)), parts={Part.PACKED_INPUT: dp, Part.ACCUMULATOR: conv})


__all__ = ["MAX_BLOCK_VECTORS", "block_choices", "conv2d_nchwc", "conv2d_nchwc_packed", "conv2d_spatial_pack",
           "default_block", "depthwise_conv2d_nchwc", "group_block_choices", "grouped_blocks", "packed_blocks"]

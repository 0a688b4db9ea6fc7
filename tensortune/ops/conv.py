"""2-D convolutions in NCHW layout: regular and depthwise, with stride, zero padding and an
optional fused bias + ReLU epilogue."""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import te
from ..errors import ShapeError
from ..target import Target, TargetKind
from ..schedule import Schedule, create_schedule
from ..te import Expr, Tensor
from .operator import Operator, Part
from .pad import pad_nchw
from .schedule_helpers import largest_divisor, local_accumulator, parallel_input_transform, simple_gpu_schedule


def conv_out_size(n: int, k: int, stride: int, pad: int, what: str) -> int:
    if stride < 1 or pad < 0 or k < 1:
        raise ShapeError(f"{what}: stride must be >= 1, pad >= 0 and kernel >= 1 (got stride={stride}, pad={pad}, "
                         f"kernel={k})")
    out = (n + 2 * pad - k) // stride + 1
    if out < 1:
        raise ShapeError(f"{what}: a {k}-wide kernel does not fit an input of {n} with padding {pad}")
    return out


def _epilogue(acc: Tensor, channels: int, dtype: str, bias: bool, relu: bool,
              name: str) -> tuple[list[Tensor], Tensor, tuple[Tensor, ...]]:
    """The bias input (if any), the output, and the stages between ``acc`` and the output."""
    inputs, stages = [], [acc]
    if bias:
        b = te.placeholder((channels,), dtype, "bias")
        inputs.append(b)
        stages.append(te.compute(acc.shape, lambda n, c, y, x: acc[n, c, y, x] + b[c],
                                 f"{name}_bias" if relu else name))
    if relu:
        prev = stages[-1]
        stages.append(te.compute(acc.shape, lambda n, c, y, x: te.maximum(prev[n, c, y, x], te.const(0, dtype)),
                                 name))
    return inputs, stages[-1], tuple(stages[1:-1])


def _ref_epilogue(r: np.ndarray, rest, bias: bool, relu: bool) -> np.ndarray:
    if bias:
        r = r + rest[0][None, :, None, None]
    if relu:
        r = np.maximum(r, 0)
    return r


def _windows(x: np.ndarray, kh: int, kw: int, stride: int, pad: int, oh: int, ow: int) -> np.ndarray:
    """``[N, C, OH, OW, KH, KW]`` view of the zero-padded input's sliding windows."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    return win[:, :, ::stride, ::stride][:, :, :oh, :ow]


def conv_parts(data: Tensor, padded: Tensor, acc: Tensor) -> dict[Part, Tensor]:
    """The parts of a convolution that reads ``padded`` (``data`` itself when there is no padding)."""
    return {Part.ACCUMULATOR: acc} | ({} if padded is data else {Part.PADDED_INPUT: padded})


def _nchw_operator(name: str, data: Tensor, weight: Tensor, padded: Tensor, shape: tuple[int, ...],
                   body: Callable[..., Expr], conv: Callable[..., np.ndarray], flops: int, dtype: str, bias: bool,
                   relu: bool) -> Operator:
    """An NCHW convolution ``body`` (numpy: ``conv``) with its optional bias + ReLU epilogue."""
    acc = te.compute(shape, body, f"{name}_acc" if bias or relu else name)
    extra, out, between = _epilogue(acc, shape[1], dtype, bias, relu, name)

    def reference(x, w, *rest):
        return _ref_epilogue(conv(x, w), rest, bias, relu).astype(x.dtype)

    return Operator(name, (data, weight, *extra), out, flops, reference, _schedule_conv,
                    parts=conv_parts(data, padded, acc), epilogue=between)


def conv2d_nchw(N: int, C: int, H: int, W: int, O: int, KH: int, KW: int | None = None, stride: int = 1,
                pad: int = 0, dtype: str = "float32", bias: bool = False, relu: bool = False,
                name: str = "conv2d", groups: int = 1) -> Operator:
    """``out[n, o, y, x] = sum(data_pad[n, g*C/groups + c, y*s+r, x*s+q] * weight[o, c, r, q])``, ``g`` the group of
    output channel ``o`` (``groups`` of ``C/groups`` input and ``O/groups`` output channels each)."""
    KW = KH if KW is None else KW
    OH, OW = conv_out_size(H, KH, stride, pad, name), conv_out_size(W, KW, stride, pad, name)
    check_groups(C, O, groups, name)
    cg, og = C // groups, O // groups
    data = te.placeholder((N, C, H, W), dtype, "data")
    weight = te.placeholder((O, cg, KH, KW), dtype, "weight")
    dp = pad_nchw(data, pad)
    rc, rh, rw = te.reduce_axis(cg, "rc"), te.reduce_axis(KH, "rh"), te.reduce_axis(KW, "rw")

    def conv(x, w):
        win = _windows(x, KH, KW, stride, pad, OH, OW)
        return np.concatenate([np.einsum("ncyxhw,ochw->noyx", win[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og],
                                         optimize=True) for g in range(groups)], axis=1)

    def channel(o, c):
        return c if groups == 1 else o // og * cg + c

    return _nchw_operator(name, data, weight, dp, (N, O, OH, OW), lambda n, o, y, x: te.sum(
        dp[n, channel(o, rc), y * stride + rh, x * stride + rw] * weight[o, rc, rh, rw], axis=[rc, rh, rw]),
        conv, 2 * N * O * OH * OW * cg * KH * KW, dtype, bias, relu)


def check_groups(C: int, O: int, groups: int, name: str) -> None:
    """A ``ShapeError`` unless ``groups`` is positive and divides the input and output channels."""
    if groups < 1 or C % groups or O % groups:
        raise ShapeError(f"{name}: groups={groups} must be positive and divide the input channels ({C}) and the "
                         f"output channels ({O})")


def depthwise_conv2d_nchw(N: int, C: int, H: int, W: int, KH: int, KW: int | None = None, stride: int = 1,
                          pad: int = 0, dtype: str = "float32", bias: bool = False, relu: bool = False,
                          name: str = "depthwise_conv2d") -> Operator:
    """``out[n, c, y, x] = sum(data_pad[n, c, y*s+r, x*s+q] * weight[c, 0, r, q])`` (channel multiplier 1)."""
    KW = KH if KW is None else KW
    OH, OW = conv_out_size(H, KH, stride, pad, name), conv_out_size(W, KW, stride, pad, name)
    data = te.placeholder((N, C, H, W), dtype, "data")
    weight = te.placeholder((C, 1, KH, KW), dtype, "weight")
    dp = pad_nchw(data, pad)
    rh, rw = te.reduce_axis(KH, "rh"), te.reduce_axis(KW, "rw")

    def conv(x, w):
        return np.einsum("ncyxhw,chw->ncyx", _windows(x, KH, KW, stride, pad, OH, OW), w[:, 0], optimize=True)

    return _nchw_operator(name, data, weight, dp, (N, C, OH, OW), lambda n, c, y, x: te.sum(
        dp[n, c, y * stride + rh, x * stride + rw] * weight[c, 0, rh, rw], axis=[rh, rw]),
        conv, 2 * N * C * OH * OW * KH * KW, dtype, bias, relu)


def _schedule_conv(op: Operator, target: Target) -> Schedule:
    """Output tiles of (channels x row segment) accumulated in registers, vectorized along the row.

    The padded input is materialised once in parallel; epilogue stages are inlined into the output.
    For a GPU target: ``simple_gpu_schedule`` (the tuned ones are the ``*_cuda`` templates).
    """
    if target.kind is TargetKind.CUDA:
        return simple_gpu_schedule(op)
    out = op.output
    s = create_schedule(out)
    parallel_input_transform(s, op)
    acc = local_accumulator(s, op)
    _, O, _, OW = out.shape
    lanes = max(1, target.lanes(out.dtype))
    owb = largest_divisor(OW, 2 * lanes)
    vregs = -(-owb // lanes)
    depthwise = len(s[acc].reduce_axis) == 2
    ocb = 1 if depthwise else largest_divisor(O, max(1, target.accumulator_budget(vregs) // vregs))
    n, o, y, x = s[out].axis
    oo, oi = s[out].split(o, ocb)
    xo, xi = s[out].split(x, owb)
    s[out].reorder(n, oo, y, xo, oi, xi)
    tile = s[out].fuse(s[out].fuse(n, oo), y)
    s[out].parallel(tile)
    s[out].vectorize(xi)
    s[acc].compute_at(s[out], xo)
    _, ao, _, ax = s[acc].axis
    red = s[acc].reduce_axis
    s[acc].reorder(*red, ao, ax)
    if not depthwise:
        s[acc].unroll(ao)
    s[acc].vectorize(ax)
    return s

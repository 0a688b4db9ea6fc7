"""Transposed 2-D convolution in NCHW, declared by the phases of its stride (sub-pixel convolution).

PyTorch and ONNX define it as the input spread out by the stride (zeros between its elements), padded and convolved
with the flipped filters; computed so, ``stride**2 - 1`` of every ``stride**2`` products are by zero. Here each
output row ``y`` is seen by its phase: with ``Y = y + pad = stride * q + p``, it sums input row ``q - t`` times filter
row ``p + stride * t`` over ``t``, a regular convolution of ``ceil(K / stride)`` taps per phase. The declaration
has the input zero-padded (``data_pad``: rows ``q - t`` outside the input read zeros), one reduction per phase
(``phases[n, o, p, p', q, q']``, reading filter row ``p + stride * t``, zero past the filter) and the output read
from its phase; every product it computes is one the scatter
form computes too.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..errors import ShapeError
from ..schedule import Schedule, create_schedule
from ..target import Target
from .operator import Operator, Part


def conv2d_transpose_nchw(N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1,  # noqa: E741
                          pad: int = 0, dtype: str = "float32", output_padding: int = 0,
                          name: str = "conv2d_transpose") -> Operator:
    """``out[n, o]`` = the sum over input channels ``c`` of ``data[n, c]`` scattered through ``weight[c, o]``
    (weights ``[C, O, K, K]``, as ONNX stores them); output size ``(H - 1) * stride - 2 * pad + K +
    output_padding`` (see the module docstring for the declaration)."""
    if stride < 1 or K < 1 or not 0 <= pad < K or not 0 <= output_padding < stride:
        raise ShapeError(f"{name}: need stride >= 1, 0 <= pad < K={K}, 0 <= output_padding < stride, got "
                         f"stride={stride}, pad={pad}, output_padding={output_padding}")
    OH, OW = ((n - 1) * stride - 2 * pad + K + output_padding for n in (H, W))
    if min(OH, OW) < 1:
        raise ShapeError(f"{name}: an input of {H}x{W} gives an output of {OH}x{OW}: padding {pad} crops more than "
                         "the transposed convolution spreads")
    data = te.placeholder((N, C, H, W), dtype, "data")
    weight = te.placeholder((C, O, K, K), dtype, "weight")
    taps = -(-K // stride)  # filter rows per phase
    q0 = pad // stride  # the first q an output row has
    QH, QW = ((n - 1 + pad) // stride - q0 + 1 for n in (OH, OW))
    # input rows read: q0 + q - t for q < Q, t < taps; padded by `before` and `after` zero rows
    before = max(0, taps - 1 - q0)
    after_h, after_w = (max(0, q0 + Q - 1 - (n - 1)) for Q, n in ((QH, H), (QW, W)))

    def padded(b, c, i, j):
        inside = te.logical_and(i >= before, j >= before, i < before + H, j < before + W)
        return te.select(inside, data[b, c, te.minimum(te.maximum(i - before, 0), H - 1),
                                      te.minimum(te.maximum(j - before, 0), W - 1)], te.const(0, dtype))

    dp = te.compute((N, C, before + H + after_h, before + W + after_w), padded, "data_pad")

    rc, rt, rtt = te.reduce_axis(C, "rc"), te.reduce_axis(taps, "rt"), te.reduce_axis(taps, "rtt")
    shift = before + q0

    def tap(n, o, p, pp, q, qq):
        ky, kx = p + stride * rt, pp + stride * rtt
        w = weight[rc, o, te.minimum(ky, K - 1), te.minimum(kx, K - 1)]
        if K % stride:  # the last tap of some phases is past the filter
            w = te.select(te.logical_and(ky < K, kx < K), w, te.const(0, dtype))
        return te.sum(dp[n, rc, q + shift - rt, qq + shift - rtt] * w, axis=[rc, rt, rtt])

    phases = te.compute((N, O, stride, stride, QH, QW), tap, "phases")

    def element(n, o, y, x):
        return phases[n, o, (y + pad) % stride, (x + pad) % stride, (y + pad) // stride - q0,
                      (x + pad) // stride - q0]

    out = te.compute((N, O, OH, OW), element, name)

    def reference(x, w):
        r = np.zeros((N, O, OH + 2 * pad, OW + 2 * pad), np.float64)
        for i in range(H):
            for j in range(W):
                r[:, :, i * stride:i * stride + K, j * stride:j * stride + K] += np.einsum(
                    "nc,cohw->nohw", x[:, :, i, j].astype(np.float64), w.astype(np.float64))
        return r[:, :, pad:pad + OH, pad:pad + OW].astype(x.dtype)

    return Operator(name, (data, weight), out, 2 * N * C * O * H * W * K * K, reference, _schedule,
                    parts={Part.ACCUMULATOR: phases, Part.PADDED_INPUT: dp})


def _schedule(op: Operator, target: Target) -> Schedule:
    """The untuned baseline: every stage at the root, output channels in parallel."""
    s = create_schedule(op.output)
    for t in (op.part(Part.PADDED_INPUT), op.part(Part.ACCUMULATOR), op.output):
        s[t].parallel(s[t].axis[1])
    return s


__all__ = ["conv2d_transpose_nchw"]

"""Transposed 2-D convolution in NCHW, declared as PyTorch and ONNX define it: the input spread out by the stride
(zeros between its elements), padded by ``K - 1 - pad`` (and ``output_padding`` more at the end), convolved with
the flipped filters."""
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
    output_padding``."""
    if stride < 1 or K < 1 or not 0 <= pad < K or not 0 <= output_padding < stride:
        raise ShapeError(f"{name}: need stride >= 1, 0 <= pad < K={K}, 0 <= output_padding < stride, got "
                         f"stride={stride}, pad={pad}, output_padding={output_padding}")
    OH, OW = ((n - 1) * stride - 2 * pad + K + output_padding for n in (H, W))
    if min(OH, OW) < 1:
        raise ShapeError(f"{name}: an input of {H}x{W} gives an output of {OH}x{OW}: padding {pad} crops more than "
                         "the transposed convolution spreads")
    data = te.placeholder((N, C, H, W), dtype, "data")
    weight = te.placeholder((C, O, K, K), dtype, "weight")
    before = K - 1 - pad

    def spread(b, c, y, x):  # data spread by the stride and padded: zero between and around its elements
        ty, tx = y - before, x - before
        inside = te.logical_and(ty >= 0, tx >= 0, ty < (H - 1) * stride + 1, tx < (W - 1) * stride + 1,
                                te.equal(ty % stride, 0), te.equal(tx % stride, 0))
        return te.select(inside, data[b, c, ty // stride, tx // stride], te.const(0, dtype))

    dp = te.compute((N, C, OH + K - 1, OW + K - 1), spread, "data_spread")
    rc, rh, rw = te.reduce_axis(C, "rc"), te.reduce_axis(K, "rh"), te.reduce_axis(K, "rw")
    out = te.compute((N, O, OH, OW), lambda n, o, y, x: te.sum(
        dp[n, rc, y + rh, x + rw] * weight[rc, o, K - 1 - rh, K - 1 - rw], axis=[rc, rh, rw]), name)

    def reference(x, w):
        r = np.zeros((N, O, OH + 2 * pad, OW + 2 * pad), np.float64)
        for i in range(H):
            for j in range(W):
                r[:, :, i * stride:i * stride + K, j * stride:j * stride + K] += np.einsum(
                    "nc,cohw->nohw", x[:, :, i, j].astype(np.float64), w.astype(np.float64))
        return r[:, :, pad:pad + OH, pad:pad + OW].astype(x.dtype)

    return Operator(name, (data, weight), out, 2 * N * C * O * H * W * K * K, reference, _schedule,
                    parts={Part.ACCUMULATOR: out, Part.PADDED_INPUT: dp})


def _schedule(op: Operator, target: Target) -> Schedule:
    """The untuned baseline: the spread input at the root, output channels in parallel."""
    s = create_schedule(op.output)
    s[op.part(Part.PADDED_INPUT)].parallel(s[op.part(Part.PADDED_INPUT)].axis[1])
    s[op.output].parallel(s[op.output].axis[1])
    return s


__all__ = ["conv2d_transpose_nchw"]

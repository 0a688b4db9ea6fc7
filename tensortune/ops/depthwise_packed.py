"""Depthwise convolution on NCHW[x]c tensors, as it runs inside a compiled network (blocked in and out)."""
from __future__ import annotations

from .. import te
from .conv import conv_out_size, conv_parts, depthwise_conv2d_nchw
from ..target import Target
from .conv_packed import _block_nchw, _check_block, _lanes, _schedule_packed, packed_blocks
from .operator import Operator
from .pad import padded_read


def depthwise_conv2d_nchwc_packed(N: int, C: int, H: int, W: int, K: int, stride: int = 1, pad: int = 0,
                                  cb: int | None = None, dtype: str = "float32", name: str = "depthwise_conv2d",
                                  target: Target | None = None) -> Operator:
    """``data [N, C/cb, H, W, cb]`` convolved channel by channel with ``weight_packed [C/cb, K, K, cb]`` into
    ``[N, C/cb, OH, OW, cb]`` (``cb``: one vector of ``target`` by default). ``prepare`` makes both from NCHW /
    ``[C, 1, K, K]`` arrays; the reference is the NCHW result in the same blocked layout."""
    cb = cb or packed_blocks(C, C, _lanes(target, dtype))[1]
    _check_block(C, cb, f"{name}: channel")
    OH, OW = conv_out_size(H, K, stride, pad, name), conv_out_size(W, K, stride, pad, name)
    data = te.placeholder((N, C // cb, H, W, cb), dtype, "data_packed")
    wp = te.placeholder((C // cb, K, K, cb), dtype, "weight_packed")
    kh, kw = te.reduce_axis(K, "kh"), te.reduce_axis(K, "kw")
    # the padding is read in place (no padded copy of the input: a depthwise convolution is bound by memory)
    out = te.compute((N, C // cb, OH, OW, cb), lambda n, c, y, x, b: te.sum(
        padded_read(data, pad, n, c, y * stride + kh, x * stride + kw, b) * wp[c, kh, kw, b], axis=[kh, kw]), name)
    nchw_ref = depthwise_conv2d_nchw(N, C, H, W, K, stride=stride, pad=pad, dtype=dtype).reference

    def reference(x, w):
        return _block_nchw(nchw_ref(x, w), cb)

    def prepare(x, w):
        return [_block_nchw(x, cb), w.reshape(C // cb, cb, K, K).transpose(0, 2, 3, 1)]

    return Operator(name, (data, wp), out, 2 * N * C * OH * OW * K * K, reference, _schedule_packed, prepare,
                    ((N, C, H, W), (C, 1, K, K)), parts=conv_parts(data, data, out))


__all__ = ["depthwise_conv2d_nchwc_packed"]

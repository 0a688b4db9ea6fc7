"""What the windowed operators (convolutions, pooling) share: the output extent of a window along an axis, numpy
views of the windows for the references, and the padding ONNX's attributes ask for."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..graph.errors import GraphError
from ..graph.op import Op
from .onnx_convert import OnnxNode, Reject


def conv_out(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int, op: Op,
             ceil_mode: bool = False) -> int:
    """Output extent of a convolution or pooling window along one axis."""
    span = size + pad_begin + pad_end - dilation * (kernel - 1) - 1
    if span < 0:
        raise GraphError(f"{op.kind}: a window of {kernel} (dilation {dilation}) does not fit an input of {size} "
                         f"padded by {pad_begin}+{pad_end}")
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_begin:  # the last window must start inside the input or its left padding
        out -= 1
    return out


def windows(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int],
            out_hw: tuple[int, int]) -> np.ndarray:
    """``[N, C, OH, OW, KH, KW]`` view of the (already padded) input's windows."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    win = np.lib.stride_tricks.sliding_window_view(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw]
    return win[:, :, :out_hw[0], :out_hw[1]]


def spatial_pads(node: OnnxNode, in_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int]) -> tuple[int, int, int, int]:
    """The (top, left, bottom, right) pads of a 2-D window node: ``pads`` or what ``auto_pad`` computes."""
    auto = node.str_attr("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = tuple(node.attr("pads", (0, 0, 0, 0)))
        if len(pads) != 4:
            raise Reject(f"pads {list(pads)} must have 4 entries for a 2-D window")
        if any(p < 0 for p in pads):
            raise Reject(f"negative pads {list(pads)} are not supported")
        return pads  # type: ignore[return-value]
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise Reject(f"auto_pad {auto!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small = total // 2
        begin.append(small if auto == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return (begin[0], begin[1], end[0], end[1])


def window_attrs(node: OnnxNode, x_shape, kernel) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
    """``(strides, dilations, pads)`` of a 2-D window node on NCHW data; rejects other ranks."""
    if len(x_shape) != 4 or len(kernel) != 2:
        raise Reject(f"only 2-D windows on NCHW tensors are supported (input shape {list(x_shape)}, kernel "
                     f"{list(kernel)})")
    strides = tuple(node.attr("strides", (1, 1)))
    dilations = tuple(node.attr("dilations", (1, 1)))
    if len(strides) != 2 or len(dilations) != 2:
        raise Reject("strides and dilations need 2 entries for a 2-D window")
    return strides, dilations, spatial_pads(node, x_shape[2:], kernel, strides, dilations)  # type: ignore

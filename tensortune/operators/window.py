"""What the windowed operators (convolutions, pooling) share: the output extent of a window along an axis, numpy
views of the windows for the references (any number of spatial axes), the padding ONNX's attributes ask for, and
1-D windows computed as 2-D ones of one row."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..graph.errors import GraphError
from ..graph.op import Op
from .onnx_convert import ImportContext, OnnxNode, Reject
from .reshape import Reshape


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


def windows(x: np.ndarray, kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
            out: Sequence[int]) -> np.ndarray:
    """``[N, C, *out, *kernel]`` view of the (already padded) input's windows along its spatial axes (2 and on)."""
    rank = len(kernel)
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilations))
    win = np.lib.stride_tricks.sliding_window_view(x, span, axis=tuple(range(2, 2 + rank)))
    step = tuple(slice(None, None, s) for s in strides) + tuple(slice(None, None, d) for d in dilations)
    return win[(slice(None), slice(None)) + step][(slice(None), slice(None)) + tuple(slice(o) for o in out)]


def spatial_pads(node: OnnxNode, sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                 dilations: Sequence[int]) -> tuple[list[int], list[int]]:
    """The (begin, end) pads per spatial axis of a window node: ``pads`` or what ``auto_pad`` computes."""
    rank = len(sizes)
    auto = node.str_attr("auto_pad", "NOTSET")
    if auto == "NOTSET":
        pads = [int(p) for p in node.attr("pads", (0,) * (2 * rank))]
        if len(pads) != 2 * rank:
            raise Reject(f"pads {pads} must have {2 * rank} entries for a {rank}-D window")
        if any(p < 0 for p in pads):
            raise Reject(f"negative pads {pads} are not supported")
        return pads[:rank], pads[rank:]
    if auto == "VALID":
        return [0] * rank, [0] * rank
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise Reject(f"auto_pad {auto!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    begin, end = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small = total // 2
        begin.append(small if auto == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return begin, end


def window_attrs(node: OnnxNode, x_shape, kernel) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """``(strides, dilations, pads)`` of a 1-D, 2-D or 3-D window node on NC[[D]H]W data (pads: the begins, then the
    ends), a 1-D window given as the 2-D window ``1 x K`` over rows of one pixel (``lift_1d`` makes the tensors so);
    rejects other ranks."""
    rank = len(kernel)
    if len(x_shape) != rank + 2 or rank not in (1, 2, 3):
        raise Reject(f"only 1-D, 2-D and 3-D windows on NCW, NCHW and NCDHW tensors are supported (input shape "
                     f"{list(x_shape)}, kernel {list(kernel)})")
    strides = tuple(int(s) for s in node.attr("strides", (1,) * rank))
    dilations = tuple(int(d) for d in node.attr("dilations", (1,) * rank))
    if len(strides) != rank or len(dilations) != rank:
        raise Reject(f"strides and dilations need {rank} entries for a {rank}-D window")
    begin, end = spatial_pads(node, x_shape[2:], kernel, strides, dilations)
    if rank == 1:
        return (1, strides[0]), (1, dilations[0]), (0, begin[0], 0, end[0])
    return strides, dilations, tuple(begin + end)


def lift_1d(ctx: ImportContext, node: OnnxNode, op: Op, inputs: Sequence[str], lifted: Sequence[int]) -> None:
    """Emit the 2-D ``op`` of a window node: where the node is 1-D (NCW data), the ``lifted`` inputs gain an axis of
    one row (``[N, C, W] -> [N, C, 1, W]``; a weight ``[O, C, K] -> [O, C, 1, K]``) and the output loses it again,
    so 1-D convolutions and poolings run the 2-D kernels and templates."""
    if len(ctx.shape(inputs[0])) != 3:
        ctx.emit(op, inputs, node.outputs[:1], node.name)
        return
    args = list(inputs)
    for k in lifted:
        s = ctx.shape(args[k])
        (args[k],) = ctx.emit(Reshape((*s[:2], 1, *s[2:])), [args[k]], None, f"{node.name}_2d")
    (out,) = ctx.emit(op, args, None, node.name)
    s = ctx.shape(out)
    ctx.emit(Reshape((s[0], s[1], s[3])), [out], node.outputs[:1], f"{node.name}_1d")

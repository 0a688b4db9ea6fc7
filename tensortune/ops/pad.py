"""Zero padding of the rows and columns (dimensions 2 and 3) of NCHW and NCHW[x]c tensors."""
from __future__ import annotations

from .. import te
from ..te import Tensor
from ..te.expr import Expr, ExprLike, IterVar


def padded_read(data: Tensor, pad: int, b: ExprLike, c: ExprLike, y: IterVar | Expr, x: IterVar | Expr,
                *block: ExprLike) -> Expr:
    """Element ``[b, c, y, x, *block]`` of ``data`` zero-padded by ``pad`` on each side of its rows
    and columns: ``data[b, c, y - pad, x - pad, *block]`` inside the data, 0 outside."""
    h, w = data.shape[2], data.shape[3]
    inside = te.logical_and(y >= pad, y < h + pad, x >= pad, x < w + pad)
    return te.select(inside, data[(b, c, y - pad, x - pad, *block)], te.const(0, data.dtype))


def pad_nchw(data: Tensor, pad: int, name: str = "data_pad") -> Tensor:
    """Zero-pad the two spatial dimensions of an NCHW tensor (the identity when ``pad`` is 0)."""
    if pad == 0:
        return data
    n, c, h, w = data.shape
    return te.compute((n, c, h + 2 * pad, w + 2 * pad), lambda b, ch, y, x: padded_read(data, pad, b, ch, y, x),
                      name)

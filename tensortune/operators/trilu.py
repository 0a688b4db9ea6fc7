"""``Trilu``: the upper or lower triangle of the matrices in the last two axes (the causal masks of attention), the
rest zero. Each output element is the input element at its index or zero, decided by the index alone: a ``MapOp``
that fuses with its elementwise neighbours."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.op import Pattern, check_count
from .map_op import MapOp
from .onnx_convert import ImportContext, OnnxNode, Reject, converter


@dataclass(frozen=True, slots=True)
class Trilu(MapOp):
    """``numpy.triu(x, k)`` (``upper``) or ``numpy.tril(x, k)``: keeps element ``[..., i, j]`` where ``j - i >= k``
    (upper) or ``j - i <= k`` (lower)."""

    pattern = Pattern.INJECTIVE
    name = "trilu"
    upper: bool = True
    k: int = 0

    def infer(self, inputs):
        check_count(self, inputs, 1)
        if len(inputs[0].shape) < 2:
            raise GraphError(f"Trilu: the input needs at least two axes, got {inputs[0]}")
        return (inputs[0],)

    def reference(self, x: np.ndarray) -> np.ndarray:
        return np.triu(x, self.k) if self.upper else np.tril(x, self.k)

    def element(self, xs, idx):
        x = xs[0]
        rows, cols = x.shape[-2:]
        k = min(max(self.k, -rows), cols)  # the same triangle, and a k that fits in int32
        diagonal = idx[-1] - idx[-2]
        keep = diagonal >= k if self.upper else diagonal <= k
        return te.select(keep, x.at(idx), te.const(0, x.dtype))


@converter("Trilu", attrs=("upper",), since=14)
def _trilu(ctx: ImportContext, node: OnnxNode) -> None:
    k = ctx.need_static(node, 1, "k")
    if k is not None and np.asarray(k).size != 1:
        raise Reject(f"k must be one integer, got {np.asarray(k).tolist()}")
    if len(ctx.shape(node.input(0))) < 2:
        raise Reject(f"the input needs at least two axes, got shape {list(ctx.shape(node.input(0)))}")
    k = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
    ctx.emit(Trilu(bool(node.attr("upper", 1)), k), [node.input(0)], node.outputs, node.name)

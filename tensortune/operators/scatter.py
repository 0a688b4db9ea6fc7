"""``ScatterND`` without reduction: a copy of a tensor with slices replaced at positions read at run time (the form
exporters emit for the key/value cache updates of language models). Its kernel finds, for each slice of the output,
the last update aimed at it (a reduction over the updates), then copies that update's slice or the data's."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node
from ..graph.op import Op, Pattern, check_count
from ..schedule import create_schedule
from ..target import Target
from .indexing import check_indices
from .kernel import KernelArgs, KernelDef, lanes_of, schedule_reductions
from .onnx_convert import ImportContext, OnnxNode, Reject, converter


@dataclass(frozen=True, slots=True)
class ScatterND(Op):
    """``data`` with ``out[indices[u]] = updates[u]``: indices ``[*U, k]`` address the first ``k`` axes of data,
    updates are ``[*U, *data.shape[k:]]``. Negative indices count from the end; where two indices are equal the
    last update wins (onnxruntime applies them in order); an index out of range updates nothing (onnxruntime
    raises), so a kernel never writes outside its output."""

    pattern = Pattern.OPAQUE

    def infer(self, inputs):
        check_count(self, inputs, 3)
        data, idx, upd = inputs
        check_indices(self, idx)
        k = idx.shape[-1] if idx.shape else 0
        if not 1 <= k <= len(data.shape):
            raise GraphError(f"ScatterND: the last axis of indices {idx.shape} must address 1 to {len(data.shape)} "
                             f"axes of data {data.shape}")
        if upd.shape != idx.shape[:-1] + data.shape[k:] or upd.dtype != data.dtype:
            raise GraphError(f"ScatterND: updates must be {data.dtype}{list(idx.shape[:-1] + data.shape[k:])}, got "
                             f"{upd}")
        return (data,)

    def reference(self, data: np.ndarray, idx: np.ndarray, upd: np.ndarray) -> np.ndarray:
        out = data.copy()
        k = idx.shape[-1]
        head = np.asarray(data.shape[:k])
        flat_idx, flat_upd = idx.reshape(-1, k).astype(np.int64), upd.reshape((-1,) + data.shape[k:])
        for at, u in zip(flat_idx, flat_upd):
            at = np.where(at < 0, at + head, at)
            if np.all((at >= 0) & (at < head)):
                out[tuple(at)] = u
        return out

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        dv, iv = g.values[node.inputs[0]], g.values[node.inputs[1]]
        k = iv.shape[-1]
        head, rest = dv.shape[:k], dv.shape[k:]
        count, width = math.prod(iv.shape[:-1]), math.prod(rest)
        a = KernelArgs(g)
        data = a.value(node.inputs[0], "data")
        ind = a.value(node.inputs[1], "idx", (count, k))
        upd = a.value(node.inputs[2], "upd", (count, width))
        u = te.reduce_axis(count, "u")

        def last(*h):
            dt = ind.dtype
            match = [te.equal(te.select(ind[u, j] < te.const(0, dt), ind[u, j] + te.const(n, dt), ind[u, j]),
                              te.cast(dt, h[j])) for j, n in enumerate(head)]
            return te.max(te.select(te.logical_and(*match), u, -1), axis=u)

        which = te.compute(head, last, "which")

        def body(*idx):
            w = which[idx[:k]]
            offset = te.const(0, "int32")
            for i, n in zip(idx[k:], rest):
                offset = offset * n + i
            return te.select(w >= 0, upd[te.maximum(w, 0), offset], data[idx])

        out = te.compute(dv.shape, body, "out")
        s = create_schedule(out)
        schedule_reductions(s, [which, out], lanes_of(target, dv.dtype, node))
        return a.done("scatter_nd", node, out, s)


@converter("ScatterND", attrs=("reduction",), since=11)
def _scatter_nd(ctx: ImportContext, node: OnnxNode) -> None:
    reduction = node.str_attr("reduction", "none")
    if reduction != "none":
        raise Reject(f"reduction {reduction!r} is not supported (only 'none': updates replace the data)")
    ctx.emit(ScatterND(), node.inputs[:3], node.outputs, node.name)

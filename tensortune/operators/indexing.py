"""Operators that read elements at positions held in a tensor: ``Gather`` (ONNX Gather: the embedding lookup of
language models, rows of a constant table at run-time token ids) and ``GatherElements``. Each is a ``MapOp``: an
output element is one data element, found from an index element read at run time, so either fuses with its
elementwise neighbours (``passes.fuse_injective``); a Gather of constants is folded at compile time by its
reference.

Indices are int32 or int64 as ONNX gives them, negative ones counting from the end of the axis. onnxruntime raises
on an index out of range; here it is clamped into the axis, in the kernels and in the reference alike, so that a
kernel never reads outside its input.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import TensorType
from ..graph.op import Pattern, check_count, numpy_dtype
from ..te import Expr
from .map_op import MapOp
from .onnx_convert import ImportContext, OnnxNode, Reject, axis, converter


def position(i: Expr, n: int) -> Expr:
    """Run-time index ``i`` (an integer expression) as an int32 position along an axis of ``n``: a negative one
    counts from the end, then it is clamped into ``[0, n)``."""
    dt = i.dtype
    i = te.select(i < te.const(0, dt), i + te.const(n, dt), i)
    return te.cast("int32", te.minimum(te.maximum(i, te.const(0, dt)), te.const(n - 1, dt)))


def positions(indices: np.ndarray, n: int) -> np.ndarray:
    """``position`` on an array of indices (int64)."""
    i = np.asarray(indices).astype(np.int64)
    return np.clip(np.where(i < 0, i + n, i), 0, n - 1)


def check_indices(op: MapOp, t: TensorType) -> None:
    if not np.issubdtype(numpy_dtype(t.dtype), np.integer):
        raise GraphError(f"{op.kind}: indices must be integers, got {t.dtype}")


def reads_no_more(input_shape: tuple[int, ...], output_shape: tuple[int, ...]) -> bool:
    """``MapOp.reads_once`` of a gather: it may read one element many times (repeated indices), but a producer fused
    into it is computed once per output element, so no more often than on its own when the output is no larger."""
    return math.prod(output_shape) <= math.prod(input_shape)


def _check_axis(op: MapOp, shape: tuple[int, ...]) -> None:
    if not 0 <= op.axis < len(shape):
        raise GraphError(f"{op.kind}: axis {op.axis} is out of range for shape {shape}")


@dataclass(frozen=True, slots=True)
class Gather(MapOp):
    """``numpy.take(data, indices, axis)``: the index tensor's shape replaces axis ``axis`` of ``data``. Negative
    indices count from the end; indices out of range are clamped (onnxruntime raises)."""

    pattern = Pattern.INJECTIVE
    name = "gather"
    axis: int

    def infer(self, inputs):
        check_count(self, inputs, 2)
        data, idx = inputs
        _check_axis(self, data.shape)
        check_indices(self, idx)
        return (TensorType(data.shape[:self.axis] + idx.shape + data.shape[self.axis + 1:], data.dtype),)

    def reference(self, data: np.ndarray, idx: np.ndarray) -> np.ndarray:
        return np.take(data, positions(idx, data.shape[self.axis]), axis=self.axis)

    def reads_once(self, input_shape, output_shape) -> bool:
        return reads_no_more(input_shape, output_shape)

    def element(self, xs, idx):
        data, indices = xs
        a, q = self.axis, len(indices.shape)
        at = position(indices.at(idx[a:a + q]), data.shape[a])
        return data.at((*idx[:a], at, *idx[a + q:]))


@dataclass(frozen=True, slots=True)
class GatherElements(MapOp):
    """``numpy.take_along_axis(data, indices, axis)``: the output has the indices' shape; each element is the data
    element at its own index but along ``axis``, where the index element says. Negative indices count from the end;
    indices out of range are clamped (onnxruntime raises)."""

    pattern = Pattern.INJECTIVE
    name = "gather_elements"
    axis: int

    def infer(self, inputs):
        check_count(self, inputs, 2)
        data, idx = inputs
        _check_axis(self, data.shape)
        check_indices(self, idx)
        if len(idx.shape) != len(data.shape) or any(
                i > d for k, (i, d) in enumerate(zip(idx.shape, data.shape)) if k != self.axis):
            raise GraphError(f"GatherElements: indices {idx.shape} must have the rank of data {data.shape} and no "
                             f"larger axes but axis {self.axis}")
        return (TensorType(idx.shape, data.dtype),)

    def reference(self, data: np.ndarray, idx: np.ndarray) -> np.ndarray:
        inner = data[tuple(slice(0, n) if k != self.axis else slice(None) for k, n in enumerate(idx.shape))]
        return np.take_along_axis(inner, positions(idx, data.shape[self.axis]), axis=self.axis)

    def reads_once(self, input_shape, output_shape) -> bool:
        return reads_no_more(input_shape, output_shape)

    def element(self, xs, idx):
        data, indices = xs
        src = list(idx)
        src[self.axis] = position(indices.at(idx), data.shape[self.axis])
        return data.at(src)


# ------------------------------------------------------------------------------------------- ONNX

@converter("Gather", attrs=("axis",))
def _gather(ctx: ImportContext, node: OnnxNode) -> None:
    rank = len(ctx.shape(node.input(0)))
    ctx.emit(Gather(axis(int(node.attr("axis", 0)), rank)), node.inputs[:2], node.outputs, node.name)


@converter("GatherElements", attrs=("axis",), since=11)
def _gather_elements(ctx: ImportContext, node: OnnxNode) -> None:
    rank = len(ctx.shape(node.input(0)))
    if rank == 0:
        raise Reject("GatherElements of a scalar")
    ctx.emit(GatherElements(axis(int(node.attr("axis", 0)), rank)), node.inputs[:2], node.outputs, node.name)

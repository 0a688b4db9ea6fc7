"""Operators that repeat their input: ``Expand`` (ONNX Expand: numpy broadcasting to a shape) and ``Tile`` (ONNX
Tile: the input repeated along each axis). Both are ``MapOp``s (each output element is one input element) that read
input elements more than once, so a producer is not fused into them (it would be computed again for every copy),
while they fuse into their elementwise readers."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph.errors import GraphError
from ..graph.ir import TensorType
from ..graph.op import Pattern, broadcast_shapes, check_count, check_ints
from .map_op import MapOp
from .onnx_convert import ImportContext, OnnxNode, Reject, converter, ints
from .reshape import Identity


@dataclass(frozen=True, slots=True)
class Expand(MapOp):
    """``numpy.broadcast_to(x, shape)``: ``shape`` is the output's, to which the input broadcasts."""

    pattern = Pattern.BROADCAST
    name = "expand"
    shape: tuple[int, ...]

    def infer(self, inputs):
        check_count(self, inputs, 1)
        x = inputs[0]
        if len(x.shape) > len(self.shape) or broadcast_shapes(self, x.shape, self.shape) != self.shape:
            raise GraphError(f"Expand: {x.shape} does not broadcast to {self.shape}")
        return (TensorType(self.shape, x.dtype),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        return np.broadcast_to(x, self.shape).copy()

    def reads_once(self, input_shape, output_shape) -> bool:
        return False

    def element(self, xs, idx):
        return xs[0].broadcast(idx)


@dataclass(frozen=True, slots=True)
class Tile(MapOp):
    """``numpy.tile(x, repeats)``: axis ``d`` repeated ``repeats[d]`` times (one entry per axis)."""

    pattern = Pattern.INJECTIVE
    name = "tile"
    repeats: tuple[int, ...]

    def infer(self, inputs):
        check_count(self, inputs, 1)
        x = inputs[0]
        check_ints(self, "repeats", self.repeats, len(x.shape))
        return (TensorType(tuple(d * r for d, r in zip(x.shape, self.repeats)), x.dtype),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        return np.tile(x, self.repeats)

    def reads_once(self, input_shape, output_shape) -> bool:
        return False

    def element(self, xs, idx):
        x = xs[0]
        return x.at([i % n if r > 1 else i for i, n, r in zip(idx, x.shape, self.repeats)])


# ------------------------------------------------------------------------------------------- ONNX

@converter("Expand", since=8)
def _expand(ctx: ImportContext, node: OnnxNode) -> None:
    x = node.input(0)
    src = ctx.shape(x)
    to = ints(ctx.need_static(node, 1, "shape"))
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(src, tuple(to)))
    except ValueError:
        raise Reject(f"{list(src)} does not broadcast to shape {to}") from None
    if 0 in shape:
        raise Reject(f"an empty result {list(shape)} (tensors without elements are not supported)")
    op = Identity() if shape == src else Expand(shape)
    ctx.emit(op, [x], node.outputs, node.name)


@converter("Tile", since=6)
def _tile(ctx: ImportContext, node: OnnxNode) -> None:
    x = node.input(0)
    repeats = ints(ctx.need_static(node, 1, "repeats"))
    rank = len(ctx.shape(x))
    if len(repeats) != rank:
        raise Reject(f"repeats {repeats} need one entry per axis of rank {rank}")
    if any(r < 1 for r in repeats):
        raise Reject(f"repeats {repeats} must be positive (tensors without elements are not supported)")
    op = Identity() if all(r == 1 for r in repeats) else Tile(tuple(repeats))
    ctx.emit(op, [x], node.outputs, node.name)

"""``DepthToSpace`` and ``SpaceToDepth``: NCHW images whose channels become blocks of pixels (the upsampling of
sub-pixel convolutions) and back. Each output element is one input element, every element read once: a ``MapOp``
that fuses with its elementwise neighbours like a transpose."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph.errors import GraphError
from ..graph.ir import TensorType
from ..graph.op import Pattern, check_count, check_rank
from .map_op import MapOp
from .onnx_convert import ImportContext, OnnxNode, Reject, converter


def _check_block(op: MapOp) -> None:
    if not isinstance(op.block, int) or op.block < 1:
        raise GraphError(f"{op.kind}: blocksize must be a positive integer, got {op.block!r}")


@dataclass(frozen=True, slots=True)
class DepthToSpace(MapOp):
    """``[N, C * b * b, H, W] -> [N, C, H * b, W * b]``. Mode DCR (``crd=False``) takes the block offsets from the
    high channels (``x.reshape(N, b, b, C, H, W)``), CRD from the low ones (``x.reshape(N, C, b, b, H, W)``)."""

    pattern = Pattern.INJECTIVE
    name = "depth_to_space"
    block: int
    crd: bool = False

    def __post_init__(self) -> None:
        _check_block(self)

    def infer(self, inputs):
        check_count(self, inputs, 1)
        x = inputs[0]
        check_rank(self, x, 4, "the input")
        n, c, h, w = x.shape
        b = self.block
        if c % (b * b):
            raise GraphError(f"DepthToSpace: {c} channels do not divide into blocks of {b}x{b}")
        return (TensorType((n, c // (b * b), h * b, w * b), x.dtype),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        n, c, h, w = x.shape
        b = self.block
        if self.crd:
            t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
        else:
            t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
        return t.reshape(n, c // (b * b), h * b, w * b)

    def element(self, xs, idx):
        n, c, y, x = idx
        b = self.block
        channels = xs[0].shape[1] // (b * b)
        offset = (y % b) * b + x % b
        ch = c * (b * b) + offset if self.crd else offset * channels + c
        return xs[0].at((n, ch, y // b, x // b))


@dataclass(frozen=True, slots=True)
class SpaceToDepth(MapOp):
    """``[N, C, H * b, W * b] -> [N, C * b * b, H, W]``, the inverse of ``DepthToSpace`` in mode DCR: output
    channel ``(i * b + j) * C + c`` holds the pixels at offset ``(i, j)`` of each block."""

    pattern = Pattern.INJECTIVE
    name = "space_to_depth"
    block: int

    def __post_init__(self) -> None:
        _check_block(self)

    def infer(self, inputs):
        check_count(self, inputs, 1)
        x = inputs[0]
        check_rank(self, x, 4, "the input")
        n, c, h, w = x.shape
        b = self.block
        if h % b or w % b:
            raise GraphError(f"SpaceToDepth: {h}x{w} pixels do not divide into blocks of {b}x{b}")
        return (TensorType((n, c * b * b, h // b, w // b), x.dtype),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        n, c, h, w = x.shape
        b = self.block
        t = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
        return t.reshape(n, c * b * b, h // b, w // b)

    def element(self, xs, idx):
        n, k, y, x = idx
        b = self.block
        channels = xs[0].shape[1]
        offset = k // channels
        return xs[0].at((n, k % channels, y * b + offset // b, x * b + offset % b))


# ------------------------------------------------------------------------------------------- ONNX

def _blocksize(ctx: ImportContext, node: OnnxNode) -> int:
    if len(ctx.shape(node.input(0))) != 4:
        raise Reject(f"the input must be an NCHW image (rank 4), got shape {list(ctx.shape(node.input(0)))}")
    if "blocksize" not in node.attrs or int(node.attr("blocksize")) < 1:
        raise Reject("it needs a positive blocksize")
    return int(node.attr("blocksize"))


@converter("DepthToSpace", attrs=("blocksize", "mode"))
def _depth_to_space(ctx: ImportContext, node: OnnxNode) -> None:
    mode = node.str_attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise Reject(f"mode {mode!r} is not supported (DCR and CRD are)")
    op = DepthToSpace(_blocksize(ctx, node), mode == "CRD")
    ctx.emit(op, [node.input(0)], node.outputs, node.name)


@converter("SpaceToDepth", attrs=("blocksize",))
def _space_to_depth(ctx: ImportContext, node: OnnxNode) -> None:
    ctx.emit(SpaceToDepth(_blocksize(ctx, node)), [node.input(0)], node.outputs, node.name)

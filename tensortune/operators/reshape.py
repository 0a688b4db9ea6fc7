"""Operators that keep every element and change only the shape or the storage: ``Reshape`` (ONNX Reshape, Flatten,
Squeeze, Unsqueeze), ``Identity`` (Identity, Dropout at inference, a Sum, Mean, Max or Min of one input) and
``Relayout`` (the same tensor in another layout, inserted by ``passes.plan_layout``). Where input and output lie in
memory alike, the output is the input's memory and no kernel runs (``is_alias``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..graph.errors import GraphError
from ..graph.ir import Graph, Layout, Node, TensorType
from ..graph.op import Op, Pattern, check_count
from ..target import Target
from .elementwise import elementwise_kernel
from .kernel import KernelArgs, KernelDef, lanes_of, map_kernel, read
from .onnx_convert import ImportContext, OnnxNode, Reject, axis, converter, ints


def _plain_in_and_out(g: Graph, node: Node) -> bool:
    return not g.values[node.inputs[0]].layout.blocked and not g.values[node.outputs[0]].layout.blocked


def copy_kernel(g: Graph, node: Node, target: Target) -> KernelDef:
    """Each element of the output from the same element of the input (in their layouts)."""
    lanes = lanes_of(target, g.values[node.outputs[0]].dtype, node)
    return elementwise_kernel(g, node, lanes, lambda xs: xs[0], "copy")


@dataclass(frozen=True, slots=True)
class Reshape(Op):
    """The same elements in row-major order, with another shape."""

    pattern = Pattern.INJECTIVE
    shape: tuple[int, ...]

    def infer(self, inputs):
        check_count(self, inputs, 1)
        if math.prod(self.shape) != inputs[0].size:
            raise GraphError(f"Reshape: cannot reshape {inputs[0].shape} ({inputs[0].size} elements) to {self.shape}")
        return (TensorType(self.shape, inputs[0].dtype),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        return x.reshape(self.shape)

    def is_alias(self, g: Graph, node: Node) -> bool:
        return _plain_in_and_out(g, node)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        """A reshape that must copy (a blocked input or output): the row-major position of each output element in
        the input."""
        a = KernelArgs(g)
        xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
        x = a.value(node.inputs[0], "in")

        def body(idx):
            flat = idx[0]
            for d, n in zip(idx[1:], out_v.shape[1:]):
                flat = flat * n + d
            src, rest = [], flat
            for n in reversed(xv.shape):
                src.append(rest % n)
                rest = rest // n
            return read(x, xv.layout, tuple(reversed(src)))

        return map_kernel(a, node, lanes_of(target, out_v.dtype, node), body, "reshape")


class _SameTensor(Op):
    """An operator whose output is its input, element for element (a copy where it cannot share the memory)."""

    __slots__ = ()
    pattern = Pattern.INJECTIVE

    def infer(self, inputs):
        check_count(self, inputs, 1)
        return (inputs[0],)

    def reference(self, x: np.ndarray) -> np.ndarray:
        return x

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        return copy_kernel(g, node, target)


@dataclass(frozen=True, slots=True)
class Identity(_SameTensor):
    """The input itself (Identity, Dropout at inference)."""

    def is_alias(self, g: Graph, node: Node) -> bool:
        return _plain_in_and_out(g, node)


@dataclass(frozen=True, slots=True)
class Relayout(_SameTensor):
    """The input stored in another layout (the output value's): the same logical tensor."""

    def is_alias(self, g: Graph, node: Node) -> bool:
        src, dst = g.values[node.inputs[0]], g.values[node.outputs[0]]
        return src.layout == dst.layout or same_memory_order(src.shape, src.layout, dst.layout)


def same_memory_order(shape: tuple[int, ...], a: Layout, b: Layout) -> bool:
    """Whether a tensor lies in memory identically in layouts ``a`` and ``b`` (1x1 images, one channel)."""
    return len(shape) == 4 and (shape[2] * shape[3] == 1 or shape[1] == 1 or a == b)


# ------------------------------------------------------------------------------------------- ONNX

def _reshape_to(ctx: ImportContext, node: OnnxNode, shape) -> None:
    ctx.emit(Reshape(tuple(int(d) for d in shape)), [node.input(0)], node.outputs[:1], node.name)


@converter("Reshape", attrs=("allowzero",), since=5)
def _reshape(ctx: ImportContext, node: OnnxNode) -> None:
    target = ctx.need_static(node, 1, "shape")
    src = ctx.shape(node.input(0))
    dims = ints(target)
    if not node.attr("allowzero", 0):
        dims = [src[i] if d == 0 else d for i, d in enumerate(dims)]
    if dims.count(-1) > 1:
        raise Reject(f"shape {dims} has more than one -1")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or math.prod(src) % known:
            raise Reject(f"cannot reshape {list(src)} to {dims}")
        dims[dims.index(-1)] = math.prod(src) // known
    _reshape_to(ctx, node, dims)


@converter("Flatten", attrs=("axis",))
def _flatten(ctx: ImportContext, node: OnnxNode) -> None:
    shape = ctx.shape(node.input(0))
    a = int(node.attr("axis", 1))
    a = a + len(shape) if a < 0 else a
    if not 0 <= a <= len(shape):
        raise Reject(f"axis {a} is out of range for rank {len(shape)}")
    _reshape_to(ctx, node, (math.prod(shape[:a]), math.prod(shape[a:])))


def _squeeze_like(ctx: ImportContext, node: OnnxNode, axes: list[int] | None, squeeze: bool) -> None:
    shape = list(ctx.shape(node.input(0)))
    if squeeze:
        drop = {i for i, d in enumerate(shape) if d == 1} if axes is None else {axis(a, len(shape)) for a in axes}
        if any(shape[a] != 1 for a in drop):
            raise Reject(f"cannot squeeze axes {sorted(drop)} of shape {shape}: not of size 1")
        _reshape_to(ctx, node, [d for i, d in enumerate(shape) if i not in drop])
        return
    if axes is None:
        raise Reject("Unsqueeze needs axes")
    rank = len(shape) + len(axes)
    norm = sorted(axis(a, rank) for a in axes)
    if len(set(norm)) != len(norm):
        raise Reject(f"repeated axes {axes}")
    for a in norm:
        shape.insert(a, 1)
    _reshape_to(ctx, node, shape)


@converter("Squeeze", attrs=("axes",), until=12)
def _squeeze_attribute(ctx: ImportContext, node: OnnxNode) -> None:
    axes = node.attr("axes")
    _squeeze_like(ctx, node, None if axes is None else [int(a) for a in axes], True)


@converter("Unsqueeze", attrs=("axes",), until=12)
def _unsqueeze_attribute(ctx: ImportContext, node: OnnxNode) -> None:
    axes = node.attr("axes")
    _squeeze_like(ctx, node, None if axes is None else [int(a) for a in axes], False)


def _axes_input(ctx: ImportContext, node: OnnxNode) -> list[int] | None:
    if "axes" in node.attrs:
        raise Reject("axes is an input from opset 13 on, not an attribute")
    axes = ctx.need_static(node, 1, "axes")
    return None if axes is None else ints(axes)


@converter("Squeeze", attrs=("axes",), since=13)
def _squeeze_input(ctx: ImportContext, node: OnnxNode) -> None:
    _squeeze_like(ctx, node, _axes_input(ctx, node), True)


@converter("Unsqueeze", attrs=("axes",), since=13)
def _unsqueeze_input(ctx: ImportContext, node: OnnxNode) -> None:
    _squeeze_like(ctx, node, _axes_input(ctx, node), False)


@converter("Identity")
def _identity(ctx: ImportContext, node: OnnxNode) -> None:
    ctx.emit(Identity(), [node.input(0)], node.outputs, node.name)


def _unread_mask(ctx: ImportContext, node: OnnxNode) -> None:
    """Rejects a Dropout whose mask output is read or is an output of the model (the opset-9 models of the ONNX
    model zoo declare one that nothing reads)."""
    mask = node.outputs[1] if len(node.outputs) > 1 else ""
    if mask and ctx.is_read(mask):
        raise Reject(f"its mask output '{mask}' is read; only a mask that nothing reads is supported at inference")


@converter("Dropout", attrs=("ratio", "is_test", "seed"), until=11)
def _dropout(ctx: ImportContext, node: OnnxNode) -> None:
    _unread_mask(ctx, node)
    ctx.emit(Identity(), [node.input(0)], node.outputs[:1], node.name)


@converter("Dropout", attrs=("ratio", "is_test", "seed"), since=12)
def _dropout_training_input(ctx: ImportContext, node: OnnxNode) -> None:
    _unread_mask(ctx, node)
    training = ctx.need_static(node, 2, "training_mode")
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        raise Reject("training_mode=true is not supported at inference")
    ctx.emit(Identity(), [node.input(0)], node.outputs[:1], node.name)

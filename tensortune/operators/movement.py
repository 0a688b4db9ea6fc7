"""Operators that move elements: ``Transpose``, ``Concat``, ``Slice`` (ONNX Slice and Split) and ``Pad``; each
output element is one input element (or the padding value), read in the input's layout."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import TensorType
from ..graph.op import LayoutRule, Pattern, check_count, check_ints
from .kernel import clamp
from .map_op import MapOp
from .onnx_convert import ImportContext, OnnxNode, Reject, axis, converter, ints


@dataclass(frozen=True, slots=True)
class Transpose(MapOp):
    pattern = Pattern.INJECTIVE
    name = "transpose"
    perm: tuple[int, ...]

    def infer(self, inputs):
        check_count(self, inputs, 1)
        shape = inputs[0].shape
        if sorted(self.perm) != list(range(len(shape))):
            raise GraphError(f"Transpose: perm {self.perm} is not a permutation of the {len(shape)} axes")
        return (TensorType(tuple(shape[p] for p in self.perm), inputs[0].dtype),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        return np.transpose(x, self.perm)

    def element(self, xs, idx):
        src = [None] * len(idx)
        for k, p in enumerate(self.perm):
            src[p] = idx[k]
        return xs[0].at(src)


@dataclass(frozen=True, slots=True)
class Concat(MapOp):
    pattern = Pattern.INJECTIVE
    layout_rule = LayoutRule.CONCAT
    name = "concat"
    axis: int

    def infer(self, inputs):
        check_count(self, inputs, 1, 1 << 30)
        first = inputs[0]
        if not 0 <= self.axis < len(first.shape):
            raise GraphError(f"Concat: axis {self.axis} is out of range for shape {first.shape}")
        for t in inputs[1:]:
            if t.dtype != first.dtype or len(t.shape) != len(first.shape) or any(
                    a != b for d, (a, b) in enumerate(zip(t.shape, first.shape)) if d != self.axis):
                raise GraphError(f"Concat: inputs {first} and {t} differ outside axis {self.axis}")
        shape = list(first.shape)
        shape[self.axis] = sum(t.shape[self.axis] for t in inputs)
        return (TensorType(tuple(shape), first.dtype),)

    def reference(self, *xs: np.ndarray) -> np.ndarray:
        return np.concatenate(xs, axis=self.axis)

    def absorbs(self, output_shape) -> bool:
        return self.axis != 1 or len(output_shape) != 4  # a channel concatenation of images keeps its layout rule

    def element(self, xs, idx):
        ax = self.axis
        offsets = np.cumsum([0] + [x.shape[ax] for x in xs])
        val = None
        for k in reversed(range(len(xs))):
            src = list(idx)
            src[ax] = clamp(idx[ax] - int(offsets[k]), xs[k].shape[ax] - 1)
            this = xs[k].at(src)
            val = this if val is None else te.select(idx[ax] < int(offsets[k + 1]), this, val)
        return val


@dataclass(frozen=True, slots=True)
class Slice(MapOp):
    """``out[i] = x[start + i * step]`` along each axis (every axis given; steps may be negative)."""

    pattern = Pattern.INJECTIVE
    name = "slice"
    starts: tuple[int, ...]
    steps: tuple[int, ...]
    sizes: tuple[int, ...]

    def infer(self, inputs):
        check_count(self, inputs, 1)
        shape = inputs[0].shape
        if not len(self.starts) == len(self.steps) == len(self.sizes) == len(shape):
            raise GraphError(f"Slice: starts, steps and sizes need one entry per axis of {shape}")
        for d, (start, step, size) in enumerate(zip(self.starts, self.steps, self.sizes)):
            last = start + (size - 1) * step
            if step == 0 or size < 0 or (size and not (0 <= start < shape[d] and 0 <= last < shape[d])):
                raise GraphError(f"Slice: axis {d} of {shape}: start {start}, step {step}, size {size} leave the input")
        return (TensorType(self.sizes, inputs[0].dtype),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        index = []
        for start, step, size in zip(self.starts, self.steps, self.sizes):
            stop = start + size * step
            index.append(slice(start, stop if stop >= 0 else None, step))
        return x[tuple(index)]

    def element(self, xs, idx):
        return xs[0].at([i * st + s0 if st != 1 else i + s0 for i, s0, st in zip(idx, self.starts, self.steps)])


class PadMode(Enum):
    CONSTANT = "constant"
    REFLECT = "reflect"
    EDGE = "edge"


@dataclass(frozen=True, slots=True)
class Pad(MapOp):
    """Pad every axis by ``pads`` (all begins, then all ends; non-negative)."""

    pattern = Pattern.INJECTIVE
    name = "pad"
    pads: tuple[int, ...]
    mode: PadMode = PadMode.CONSTANT
    value: float = 0.0

    def infer(self, inputs):
        check_count(self, inputs, 1)
        shape = inputs[0].shape
        r = len(shape)
        check_ints(self, "pads", self.pads, 2 * r, minimum=0)
        if self.mode is PadMode.REFLECT and any(p >= d for p, d in zip(self.pads, shape * 2) if p):
            raise GraphError(f"Pad: reflect padding {self.pads} must be smaller than the padded axes of {shape}")
        if self.mode is PadMode.EDGE and any(p and d == 0 for p, d in zip(self.pads, shape * 2)):
            raise GraphError(f"Pad: edge padding of an empty axis of {shape}")
        return (TensorType(tuple(d + self.pads[i] + self.pads[i + r] for i, d in enumerate(shape)),
                           inputs[0].dtype),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        r = x.ndim
        widths = [(self.pads[i], self.pads[i + r]) for i in range(r)]
        if self.mode is PadMode.CONSTANT:
            return np.pad(x, widths, constant_values=np.asarray(self.value, x.dtype))
        return np.pad(x, widths, mode=self.mode.value)

    def reads_once(self, input_shape, output_shape) -> bool:
        return self.mode is PadMode.CONSTANT  # edge and reflect padding read elements again

    def element(self, xs, idx):
        x = xs[0]
        r = len(x.shape)
        src, inside = [], []
        for d, i in enumerate(idx):
            j, n = i - self.pads[d], x.shape[d]
            if self.mode is PadMode.REFLECT:
                j = (n - 1) - te.abs_((n - 1) - te.abs_(j)) if n > 1 else te.const(0, "int32")
            elif self.mode is PadMode.EDGE or (self.pads[d] or self.pads[d + r]):
                inside += [j >= 0, j < n] if self.mode is PadMode.CONSTANT else []
                j = clamp(j, n - 1)
            src.append(j)
        val = x.at(src)
        if inside:
            val = te.select(te.logical_and(*inside), val, te.const(self.value, x.dtype))
        return val


# ------------------------------------------------------------------------------------------- ONNX

@converter("Transpose", attrs=("perm",))
def _transpose(ctx: ImportContext, node: OnnxNode) -> None:
    rank = len(ctx.shape(node.input(0)))
    perm = tuple(int(p) for p in node.attr("perm", range(rank - 1, -1, -1)))
    ctx.emit(Transpose(perm), [node.input(0)], node.outputs, node.name)


@converter("Concat", attrs=("axis",))
def _concat(ctx: ImportContext, node: OnnxNode) -> None:
    inputs = [i for i in node.inputs if i]
    rank = len(ctx.shape(inputs[0]))
    if "axis" not in node.attrs:
        raise Reject("Concat needs an axis")
    ctx.emit(Concat(axis(int(node.attr("axis")), rank)), inputs, node.outputs, node.name)


def _split(ctx: ImportContext, node: OnnxNode, sizes) -> None:
    x = node.input(0)
    shape = ctx.shape(x)
    ax = axis(int(node.attr("axis", 0)), len(shape))
    parts = len(node.outputs)
    total = shape[ax]
    if sizes is None:
        chunk = -(-total // parts)
        sizes = [min(chunk, total - k * chunk) for k in range(parts)]
    sizes = ints(sizes)
    if len(sizes) != parts or sum(sizes) != total or any(s < 1 for s in sizes):
        raise Reject(f"split sizes {sizes} do not divide axis {ax} ({total}) into {parts} non-empty parts")
    start = 0
    for out, size in zip(node.outputs, sizes):
        starts = [0] * len(shape)
        starts[ax] = start
        dims = list(shape)
        dims[ax] = size
        if out:
            ctx.emit(Slice(tuple(starts), (1,) * len(shape), tuple(dims)), [x], [out], f"{node.name}_{out}")
        start += size


@converter("Split", attrs=("axis", "split", "num_outputs"), until=12)
def _split_attribute(ctx: ImportContext, node: OnnxNode) -> None:
    _split(ctx, node, node.attr("split"))


@converter("Split", attrs=("axis", "split", "num_outputs"), since=13)
def _split_input(ctx: ImportContext, node: OnnxNode) -> None:
    _split(ctx, node, ctx.need_static(node, 1, "split"))


def _slice(ctx: ImportContext, node: OnnxNode, starts, ends, axes, steps) -> None:
    x = node.input(0)
    shape = ctx.shape(x)
    starts, ends = ints(starts), ints(ends)
    axes = list(range(len(starts))) if axes is None else [axis(a, len(shape)) for a in ints(axes)]
    steps = [1] * len(starts) if steps is None else ints(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise Reject("starts, ends, axes and steps differ in length")
    out_starts, out_steps, sizes = [0] * len(shape), [1] * len(shape), list(shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise Reject("a slice step of 0")
        dim = shape[a]
        s, e = s + dim if s < 0 else s, e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        size = max(0, -(-(e - s) // st))
        if size == 0:
            raise Reject(f"an empty slice of axis {a} (tensors without elements are not supported)")
        out_starts[a], out_steps[a], sizes[a] = s, st, size
    ctx.emit(Slice(tuple(out_starts), tuple(out_steps), tuple(sizes)), [x], node.outputs, node.name)


@converter("Slice", attrs=("starts", "ends", "axes"), until=9)
def _slice_attributes(ctx: ImportContext, node: OnnxNode) -> None:
    _slice(ctx, node, node.attr("starts"), node.attr("ends"), node.attr("axes"), None)


@converter("Slice", attrs=("starts", "ends", "axes"), since=10)
def _slice_inputs(ctx: ImportContext, node: OnnxNode) -> None:
    _slice(ctx, node, ctx.need_static(node, 1, "starts"), ctx.need_static(node, 2, "ends"),
           ctx.need_static(node, 3, "axes"), ctx.need_static(node, 4, "steps"))


_PAD_MODES = {"constant": PadMode.CONSTANT, "reflect": PadMode.REFLECT, "edge": PadMode.EDGE}


def _pad(ctx: ImportContext, node: OnnxNode, pads: list[int], value: float) -> None:
    mode = node.str_attr("mode", "constant")
    if mode not in _PAD_MODES:
        raise Reject(f"pad mode {mode!r} is not supported (constant, reflect and edge are)")
    rank = len(ctx.shape(node.input(0)))
    if len(pads) != 2 * rank:
        raise Reject(f"pads {pads} need {2 * rank} entries for rank {rank}")
    if any(p < 0 for p in pads):
        raise Reject(f"negative pads {pads} (cropping) are not supported")
    ctx.emit(Pad(tuple(pads), _PAD_MODES[mode], value), [node.input(0)], node.outputs, node.name)


@converter("Pad", attrs=("mode", "pads", "value"), until=10)
def _pad_attributes(ctx: ImportContext, node: OnnxNode) -> None:
    _pad(ctx, node, list(node.attr("pads")), float(node.attr("value", 0.0)))


@converter("Pad", attrs=("mode", "pads", "value"), since=11)
def _pad_inputs(ctx: ImportContext, node: OnnxNode) -> None:
    rank = len(ctx.shape(node.input(0)))
    pads = ints(ctx.need_static(node, 1, "pads"))
    v = ctx.need_static(node, 2, "constant_value")
    value = float(np.asarray(v).reshape(-1)[0]) if v is not None and np.asarray(v).size else 0.0
    axes = ctx.need_static(node, 3, "axes")
    if axes is not None:
        axes = [axis(a, rank) for a in ints(axes)]
        full = [0] * (2 * rank)
        for k, a in enumerate(axes):
            full[a], full[a + rank] = pads[k], pads[k + len(axes)]
        pads = full
    _pad(ctx, node, pads, value)

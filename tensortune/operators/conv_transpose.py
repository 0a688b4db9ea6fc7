"""``ConvTranspose`` as a convolution of the input by one kernel per output phase (sub-pixel convolution), never by
the zero-inserted input.

Along an axis with stride ``s`` and dilation ``d``, output position ``u = i * s + k * d`` (before the crop of
``pads``) receives input ``i`` through tap ``k``. Write ``u = b * s + q``: the taps with ``k * d % s == q`` feed
phase ``q`` of block ``b`` from input ``b - k * d // s``. So every phase is an ordinary stride-1 correlation of the
input with the taps of that phase (flipped), and all phases are one ``Conv`` whose output channels are
``[out channel, phase]``: the tuned convolution templates run it, with its bias. ``PhasesToSpace`` then moves each
phase to its place in the output and crops the padding, one element per element (a ``MapOp``, fused with the
elementwise operators that follow). A phase with fewer taps than others reads zero weights; the work is that of
the transposed convolution itself when ``(K - 1) * d + 1`` is a multiple of ``s`` (the usual ``K = 2s`` of
generators and decoders). Stride 1 keeps the dilation in the convolution.

1-D transposed convolutions run as 2-D ones of one row; 3-D ones as a ``Conv3d`` of the phases.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import prod

import numpy as np

from ..graph.errors import GraphError
from ..graph.ir import TensorType
from ..graph.op import Pattern, check_count, check_ints
from .conv import Conv, Conv3d
from .map_op import MapOp
from .movement import Slice
from .onnx_convert import ImportContext, OnnxNode, Reject, converter, ints
from .reshape import Reshape


@dataclass(frozen=True, slots=True)
class PhasesToSpace(MapOp):
    """``[N, C * S, J0, J1..] -> [N, C, sizes..]`` with ``S = prod(strides)``: output ``o`` along axis ``a`` is
    phase ``(o + offsets[a]) % strides[a]`` of block ``(o + offsets[a]) // strides[a]`` (channels ``[c, phase]``,
    the phase of the last axis fastest)."""

    pattern = Pattern.INJECTIVE
    name = "phases_to_space"
    strides: tuple[int, ...]
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]

    def infer(self, inputs):
        check_count(self, inputs, 1)
        x = inputs[0]
        rank = len(self.strides)
        check_ints(self, "strides", self.strides, rank)
        check_ints(self, "sizes", self.sizes, rank)
        check_ints(self, "offsets", self.offsets, rank, minimum=0)
        phases = prod(self.strides)
        if len(x.shape) != rank + 2 or x.shape[1] % phases:
            raise GraphError(f"PhasesToSpace: the input {x.shape} must be [N, C * {phases}] and {rank} spatial axes")
        for a, (s, off, size) in enumerate(zip(self.strides, self.offsets, self.sizes)):
            if off >= s or (off + size - 1) // s >= x.shape[2 + a]:
                raise GraphError(f"PhasesToSpace: axis {a}: {size} outputs at offset {off} need more than the "
                                 f"input's {x.shape[2 + a]} blocks of {s}")
        return (TensorType((x.shape[0], x.shape[1] // phases, *self.sizes), x.dtype),)

    def _source(self, idx, channels_in: int, mod, div):
        n, c, *pos = idx
        phase, blocks = 0, []
        for o, s, off in zip(pos, self.strides, self.offsets):
            u = o + off
            phase = phase * s + (mod(u, s) if s > 1 else 0)
            blocks.append(div(u, s) if s > 1 else u)
        return (n, c * prod(self.strides) + phase, *blocks)

    def reference(self, x: np.ndarray) -> np.ndarray:
        grid = np.indices((x.shape[0], x.shape[1] // prod(self.strides), *self.sizes), sparse=True)
        return x[self._source(tuple(grid), x.shape[1], np.mod, np.floor_divide)]

    def element(self, xs, idx):
        return xs[0].at(self._source(idx, xs[0].shape[1], lambda u, s: u % s, lambda u, s: u // s))


@dataclass(frozen=True)
class _Axis:
    """One spatial axis of a transposed convolution, as the phase convolution computes it."""

    stride: int
    dilation: int
    kernel: int
    size: int  # input extent
    pad_begin: int
    out: int

    @property
    def reach(self) -> int:
        """Input rows back from a block that its phase's taps reach."""
        return (self.kernel - 1) * self.dilation // max(1, self.stride)

    @property
    def width(self) -> int:
        """The phase kernel's taps along the axis (stride 1 keeps the ONNX taps, dilated by the convolution)."""
        return self.kernel if self.stride == 1 else self.reach + 1

    @property
    def first_block(self) -> int:
        return self.pad_begin // self.stride

    @property
    def blocks(self) -> int:
        return -(-(self.pad_begin + self.out) // self.stride) - self.first_block

    def taps(self) -> list[tuple[int, int, int]]:
        """``(tap k, phase q, position in the phase kernel)`` of each tap of the ONNX kernel."""
        if self.stride == 1:
            return [(k, 0, self.kernel - 1 - k) for k in range(self.kernel)]
        return [(k, k * self.dilation % self.stride, self.reach - k * self.dilation // self.stride)
                for k in range(self.kernel)]

    def input_window(self) -> tuple[int, int, int, int]:
        """``(first input row read, rows read, pad before, pad after)`` of the phase convolution's input."""
        begin = self.first_block - self.reach  # the input row the first block's first tap reads
        end = self.first_block + self.blocks  # one past the last row any kept block reads
        lo, hi = max(begin, 0), min(end, self.size)  # lo < hi: the output overlaps the natural extent
        return lo, hi - lo, lo - begin, end - hi


def _axes(node: OnnxNode, x_shape, kernel) -> list[_Axis]:
    rank = len(kernel)
    strides = ints(node.attr("strides", (1,) * rank))
    dilations = ints(node.attr("dilations", (1,) * rank))
    out_pad = ints(node.attr("output_padding", (0,) * rank))
    if not len(strides) == len(dilations) == len(out_pad) == rank:
        raise Reject(f"strides, dilations and output_padding need {rank} entries for a {rank}-D kernel")
    if min(strides + dilations) < 1 or min(out_pad) < 0:
        raise Reject(f"strides {strides} and dilations {dilations} must be positive, output_padding {out_pad} not "
                     "negative")
    sizes = list(x_shape[2:])
    full = [s * (n - 1) + p + (k - 1) * d + 1 for s, n, p, k, d in zip(strides, sizes, out_pad, kernel, dilations)]
    auto = node.str_attr("auto_pad", "NOTSET")
    if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise Reject(f"auto_pad {auto!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    shape = node.attr("output_shape")
    if shape is not None:
        out = ints(shape)[-rank:]
        if len(out) != rank:
            raise Reject(f"output_shape {ints(shape)} needs {rank} spatial sizes")
        if any(o > f + s - 1 for o, f, s in zip(out, full, strides)):
            raise Reject(f"output_shape {out} is larger than the input can give ({[f + s - 1 for f, s in zip(full, strides)]}"
                         " at most, as onnxruntime checks)")
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [min(n * s, f) for n, s, f in zip(sizes, strides, full)]  # onnxruntime never pads a SAME output
    if shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        # the cropped total, split as onnxruntime splits it; outputs beyond the natural extent are at the end
        total = [max(f - o, 0) for f, o in zip(full, out)]
        begins = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
    else:
        pads = [0] * (2 * rank) if auto == "VALID" else ints(node.attr("pads", (0,) * (2 * rank)))
        if len(pads) != 2 * rank or min(pads) < 0:
            raise Reject(f"pads {pads} must be {2 * rank} non-negative integers")
        out = [f - pads[a] - pads[a + rank] for a, f in enumerate(full)]
        begins = pads[:rank]
    if min(out) < 1:
        raise Reject(f"the output would have spatial sizes {out}")
    return [_Axis(*a) for a in zip(strides, dilations, kernel, sizes, begins, out)]


def phase_weight(w: np.ndarray, axes: list[_Axis], groups: int) -> np.ndarray:
    """The ``Conv`` weight ``[O * S, C / groups, width..]`` of ONNX weight ``w`` (``[C, O / groups, K..]``)."""
    c, og = w.shape[:2]
    cg = c // groups
    phases = [max(1, a.stride) for a in axes]
    out = np.zeros((groups, og, *phases, cg, *(a.width for a in axes)), w.dtype)
    src = w.reshape(groups, cg, og, *w.shape[2:])
    for taps in itertools.product(*(a.taps() for a in axes)):
        k = tuple(t[0] for t in taps)
        q = tuple(t[1] for t in taps)
        j = tuple(t[2] for t in taps)
        out[(slice(None), slice(None), *q, slice(None), *j)] = src[(slice(None), slice(None), slice(None), *k)] \
            .transpose(0, 2, 1)
    return out.reshape(groups * og * prod(phases), cg, *(a.width for a in axes))


@converter("ConvTranspose", attrs=("auto_pad", "dilations", "group", "kernel_shape", "output_padding",
                                   "output_shape", "pads", "strides"))
def _conv_transpose(ctx: ImportContext, node: OnnxNode) -> None:
    x, w_name, b_name = node.input(0), node.input(1), node.input(2)
    w = ctx.static(w_name)
    if w is None:
        raise Reject("its weight must be a constant (weights computed at run time are not supported)")
    bias = ctx.static(b_name) if b_name else None
    if b_name and bias is None:
        raise Reject("its bias must be a constant")
    x_shape = ctx.shape(x)
    kernel = tuple(ints(node.attr("kernel_shape", w.shape[2:])))
    if kernel != tuple(w.shape[2:]):
        raise Reject(f"kernel_shape {list(kernel)} differs from the weight's {list(w.shape[2:])}")
    if len(kernel) not in (1, 2, 3) or len(x_shape) != len(kernel) + 2:
        raise Reject(f"only 1-D, 2-D and 3-D transposed convolutions on NCW, NCHW and NCDHW tensors are supported "
                     f"(input shape {list(x_shape)}, kernel {list(kernel)})")
    groups = int(node.attr("group", 1))
    if groups < 1 or x_shape[1] != w.shape[0] or w.shape[0] % groups:
        raise Reject(f"{x_shape[1]} input channels in {groups} group(s) do not match the weight {list(w.shape)}")
    axes = _axes(node, x_shape, kernel)
    if len(axes) == 1:  # one row: a 2-D transposed convolution of kernel 1 along H
        axes = [_Axis(1, 1, 1, 1, 0, 1), *axes]
        (x,) = ctx.emit(Reshape((*x_shape[:2], 1, x_shape[2])), [x], None, f"{node.name}_2d")
        w = w[:, :, None]
    emit_phase_conv(ctx, node, x, w, bias, axes, groups)


def emit_phase_conv(ctx: ImportContext, node: OnnxNode, x: str, w: np.ndarray, bias: np.ndarray | None,
                    axes: list[_Axis], groups: int) -> None:
    """Emit the crop of the input, the phase convolution and ``PhasesToSpace`` of a 2-D or 3-D transposed
    convolution."""
    x_shape = ctx.shape(x)
    windows = [a.input_window() for a in axes]
    if any(first or rows != a.size for (first, rows, _, _), a in zip(windows, axes)):
        starts = (0, 0, *(first for first, _, _, _ in windows))
        sizes = (*x_shape[:2], *(rows for _, rows, _, _ in windows))
        (x,) = ctx.emit(Slice(starts, (1,) * len(starts), sizes), [x], None, f"{node.name}_rows")
    weight = phase_weight(w, axes, groups)
    phases = weight.shape[0] // (w.shape[1] * groups)
    inputs = [x, ctx.constant(weight, f"{node.name}_phase_weight")]
    if bias is not None:
        inputs.append(ctx.constant(np.repeat(bias.astype(w.dtype), phases), f"{node.name}_phase_bias"))
    pads = tuple(p[2] for p in windows) + tuple(p[3] for p in windows)
    dilations = tuple(a.dilation if a.stride == 1 else 1 for a in axes)
    conv_op = Conv if len(axes) == 2 else Conv3d
    conv = conv_op((1,) * len(axes), pads, dilations, groups, has_bias=bias is not None)  # type: ignore[arg-type]
    (y,) = ctx.emit(conv, inputs, None, f"{node.name}_phases")
    strides = tuple(a.stride for a in axes)
    offsets = tuple(a.pad_begin - a.first_block * a.stride for a in axes)
    sizes = tuple(a.out for a in axes)
    lifted = len(ctx.shape(node.inputs[0])) == 3
    out_names = None if lifted else node.outputs[:1]
    (out,) = ctx.emit(PhasesToSpace(strides, offsets, sizes), [y], out_names, node.name)
    if lifted:
        s = ctx.shape(out)
        ctx.emit(Reshape((s[0], s[1], s[3])), [out], node.outputs[:1], f"{node.name}_1d")

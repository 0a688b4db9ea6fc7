"""Resizing (ONNX Resize, opsets 10 to 19, and Upsample, opsets 7 to 9): nearest, linear and cubic interpolation
along any axes.

Each resized axis maps every output index to the input indices it reads and their weights, a table per axis
computed at import (``axis_table``) in float32 the way onnxruntime computes it, so that a nearest resize picks the
same neighbour at every tie: one index in nearest mode, two indices and weights in linear mode, four in cubic mode,
and with ``antialias`` (opset 18 on) a window that widens with the downsampling. ``Resize`` reads the tables as
constant inputs; its output element is the weighted sum, axis after axis, of the input elements they pick (an
antialiased resize is one node per axis, so that a node sums one window's taps, not the product of every axis's).
It is an element-by-element operator (``MapOp``; after TVM, whose resize is injective too): its kernel is one pass
over the output, it joins the elementwise operator that reads it, and where the channels are not resized an image
is resized in the blocked layout it arrives in (vectors of channels). With ``tf_crop_and_resize`` an output whose
input coordinate lies outside the input is ``extrapolation_value`` (its tables hold -1 there).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import TensorType
from ..graph.op import LayoutRule, Pattern, check_count, check_float, is_float
from .map_op import MapOp
from .onnx_convert import ImportContext, OnnxNode, Reject, axis, converter, ints
from .reshape import Identity


class ResizeMode(Enum):
    """How output elements are interpolated: taps per axis 1 (nearest), 2 (linear), 4 (cubic)."""

    NEAREST = "nearest"
    LINEAR = "linear"
    CUBIC = "cubic"


class Coordinates(Enum):
    """ONNX's ``coordinate_transformation_mode``: the input coordinate of an output index."""

    HALF_PIXEL = "half_pixel"
    HALF_PIXEL_SYMMETRIC = "half_pixel_symmetric"
    PYTORCH_HALF_PIXEL = "pytorch_half_pixel"
    ALIGN_CORNERS = "align_corners"
    ASYMMETRIC = "asymmetric"
    TF_HALF_PIXEL_FOR_NN = "tf_half_pixel_for_nn"
    TF_CROP_AND_RESIZE = "tf_crop_and_resize"


class Rounding(Enum):
    """ONNX's ``nearest_mode``; ``SIMPLE``: before opset 11 (Upsample, Resize-10), truncation, or the ceiling when
    downsampling."""

    ROUND_PREFER_FLOOR = "round_prefer_floor"
    ROUND_PREFER_CEIL = "round_prefer_ceil"
    FLOOR = "floor"
    CEIL = "ceil"
    SIMPLE = "simple"


@dataclass(frozen=True)
class Interpolation:
    """How a node interpolates (ONNX's attributes; ``exclude_outside`` changes cubic weights only: linear and
    nearest interpolation read no location outside the input)."""

    mode: ResizeMode = ResizeMode.NEAREST
    coordinates: Coordinates = Coordinates.HALF_PIXEL
    rounding: Rounding = Rounding.ROUND_PREFER_FLOOR
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    antialias: bool = False  # linear and cubic: the filter stretched by 1 / scale when downsampling

    @property
    def filters(self) -> bool:
        """Whether each axis is resized by an antialiasing filter, whose window may hold many taps."""
        return self.antialias and self.mode is not ResizeMode.NEAREST

    @property
    def extrapolates(self) -> bool:
        return self.coordinates is Coordinates.TF_CROP_AND_RESIZE


@dataclass(frozen=True)
class AxisResize:
    """One resized axis: its input and output lengths, the scale of its coordinate transformation (float32, not
    always ``length_out / length_in``) and its region of interest (``tf_crop_and_resize``)."""

    length_in: int
    length_out: int
    scale: float
    roi: tuple[float, float] = (0.0, 1.0)


# ------------------------------------------------------------------------------------------- the tables

_F = np.float32


def input_coordinates(ax: AxisResize, coordinates: Coordinates) -> np.ndarray:
    """The input coordinate of each output index (float32; computed as onnxruntime's ``upsamplebase.h`` does)."""
    x = np.arange(ax.length_out, dtype=_F)
    s, length_in, length_out = _F(ax.scale), _F(ax.length_in), _F(ax.length_out)
    half, one = _F(0.5), _F(1)
    if coordinates is Coordinates.ASYMMETRIC:
        return x / s
    if coordinates is Coordinates.TF_HALF_PIXEL_FOR_NN:
        return (x + half) / s
    if coordinates is Coordinates.PYTORCH_HALF_PIXEL:
        return (x + half) / s - half if ax.length_out > 1 else np.zeros_like(x)
    if coordinates is Coordinates.ALIGN_CORNERS:
        return x * (length_in - one) / (length_out - one) if ax.length_out > 1 else np.zeros_like(x)
    if coordinates is Coordinates.TF_CROP_AND_RESIZE:
        start, end = _F(ax.roi[0]), _F(ax.roi[1])
        if ax.length_out > 1:
            return start * (length_in - one) + x * (end - start) * (length_in - one) / (length_out - one)
        return np.full_like(x, _F(0.5 * float(start + end) * float(length_in - one)))
    if coordinates is Coordinates.HALF_PIXEL_SYMMETRIC:
        adjustment = length_out / (s * length_in)
        offset = length_in / _F(2) * (one - adjustment)
        return (float(offset) + (x.astype(np.float64) + 0.5) / float(s) - 0.5).astype(_F)
    return (x + half) / s - half


#: a coordinate this close to a half is a tie (onnxruntime 1.32's rule: its float32 coordinates of exact halves,
#: such as ``4 / (8/7)``, land a rounding error away from them)
TIE = 1e-6


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C's ``round`` (halves away from zero), exact for float32 ``x`` (computed in float64)."""
    x64 = x.astype(np.float64)
    return np.where(x64 >= 0, np.floor(x64 + 0.5), -np.floor(0.5 - x64))


def _nearest(x: np.ndarray, rounding: Rounding, scale: float) -> np.ndarray:
    if rounding is Rounding.FLOOR:
        return np.floor(x)
    if rounding is Rounding.CEIL:
        return np.ceil(x)
    if rounding is Rounding.SIMPLE:
        return np.ceil(x) if scale < 1 else np.trunc(x)
    tie = np.abs((x - np.floor(x)).astype(np.float64) - 0.5) <= TIE
    return np.where(tie, np.floor(x) if rounding is Rounding.ROUND_PREFER_FLOOR else np.ceil(x), _round_half_away(x))


def _cubic_coefficients(s: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution weights of the four neighbours of fractional position ``s`` (float32)."""
    a, s = _F(a), np.abs(s)
    one, two = _F(1), _F(2)

    def outer(d):  # |d| in [1, 2]
        return ((a * d - _F(5) * a) * d + _F(8) * a) * d - _F(4) * a

    def inner(d):  # |d| in [0, 1]
        return ((a + two) * d - (a + _F(3))) * d * d + one

    return np.stack([outer(s + one), inner(s), inner(one - s), outer(two - s)], axis=1)


def _filter_table(ax: AxisResize, how: Interpolation, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Antialiasing (onnxruntime's ``upsample_aa``, after Pillow): a triangle (linear) or cubic filter of support
    2 or 4 input elements, stretched by ``1 / scale`` when downsampling, centred on each output's coordinate; the
    weights of taps outside the input fold onto the edge taps (or, with ``exclude_outside``, drop), then sum to 1."""
    a, one = _F(how.cubic_coeff_a), _F(1)
    cubic = how.mode is ResizeMode.CUBIC
    stretch = one / _F(ax.scale)
    half = _F(2 if cubic else 1) * (stretch if stretch >= 1 else one)
    inv = one / stretch if stretch >= 1 else one
    window = int(math.ceil(half)) * 2 + 1

    def response(d: np.ndarray) -> np.ndarray:
        d = np.abs(d)
        if not cubic:
            return np.where(d < 1, one - d, _F(0))
        near = ((a + _F(2)) * d - (a + _F(3))) * d * d + one
        far = (((d - _F(5)) * d + _F(8)) * d - _F(4)) * a
        return np.where(d < 1, near, np.where(d < 2, far, _F(0)))

    index = np.zeros((ax.length_out, window), np.int64)
    weight = np.zeros((ax.length_out, window), _F)
    for i, centre in enumerate(x + _F(0.5)):
        lo, hi = int(np.floor(float(centre - half) + 0.5)), int(np.floor(float(centre + half) + 0.5))
        lo_in, hi_in = max(lo, 0), min(hi, ax.length_in)
        if how.exclude_outside:
            lo, hi = lo_in, hi_in
        taps = np.arange(lo, hi)
        w = response((taps.astype(_F) - centre + _F(0.5)) * inv)
        total = w.sum(dtype=_F)
        inside = (taps >= 0) & (taps < ax.length_in)
        if not inside.any():
            continue
        kept = w[inside]
        kept[0] += w[taps < 0].sum(dtype=_F)
        kept[-1] += w[taps >= ax.length_in].sum(dtype=_F)
        n = kept.size
        index[i, :n], index[i, n:] = np.arange(lo_in, hi_in), hi_in - 1
        weight[i, :n] = kept / total if total != 0 else kept
    return index, weight


def axis_table(ax: AxisResize, how: Interpolation) -> tuple[np.ndarray, np.ndarray | None]:
    """The input indices (int32, ``[length_out, taps]``) each output index reads, and their weights (float32, the
    same shape; None in nearest mode). Rows of an output outside the input (``tf_crop_and_resize``) hold -1."""
    x = input_coordinates(ax, how.coordinates)
    last = ax.length_in - 1
    if how.filters:
        index, weight = _filter_table(ax, how, x)
    elif how.mode is ResizeMode.NEAREST:
        index = np.clip(_nearest(x, how.rounding, ax.scale), 0, last)[:, None]
        weight = None
    elif how.mode is ResizeMode.LINEAR:
        xc = np.clip(x, _F(0), _F(last))
        lo = np.minimum(xc.astype(np.int64), last)
        hi = np.minimum(lo + 1, last)
        same = lo == hi
        d_lo, d_hi = np.abs(xc - lo.astype(_F)), np.abs(xc - hi.astype(_F))
        index = np.stack([lo, hi], axis=1)
        weight = np.stack([np.where(same, _F(0.5), d_hi), np.where(same, _F(0.5), d_lo)], axis=1)
    else:
        base = np.floor(x)
        weight = _cubic_coefficients(x - base, how.cubic_coeff_a)
        taps = base.astype(np.int64)[:, None] + np.arange(-1, 3)
        if how.exclude_outside:
            weight = np.where((taps < 0) | (taps > last), _F(0), weight)
            total = weight.sum(axis=1, keepdims=True, dtype=_F)
            weight = weight / np.where(total == 0, _F(1), total)  # none inside: extrapolated, or far outside
        index = np.clip(taps, 0, last)
    if how.extrapolates:
        index = np.where(((x < 0) | (x > _F(last)))[:, None], -1, index)
    return index.astype(np.int32), None if weight is None else weight.astype(_F)


# ------------------------------------------------------------------------------------------- the operator

@dataclass(frozen=True, slots=True)
class Resize(MapOp):
    """Resize ``axes`` of the first input by tables, the next inputs: per axis, in order, the input indices each
    output index reads (int32, ``[length_out, taps]``) and, unless ``mode`` is nearest, their weights (float32, the
    same shape). With ``extrapolation``, an output whose index row holds -1 on some axis is that value."""

    pattern = Pattern.INJECTIVE
    name = "resize"
    axes: tuple[int, ...]
    mode: ResizeMode = ResizeMode.NEAREST
    extrapolation: float | None = None

    def __post_init__(self) -> None:
        if not self.axes or len(set(self.axes)) != len(self.axes) or min(self.axes) < 0:
            raise GraphError(f"Resize: axes must be distinct non-negative axes, got {self.axes!r}")

    @property
    def layout_rule(self) -> LayoutRule:
        """Where channels (axis 1) are not resized, an image is resized in the layout it arrives in."""
        return LayoutRule.PLAIN if 1 in self.axes else LayoutRule.WINDOW

    @property
    def _per_axis(self) -> int:
        return 1 if self.mode is ResizeMode.NEAREST else 2

    def _tables(self, tables):
        """Per axis: its index table and its weight table (None in nearest mode)."""
        k = self._per_axis
        return [(tables[i * k], tables[i * k + 1] if k == 2 else None) for i in range(len(self.axes))]

    def infer(self, inputs):
        check_count(self, inputs, 1 + self._per_axis * len(self.axes))
        x = inputs[0]
        if self.mode is not ResizeMode.NEAREST:
            check_float(self, x, "the input of a linear or cubic resize")
        shape = list(x.shape)
        for a, (index, weight) in zip(self.axes, self._tables(inputs[1:])):
            if a >= len(shape):
                raise GraphError(f"Resize: axis {a} is out of range for shape {x.shape}")
            if len(index.shape) != 2 or index.dtype != "int32" or (weight is not None and (
                    weight.shape != index.shape or weight.dtype != "float32")):
                raise GraphError(f"Resize: the tables of axis {a} must be int32 indices and float32 weights of one "
                                 f"shape [length, taps], got {index}" + (f" and {weight}" if weight else ""))
            shape[a] = index.shape[0]
        return (TensorType(tuple(shape), x.dtype),)

    def reference(self, x: np.ndarray, *tables: np.ndarray) -> np.ndarray:
        y = x if self.mode is ResizeMode.NEAREST else x.astype(np.float64)
        inside = True
        for a, (index, weight) in zip(self.axes, self._tables(tables)):
            along = [1] * x.ndim
            along[a] = -1
            safe = np.maximum(index, 0)
            if weight is None:
                y = np.take(y, safe[:, 0], axis=a)
            else:
                y = sum(np.take(y, safe[:, t], axis=a) * weight[:, t].reshape(along) for t in range(index.shape[1]))
            inside = inside & (index[:, 0] >= 0).reshape(along)
        if self.extrapolation is not None:
            y = np.where(inside, y, self.extrapolation)
        return np.asarray(y).astype(x.dtype)

    def reads_once(self, input_shape, output_shape) -> bool:
        return False  # upsampling reads elements again, interpolation reads each element for several outputs

    def element(self, xs, idx):
        x, tables = xs[0], self._tables(xs[1:])
        acc = "float64" if x.dtype == "float64" else "float32"
        zero = te.const(0, "int32")

        def tap(index, a: int, t: int) -> te.Expr:
            j = index.at((idx[a], te.const(t, "int32")))
            return te.maximum(j, zero) if self.extrapolation is not None else j

        def gather(k: int, src: list) -> te.Expr:
            """The weighted sum over the taps of axes ``k`` on (axes before ``k`` at ``src``)."""
            if k == len(self.axes):
                v = x.at(src)
                return v if self.mode is ResizeMode.NEAREST else te.cast(acc, v)
            a, (index, weight) = self.axes[k], tables[k]
            total = None
            for t in range(index.shape[1]):
                v = gather(k + 1, src[:a] + [tap(index, a, t)] + src[a + 1:])
                v = v if weight is None else te.cast(acc, weight.at((idx[a], te.const(t, "int32")))) * v
                total = v if total is None else total + v
            return total

        value = te.cast(x.dtype, gather(0, list(idx)))
        if self.extrapolation is not None:
            inside = te.logical_and(*(index.at((idx[a], zero)) >= 0 for a, (index, _) in zip(self.axes, tables)))
            fill = self.extrapolation if is_float(x.dtype) else int(self.extrapolation)
            value = te.select(inside, value, te.const(fill, x.dtype))
        return value


# ------------------------------------------------------------------------------------------- ONNX

def _choice(enum: type[Enum], value: str, what: str, allowed=None) -> Enum:
    allowed = list(allowed if allowed is not None else enum)
    found = next((e for e in allowed if e.value == value), None)
    if found is None:
        raise Reject(f"{what} {value!r} is not supported ({', '.join(e.value for e in allowed)} are)")
    return found


@dataclass(frozen=True)
class _Request:
    """What an ONNX node asks for: scales or sizes of ``axes`` (None: every axis), and the rest."""

    how: Interpolation
    scales: np.ndarray | None
    sizes: np.ndarray | None
    axes: list[int] | None = None
    roi: np.ndarray | None = None
    policy: str = "stretch"
    extrapolation: float = 0.0
    upsample: bool = False  # Upsample's scales are at least 1


def _geometry(shape: tuple[int, ...], r: _Request) -> list[AxisResize]:
    """Each axis's resize (scale 1: unchanged), as onnxruntime sizes them: ``floor(scale * length)`` in float32
    for scales; for sizes the scale ``size / length``, or the one scale of ``keep_aspect_ratio_policy``."""
    rank = len(shape)
    axes = list(range(rank)) if r.axes is None else r.axes
    given = r.scales if r.scales is not None else r.sizes
    if given.size != len(axes):
        raise Reject(f"{'scales' if r.scales is not None else 'sizes'} {given.tolist()} need one entry per resized "
                     f"axis ({len(axes)})")
    scale, out = [_F(1)] * rank, list(shape)
    if r.scales is not None:
        for a, s in zip(axes, r.scales.astype(_F)):
            if not (s >= 1 if r.upsample else s > 0) or not math.isfinite(s):
                raise Reject(f"scale {s} of axis {a} must be {'at least 1' if r.upsample else 'positive'}")
            scale[a], out[a] = s, int(s * _F(shape[a]))
    else:
        for a, size in zip(axes, ints(r.sizes)):
            scale[a], out[a] = _F(size) / _F(shape[a]), size
        if r.policy != "stretch":
            pick = (min if r.policy == "not_larger" else max)(scale[a] for a in axes)
            for a in axes:
                scale[a], out[a] = pick, int(_round_half_away(np.asarray([pick * _F(shape[a])], _F))[0])
    if any(o < 1 for o in out):
        raise Reject(f"the output shape {out} has an empty axis (tensors without elements are not supported)")
    roi = np.concatenate([np.zeros(rank, _F), np.ones(rank, _F)])
    if r.how.extrapolates and r.roi is not None and r.roi.size:
        given_roi = r.roi.astype(_F).reshape(-1)
        if given_roi.size != 2 * len(axes):
            raise Reject(f"roi {given_roi.tolist()} needs a start and an end per resized axis ({len(axes)})")
        for k, a in enumerate(axes):
            roi[a], roi[rank + a] = given_roi[k], given_roi[len(axes) + k]
    return [AxisResize(shape[a], out[a], float(scale[a]), (float(roi[a]), float(roi[rank + a]))) for a in range(rank)]


def _resize(ctx: ImportContext, node: OnnxNode, r: _Request) -> None:
    x = node.input(0)
    shape = ctx.shape(x)
    if (r.scales is None) == (r.sizes is None):
        raise Reject("exactly one of scales and sizes must be given, " +
                     ("both are" if r.scales is not None else "neither is"))
    geometry = _geometry(shape, r)
    if all(g.length_out == g.length_in for g in geometry):  # onnxruntime copies the input whatever the scales
        ctx.emit(Identity(), [x], node.outputs, node.name)
        return
    tables, axes = [], []
    for a, g in enumerate(geometry):
        if g.scale == 1:  # not transformed at all (onnxruntime's rule, roi and extrapolation included)
            continue
        index, weight = axis_table(g, r.how)
        axes.append(a)
        tables.append([ctx.constant(index, f"{node.name}_index{a}")] +
                      ([] if weight is None else [ctx.constant(weight, f"{node.name}_weight{a}")]))
    extrapolation = float(r.extrapolation) if r.how.extrapolates else None
    if not r.how.filters:
        ctx.emit(Resize(tuple(axes), r.how.mode, extrapolation), [x, *sum(tables, [])], node.outputs, node.name)
        return
    # an antialiasing filter's window grows with the downsampling: one node per axis (the last axis first, as
    # onnxruntime filters), so that a node sums the taps of one window, not the product of all windows
    steps = list(zip(axes, tables))[::-1]
    for k, (a, axis_tables) in enumerate(steps):
        final = k == len(steps) - 1
        (x,) = ctx.emit(Resize((a,), r.how.mode, extrapolation), [x, *axis_tables], node.outputs if final else None,
                        node.name if final else f"{node.name}_axis{a}")


def _scales_or_sizes(ctx: ImportContext, node: OnnxNode) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Resize's scales (input 2) and sizes (input 3), None where omitted or empty."""
    scales = ctx.need_static(node, 2, "scales")
    sizes = ctx.need_static(node, 3, "sizes")
    return (None if scales is None or not scales.size else scales,
            None if sizes is None or not sizes.size else sizes)


def _legacy(ctx: ImportContext, node: OnnxNode, scales, upsample: bool = False) -> None:
    """Upsample and Resize-10: asymmetric coordinates, nearest truncating (the ceiling when downsampling)."""
    mode = _choice(ResizeMode, node.str_attr("mode", "nearest"), "mode", [ResizeMode.NEAREST, ResizeMode.LINEAR])
    how = Interpolation(mode, Coordinates.ASYMMETRIC, Rounding.SIMPLE)
    _resize(ctx, node, _Request(how, None if scales is None else np.asarray(scales, _F), None,
                                upsample=upsample))


@converter("Upsample", attrs=("mode", "scales"), since=7, until=8)
def _upsample_7(ctx: ImportContext, node: OnnxNode) -> None:
    _legacy(ctx, node, node.attr("scales"), upsample=True)


@converter("Upsample", attrs=("mode",), since=9, until=9)
def _upsample_9(ctx: ImportContext, node: OnnxNode) -> None:
    _legacy(ctx, node, ctx.need_static(node, 1, "scales"), upsample=True)


@converter("Resize", attrs=("mode",), since=10, until=10)
def _resize_10(ctx: ImportContext, node: OnnxNode) -> None:
    _legacy(ctx, node, ctx.need_static(node, 1, "scales"))


_ATTRS_11 = ("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a", "exclude_outside",
             "extrapolation_value")


def _interpolation(node: OnnxNode, coordinates=None) -> Interpolation:
    rounding = [r for r in Rounding if r is not Rounding.SIMPLE]
    return Interpolation(
        _choice(ResizeMode, node.str_attr("mode", "nearest"), "mode"),
        _choice(Coordinates, node.str_attr("coordinate_transformation_mode", "half_pixel"),
                "coordinate_transformation_mode", coordinates),
        _choice(Rounding, node.str_attr("nearest_mode", "round_prefer_floor"), "nearest_mode", rounding),
        float(node.attr("cubic_coeff_a", -0.75)), bool(node.attr("exclude_outside", 0)))


def _request(ctx: ImportContext, node: OnnxNode, how: Interpolation, **extra) -> _Request:
    scales, sizes = _scales_or_sizes(ctx, node)
    roi = ctx.need_static(node, 1, "roi") if how.extrapolates else None
    return _Request(how, scales, sizes, roi=roi, extrapolation=float(node.attr("extrapolation_value", 0.0)), **extra)


@converter("Resize", attrs=_ATTRS_11, since=11, until=17)
def _resize_11(ctx: ImportContext, node: OnnxNode) -> None:
    coordinates = [c for c in Coordinates if c is not Coordinates.HALF_PIXEL_SYMMETRIC]
    _resize(ctx, node, _request(ctx, node, _interpolation(node, coordinates)))


@converter("Resize", attrs=_ATTRS_11 + ("antialias", "axes", "keep_aspect_ratio_policy"), since=18)
def _resize_18(ctx: ImportContext, node: OnnxNode) -> None:
    """Opset 18: axes, keep_aspect_ratio_policy, antialias; 19: half_pixel_symmetric."""
    coordinates = [c for c in Coordinates if node.opset >= 19 or c is not Coordinates.HALF_PIXEL_SYMMETRIC]
    how = replace(_interpolation(node, coordinates), antialias=bool(node.attr("antialias", 0)))
    if how.filters and how.extrapolates:
        raise Reject("antialias=1 with tf_crop_and_resize is not supported")
    rank = len(ctx.shape(node.input(0)))
    axes = None if node.attr("axes") is None else [axis(a, rank) for a in ints(node.attr("axes"))]
    if axes is not None and len(set(axes)) != len(axes):
        raise Reject(f"axes {node.attr('axes')} repeat an axis")
    policy = node.str_attr("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise Reject(f"keep_aspect_ratio_policy {policy!r} is not supported (stretch, not_larger, not_smaller are)")
    _resize(ctx, node, _request(ctx, node, how, axes=axes, policy=policy))

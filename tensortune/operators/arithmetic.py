"""Elementwise arithmetic beyond ``+ - * /``: ONNX Pow, and the variadic Sum, Mean, Max and Min, imported as chains
of binary nodes (``Add``, ``Maximum``, ``Minimum``; a Mean is the sum divided by the count), which fuse like any.

Pow takes a float base and a float or integer exponent; an exponent of another dtype is cast to the base's first
(``Cast``, fused into the power's kernel). A constant scalar exponent makes a unary ``PowScalar``, which joins a
convolution's epilogue like an activation and computes ``x ** 2``, ``x ** 3`` and ``x ** 4`` as products (the tanh
form of GELU cubes its input: a product is one instruction on a vector, ``pow`` a libm call per element) and ``x **
0.5`` as a square root.
Max and Min of floats propagate NaN, as onnxruntime does.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..graph.op import check_float, is_float, numpy_dtype
from .constants import Cast
from .elementwise import Add, Binary, Div, Unary, int_kind
from .onnx_convert import ImportContext, OnnxNode, Reject, converter
from .reshape import Identity


@dataclass(frozen=True, slots=True)
class Pow(Binary):
    """``a ** b`` of float tensors (C's ``pow``: a negative base to a non-integer power is NaN)."""

    name = "pow"

    def infer(self, inputs):
        (out,) = Binary.infer(self, inputs)
        check_float(self, out, "the base")
        return (out,)

    def formula(self, xs, m):
        return m.pow(xs[0], xs[1])


@dataclass(frozen=True, slots=True)
class PowScalar(Unary):
    """``x ** exponent``: products for 2, 3 and 4 (within an ulp of ``pow``), a square root for 0.5 (+inf at -inf,
    as ``pow`` gives; only -0 differs, whose root keeps its sign), ``pow`` otherwise."""

    name = "pow_scalar"
    exponent: float

    def formula(self, xs, m):
        x = xs[0]
        if self.exponent == 1:
            return x
        if self.exponent in (2, 3, 4):
            square = x * x
            return {2: square, 3: square * x, 4: square * square}[int(self.exponent)]
        if self.exponent == 0.5:
            return m.select(m.equal(x, m.const(-math.inf)), m.const(math.inf), m.sqrt(x))
        return m.pow(x, m.const(self.exponent))


@dataclass(frozen=True, slots=True)
class Maximum(Binary):
    """The larger of ``a`` and ``b``; NaN where either is NaN."""

    name = "maximum"

    def formula(self, xs, m):
        return _nan_if_either(xs, m, m.maximum(*xs))


@dataclass(frozen=True, slots=True)
class Minimum(Binary):
    """The smaller of ``a`` and ``b``; NaN where either is NaN."""

    name = "minimum"

    def formula(self, xs, m):
        return _nan_if_either(xs, m, m.minimum(*xs))


def _nan_if_either(xs, m, picked):
    """``picked`` (``a < b ? a : b`` or ``a > b ? a : b``, which is ``b`` where either is NaN), or ``a`` where ``a``
    is a NaN (floats only)."""
    a = xs[0]
    if int_kind(a.dtype):
        return picked
    return m.select(m.not_equal(a, a), a, picked)


# ------------------------------------------------------------------------------------------- ONNX

@converter("Pow")
def _pow(ctx: ImportContext, node: OnnxNode) -> None:
    base, exponent = node.input(0), node.input(1)
    bt, et = ctx.type(base), ctx.type(exponent)
    if not is_float(bt.dtype):
        raise Reject(f"an integer base ({bt.dtype}) is not supported: the base must be a float tensor")
    if not is_float(et.dtype) and not int_kind(et.dtype):
        raise Reject(f"the exponent must be a float or integer tensor, got {et.dtype}")
    k = ctx.static(exponent)
    if k is not None and k.size == 1 and np.broadcast_shapes(bt.shape, k.shape) == bt.shape:
        ctx.emit(PowScalar(float(k.reshape(-1)[0])), [base], node.outputs, node.name)
        return
    if et.dtype != bt.dtype:
        (exponent,) = ctx.emit(Cast(bt.dtype), [exponent], None, f"{node.name}_exponent")
    ctx.emit(Pow(), [base, exponent], node.outputs, node.name)


def _operands(node: OnnxNode) -> list[str]:
    inputs = [i for i in node.inputs if i]
    if not inputs:
        raise Reject(f"{node.op_type} needs at least one input")
    return inputs


def _chain(ctx: ImportContext, op: Binary, inputs: list[str], outputs: list[str] | None, name: str) -> str:
    """``op`` over ``inputs`` (at least two), left to right; the last node writes ``outputs`` (fresh when None)."""
    acc = inputs[0]
    for k, other in enumerate(inputs[1:], start=2):
        (acc,) = ctx.emit(op, [acc, other], outputs if k == len(inputs) else None, name)
    return acc


def _variadic(op_type: str, op: Binary) -> None:
    def convert(ctx: ImportContext, node: OnnxNode) -> None:
        inputs = _operands(node)
        if len(inputs) == 1:
            ctx.emit(Identity(), inputs, node.outputs, node.name)
        else:
            _chain(ctx, op, inputs, node.outputs, node.name)

    convert.__qualname__ = f"convert_{op_type}"
    converter(op_type)(convert)


_variadic("Sum", Add())
_variadic("Max", Maximum())
_variadic("Min", Minimum())


@converter("Mean")
def _mean(ctx: ImportContext, node: OnnxNode) -> None:
    inputs = _operands(node)
    dtype = ctx.type(inputs[0]).dtype
    if not is_float(dtype):
        raise Reject(f"the mean of {dtype} tensors is not defined (ONNX Mean takes float tensors)")
    if len(inputs) == 1:
        ctx.emit(Identity(), inputs, node.outputs, node.name)
        return
    total = _chain(ctx, Add(), inputs, None, node.name)
    count = ctx.constant(np.asarray(len(inputs), numpy_dtype(dtype)), f"{node.name}_count")
    ctx.emit(Div(), [total, count], node.outputs, node.name)

"""The operators of the graph IR: one frozen class per kind, with validated attributes and shape inference.

ONNX operators map onto this smaller set when a model is imported (``Flatten``, ``Squeeze`` and
``Unsqueeze`` are ``Reshape``; ``Split`` is several ``Slice``; ``Sum`` is a chain of ``Add``;
``GlobalAveragePool`` is a ``Pool`` over the whole image; ``Gemm`` is ``MatMul`` with elementwise
nodes). Every attribute is static: shapes, pads and slice bounds are resolved at import.

``op.infer(input_types)`` returns the output types and raises ``GraphError`` for inputs the operator
cannot take, so any node a pass builds is checked the same way as an imported one.
"""
from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields
from enum import Enum
from typing import Sequence

import numpy as np

from .errors import GraphError


@dataclass(frozen=True, slots=True)
class TensorType:
    """Static shape and dtype (a numpy dtype name such as ``float32`` or ``int64``)."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        shape = tuple(self.shape)
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise GraphError(f"a shape needs non-negative integer dimensions, got {self.shape!r}")
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype).name)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


class Op:
    """Base of the operator kinds. ``infer`` checks the input types and returns the output types."""

    __slots__ = ()

    @property
    def kind(self) -> str:
        return type(self).__name__

    def infer(self, inputs: Sequence[TensorType]) -> tuple[TensorType, ...]:  # pragma: no cover - abstract
        raise NotImplementedError

    def attrs(self) -> dict[str, object]:
        """The attributes that differ from their defaults (for printing)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.default is MISSING or v != f.default:
                out[f.name] = v.name.lower() if isinstance(v, Enum) else v
        return out

    def __str__(self) -> str:
        attrs = self.attrs()
        return self.kind + (f"[{', '.join(f'{k}={_fmt(v)}' for k, v in attrs.items())}]" if attrs else "")


def _fmt(v: object) -> str:
    if isinstance(v, tuple) and v and all(isinstance(x, Op) or isinstance(x, EpilogueStep) for x in v):
        return "(" + ", ".join(str(x) for x in v) + ")"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _count(op: Op, inputs: Sequence[TensorType], low: int, high: int | None = None) -> None:
    high = low if high is None else high
    if not low <= len(inputs) <= high:
        want = str(low) if low == high else f"{low} to {high}"
        raise GraphError(f"{op.kind} takes {want} inputs, got {len(inputs)}")


def _rank(op: Op, t: TensorType, rank: int, what: str) -> None:
    if len(t.shape) != rank:
        raise GraphError(f"{op.kind}: {what} must have rank {rank}, got shape {t.shape}")


def _float(op: Op, t: TensorType, what: str) -> None:
    if not np.issubdtype(np.dtype(t.dtype), np.floating):
        raise GraphError(f"{op.kind}: {what} must be a float tensor, got {t.dtype}")


def broadcast_shapes(op: Op, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Numpy (multidirectional) broadcasting; a ``GraphError`` naming the operator when shapes do not broadcast."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise GraphError(f"{op.kind}: shapes {', '.join(map(str, shapes))} do not broadcast") from None


def _positive(op: Op, name: str, values: tuple[int, ...], length: int, minimum: int = 1) -> None:
    if len(values) != length or not all(isinstance(v, int) and v >= minimum for v in values):
        raise GraphError(f"{op.kind}: {name} must be {length} integers >= {minimum}, got {values!r}")


# ------------------------------------------------------------------------------------------- elementwise

class UnaryFn(Enum):
    """Elementwise functions of one tensor; ``alpha`` and ``beta`` are their parameters where they have any."""

    RELU = "relu"
    CLIP = "clip"  # min(max(x, alpha), beta)
    LEAKY_RELU = "leaky_relu"  # x if x >= 0 else alpha * x
    SIGMOID = "sigmoid"
    HARD_SIGMOID = "hard_sigmoid"  # max(0, min(1, alpha * x + beta))
    HARD_SWISH = "hard_swish"  # x * max(0, min(1, x / 6 + 1 / 2))
    TANH = "tanh"


@dataclass(frozen=True, slots=True)
class Unary(Op):
    """``fn(x)`` elementwise."""

    fn: UnaryFn
    alpha: float = 0.0
    beta: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.fn, UnaryFn):
            raise GraphError(f"Unary needs a UnaryFn, got {self.fn!r}")
        object.__setattr__(self, "alpha", float(self.alpha))
        object.__setattr__(self, "beta", float(self.beta))
        if self.fn is UnaryFn.CLIP and self.alpha > self.beta:
            raise GraphError(f"Clip: min {self.alpha} is larger than max {self.beta}")

    def infer(self, inputs):
        _count(self, inputs, 1)
        _float(self, inputs[0], "the input")
        return (inputs[0],)

    def __str__(self) -> str:
        name = "".join(w.capitalize() for w in self.fn.value.split("_"))
        if self.fn is UnaryFn.CLIP:
            return f"{name}[{self.alpha:g}, {self.beta:g}]"
        if self.fn is UnaryFn.LEAKY_RELU:
            return f"{name}[{self.alpha:g}]"
        if self.fn is UnaryFn.HARD_SIGMOID:
            return f"{name}[{self.alpha:g}, {self.beta:g}]"
        return name


class BinaryFn(Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    PRELU = "prelu"  # x if x >= 0 else slope * x; the slope broadcasts to x (one direction only)


@dataclass(frozen=True, slots=True)
class Binary(Op):
    """``fn(a, b)`` elementwise with numpy broadcasting."""

    fn: BinaryFn

    def infer(self, inputs):
        _count(self, inputs, 2)
        a, b = inputs
        if a.dtype != b.dtype:
            raise GraphError(f"{self}: operands have different dtypes {a.dtype} and {b.dtype}")
        shape = broadcast_shapes(self, a.shape, b.shape)
        if self.fn is BinaryFn.PRELU and shape != a.shape:
            raise GraphError(f"PRelu: the slope {b.shape} must broadcast to the input {a.shape}")
        return (TensorType(shape, a.dtype),)

    def __str__(self) -> str:
        return "PRelu" if self.fn is BinaryFn.PRELU else self.fn.value.capitalize()


class Math:
    """The functions the formulas of elementwise operators use: numpy's in the interpreter, tensor expressions'
    in kernels, so each activation is defined once (``unary_formula``, ``binary_formula``)."""

    def const(self, value: float):  # pragma: no cover - interface
        raise NotImplementedError

    def maximum(self, a, b):  # pragma: no cover - interface
        raise NotImplementedError

    def minimum(self, a, b):  # pragma: no cover - interface
        raise NotImplementedError

    def exp(self, a):  # pragma: no cover - interface
        raise NotImplementedError

    def tanh(self, a):  # pragma: no cover - interface
        raise NotImplementedError


def unary_formula(op: Unary, x, m: Math):
    """``op(x)`` with the functions of ``m``. Branch-free (leaky ReLU is ``max(x, 0) + alpha * min(x, 0)``), so
    that kernels vectorize."""
    c = m.const
    fn = op.fn
    if fn is UnaryFn.RELU:
        return m.maximum(x, c(0))
    if fn is UnaryFn.CLIP:
        return m.minimum(m.maximum(x, c(op.alpha)), c(op.beta))
    if fn is UnaryFn.LEAKY_RELU:
        return m.maximum(x, c(0)) + c(op.alpha) * m.minimum(x, c(0))
    if fn is UnaryFn.SIGMOID:
        return c(1) / (c(1) + m.exp(-x))
    if fn is UnaryFn.HARD_SIGMOID:
        return m.minimum(m.maximum(x * c(op.alpha) + c(op.beta), c(0)), c(1))
    if fn is UnaryFn.HARD_SWISH:
        return x * m.minimum(m.maximum(x * c(1 / 6) + c(0.5), c(0)), c(1))
    if fn is UnaryFn.TANH:
        return m.tanh(x)
    raise AssertionError(fn)


def binary_formula(op: Binary, a, b, m: Math):
    """``op(a, b)`` with the functions of ``m`` (floats; PRelu branch-free like leaky ReLU)."""
    fn = op.fn
    if fn is BinaryFn.ADD:
        return a + b
    if fn is BinaryFn.SUB:
        return a - b
    if fn is BinaryFn.MUL:
        return a * b
    if fn is BinaryFn.DIV:
        return a / b
    if fn is BinaryFn.PRELU:
        return m.maximum(a, m.const(0)) + b * m.minimum(a, m.const(0))
    raise AssertionError(fn)


@dataclass(frozen=True, slots=True)
class EpilogueStep:
    """One elementwise step fused after a convolution or dense layer: ``op`` applied to the running value
    and, for a ``Binary``, to the node's next operand input (the left operand when ``operand_left``)."""

    op: Unary | Binary
    operand_left: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.op, (Unary, Binary)):
            raise GraphError(f"an epilogue step is a Unary or Binary operator, got {self.op!r}")
        if self.operand_left and not isinstance(self.op, Binary):
            raise GraphError("only a binary epilogue step has an operand")

    @property
    def has_operand(self) -> bool:
        return isinstance(self.op, Binary)

    def __str__(self) -> str:
        if not self.has_operand:
            return str(self.op)
        return f"{self.op}({'operand, x' if self.operand_left else 'x, operand'})"


def _check_epilogue(op: Op, out: TensorType, epilogue: tuple[EpilogueStep, ...],
                    operands: Sequence[TensorType]) -> None:
    needed = sum(s.has_operand for s in epilogue)
    if len(operands) != needed:
        raise GraphError(f"{op.kind}: its epilogue takes {needed} operand input(s), got {len(operands)}")
    for t in operands:
        if broadcast_shapes(op, out.shape, t.shape) != out.shape or t.dtype != out.dtype:
            raise GraphError(f"{op.kind}: an epilogue operand {t} must broadcast to the output {out}")


# ------------------------------------------------------------------------------------------- convolution

@dataclass(frozen=True, slots=True)
class Conv(Op):
    """2-D convolution of NCHW data by OIHW weights (``[O, C/groups, KH, KW]``), with an optional bias and
    a fused elementwise ``epilogue``. Inputs: data, weight, bias (when ``has_bias``), epilogue operands."""

    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilations: tuple[int, int] = (1, 1)
    groups: int = 1
    has_bias: bool = False
    epilogue: tuple[EpilogueStep, ...] = ()

    def __post_init__(self) -> None:
        _positive(self, "strides", self.strides, 2)
        _positive(self, "pads", self.pads, 4, minimum=0)
        _positive(self, "dilations", self.dilations, 2)
        _positive(self, "groups", (self.groups,), 1)

    def infer(self, inputs):
        base = 3 if self.has_bias else 2
        _count(self, inputs, base, base + len(self.epilogue))
        x, w = inputs[0], inputs[1]
        _rank(self, x, 4, "the data")
        _rank(self, w, 4, "the weight")
        _float(self, x, "the data")
        n, c, h, wd = x.shape
        o, cg, kh, kw = w.shape
        if c % self.groups or o % self.groups or cg * self.groups != c:
            raise GraphError(f"Conv: {c} input channels in {self.groups} group(s) need weights [O, {c // self.groups}, "
                             f"KH, KW] with O divisible by the groups, got {w.shape}")
        if self.has_bias and inputs[2].shape != (o,):
            raise GraphError(f"Conv: the bias must have shape ({o},), got {inputs[2].shape}")
        oh = conv_out(h, kh, self.strides[0], self.pads[0], self.pads[2], self.dilations[0], self)
        ow = conv_out(wd, kw, self.strides[1], self.pads[1], self.pads[3], self.dilations[1], self)
        out = TensorType((n, o, oh, ow), x.dtype)
        _check_epilogue(self, out, self.epilogue, inputs[base:])
        return (out,)

    @property
    def num_base_inputs(self) -> int:
        return 3 if self.has_bias else 2

    def is_depthwise(self, channels: int, out_channels: int) -> bool:
        return self.groups == channels == out_channels and channels > 1


def conv_out(size: int, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int, op: Op,
             ceil_mode: bool = False) -> int:
    """Output extent of a convolution or pooling window along one axis."""
    span = size + pad_begin + pad_end - dilation * (kernel - 1) - 1
    if span < 0:
        raise GraphError(f"{op.kind}: a window of {kernel} (dilation {dilation}) does not fit an input of {size} "
                         f"padded by {pad_begin}+{pad_end}")
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_begin:  # the last window must start inside the input or its left padding
        out -= 1
    return out


@dataclass(frozen=True, slots=True)
class BatchNorm(Op):
    """Inference batch normalization over channel axis 1: inputs x, scale, bias, mean, variance."""

    epsilon: float = 1e-5

    def infer(self, inputs):
        _count(self, inputs, 5)
        x = inputs[0]
        if len(x.shape) < 2:
            raise GraphError(f"BatchNorm: the input needs a channel axis, got shape {x.shape}")
        for t, what in zip(inputs[1:], ("scale", "bias", "mean", "variance")):
            if t.shape != (x.shape[1],):
                raise GraphError(f"BatchNorm: the {what} must have shape ({x.shape[1]},), got {t.shape}")
        return (x,)


@dataclass(frozen=True, slots=True)
class Dense(Op):
    """``x @ weight.T (+ bias)`` then ``epilogue``: x ``[M, K]``, weight ``[N, K]``, bias ``[N]``, operands."""

    has_bias: bool = False
    epilogue: tuple[EpilogueStep, ...] = ()

    @property
    def num_base_inputs(self) -> int:
        return 3 if self.has_bias else 2

    def infer(self, inputs):
        base = self.num_base_inputs
        _count(self, inputs, base, base + len(self.epilogue))
        x, w = inputs[0], inputs[1]
        _rank(self, x, 2, "the data")
        _rank(self, w, 2, "the weight")
        if x.shape[1] != w.shape[1]:
            raise GraphError(f"Dense: data {x.shape} and weight {w.shape} disagree on K")
        if self.has_bias and inputs[2].shape != (w.shape[0],):
            raise GraphError(f"Dense: the bias must have shape ({w.shape[0]},), got {inputs[2].shape}")
        out = TensorType((x.shape[0], w.shape[0]), x.dtype)
        _check_epilogue(self, out, self.epilogue, inputs[base:])
        return (out,)


@dataclass(frozen=True, slots=True)
class MatMul(Op):
    """Numpy ``matmul`` semantics (batched, with broadcasting of the batch dimensions)."""

    def infer(self, inputs):
        _count(self, inputs, 2)
        a, b = inputs
        if not a.shape or not b.shape:
            raise GraphError("MatMul: operands must have at least one dimension")
        sa = (1,) + a.shape if len(a.shape) == 1 else a.shape
        sb = b.shape + (1,) if len(b.shape) == 1 else b.shape
        if sa[-1] != sb[-2]:
            raise GraphError(f"MatMul: shapes {a.shape} and {b.shape} disagree on the reduced dimension")
        batch = broadcast_shapes(self, sa[:-2], sb[:-2])
        shape = batch + (sa[-2],) * (len(a.shape) > 1) + (sb[-1],) * (len(b.shape) > 1)
        return (TensorType(shape, a.dtype),)


class PoolKind(Enum):
    MAX = "max"
    AVG = "avg"


@dataclass(frozen=True, slots=True)
class Pool(Op):
    """Max or average pooling of NCHW data over ``kernel`` windows (padding is -inf for max pooling;
    average pooling divides by the window's size with ``count_include_pad``, else by its valid elements)."""

    mode: PoolKind
    kernel: tuple[int, int]
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilations: tuple[int, int] = (1, 1)
    ceil_mode: bool = False
    count_include_pad: bool = False

    def __post_init__(self) -> None:
        _positive(self, "kernel", self.kernel, 2)
        _positive(self, "strides", self.strides, 2)
        _positive(self, "pads", self.pads, 4, minimum=0)
        _positive(self, "dilations", self.dilations, 2)
        if any(p >= k for p, k in zip(self.pads, self.kernel * 2)):
            raise GraphError(f"Pool: pads {self.pads} must be smaller than the kernel {self.kernel}")

    def infer(self, inputs):
        _count(self, inputs, 1)
        x = inputs[0]
        _rank(self, x, 4, "the data")
        _float(self, x, "the data")
        n, c, h, w = x.shape
        oh = conv_out(h, self.kernel[0], self.strides[0], self.pads[0], self.pads[2], self.dilations[0], self,
                      self.ceil_mode)
        ow = conv_out(w, self.kernel[1], self.strides[1], self.pads[1], self.pads[3], self.dilations[1], self,
                      self.ceil_mode)
        return (TensorType((n, c, oh, ow), x.dtype),)

    def __str__(self) -> str:
        return ("MaxPool" if self.mode is PoolKind.MAX else "AvgPool") + Op.__str__(self)[len("Pool"):]

    def attrs(self) -> dict[str, object]:
        out = Op.attrs(self)
        out.pop("mode")
        return out


@dataclass(frozen=True, slots=True)
class LRN(Op):
    """Local response normalization across channels (axis 1)."""

    size: int
    alpha: float = 1e-4
    beta: float = 0.75
    bias: float = 1.0

    def __post_init__(self) -> None:
        _positive(self, "size", (self.size,), 1)

    def infer(self, inputs):
        _count(self, inputs, 1)
        if len(inputs[0].shape) < 2:
            raise GraphError(f"LRN: the input needs a channel axis, got shape {inputs[0].shape}")
        _float(self, inputs[0], "the input")
        return (inputs[0],)


@dataclass(frozen=True, slots=True)
class Softmax(Op):
    """Softmax along one axis."""

    axis: int

    def infer(self, inputs):
        _count(self, inputs, 1)
        _float(self, inputs[0], "the input")
        if not 0 <= self.axis < len(inputs[0].shape):
            raise GraphError(f"Softmax: axis {self.axis} is out of range for shape {inputs[0].shape}")
        return (inputs[0],)


# ------------------------------------------------------------------------------------------- data movement

@dataclass(frozen=True, slots=True)
class Reshape(Op):
    """The same elements in row-major order, with another shape."""

    shape: tuple[int, ...]

    def infer(self, inputs):
        _count(self, inputs, 1)
        if math.prod(self.shape) != inputs[0].size:
            raise GraphError(f"Reshape: cannot reshape {inputs[0].shape} ({inputs[0].size} elements) to {self.shape}")
        return (TensorType(self.shape, inputs[0].dtype),)


@dataclass(frozen=True, slots=True)
class Identity(Op):
    """The input itself (Identity, Dropout at inference)."""

    def infer(self, inputs):
        _count(self, inputs, 1)
        return (inputs[0],)


@dataclass(frozen=True, slots=True)
class Relayout(Op):
    """The input stored in another layout (the output value's): the same logical tensor."""

    def infer(self, inputs):
        _count(self, inputs, 1)
        return (inputs[0],)


@dataclass(frozen=True, slots=True)
class Transpose(Op):
    perm: tuple[int, ...]

    def infer(self, inputs):
        _count(self, inputs, 1)
        shape = inputs[0].shape
        if sorted(self.perm) != list(range(len(shape))):
            raise GraphError(f"Transpose: perm {self.perm} is not a permutation of the {len(shape)} axes")
        return (TensorType(tuple(shape[p] for p in self.perm), inputs[0].dtype),)


@dataclass(frozen=True, slots=True)
class Concat(Op):
    axis: int

    def infer(self, inputs):
        _count(self, inputs, 1, 1 << 30)
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


@dataclass(frozen=True, slots=True)
class Slice(Op):
    """``out[i] = x[start + i * step]`` along each axis (every axis given; steps may be negative)."""

    starts: tuple[int, ...]
    steps: tuple[int, ...]
    sizes: tuple[int, ...]

    def infer(self, inputs):
        _count(self, inputs, 1)
        shape = inputs[0].shape
        if not len(self.starts) == len(self.steps) == len(self.sizes) == len(shape):
            raise GraphError(f"Slice: starts, steps and sizes need one entry per axis of {shape}")
        for d, (start, step, size) in enumerate(zip(self.starts, self.steps, self.sizes)):
            last = start + (size - 1) * step
            if step == 0 or size < 0 or (size and not (0 <= start < shape[d] and 0 <= last < shape[d])):
                raise GraphError(f"Slice: axis {d} of {shape}: start {start}, step {step}, size {size} leave the input")
        return (TensorType(self.sizes, inputs[0].dtype),)


class PadMode(Enum):
    CONSTANT = "constant"
    REFLECT = "reflect"
    EDGE = "edge"


@dataclass(frozen=True, slots=True)
class Pad(Op):
    """Pad every axis by ``pads`` (all begins, then all ends; non-negative)."""

    pads: tuple[int, ...]
    mode: PadMode = PadMode.CONSTANT
    value: float = 0.0

    def infer(self, inputs):
        _count(self, inputs, 1)
        shape = inputs[0].shape
        r = len(shape)
        _positive(self, "pads", self.pads, 2 * r, minimum=0)
        if self.mode is PadMode.REFLECT and any(p >= d for p, d in zip(self.pads, shape * 2) if p):
            raise GraphError(f"Pad: reflect padding {self.pads} must be smaller than the padded axes of {shape}")
        if self.mode is PadMode.EDGE and any(p and d == 0 for p, d in zip(self.pads, shape * 2)):
            raise GraphError(f"Pad: edge padding of an empty axis of {shape}")
        return (TensorType(tuple(d + self.pads[i] + self.pads[i + r] for i, d in enumerate(shape)),
                           inputs[0].dtype),)


# ------------------------------------------------------------------------------------------- constants only

@dataclass(frozen=True, slots=True)
class Gather(Op):
    """``numpy.take(data, indices, axis)``; only compiled when folded into a constant."""

    axis: int

    def infer(self, inputs):
        _count(self, inputs, 2)
        data, idx = inputs
        if not 0 <= self.axis < len(data.shape):
            raise GraphError(f"Gather: axis {self.axis} is out of range for shape {data.shape}")
        if not np.issubdtype(np.dtype(idx.dtype), np.integer):
            raise GraphError(f"Gather: indices must be integers, got {idx.dtype}")
        return (TensorType(data.shape[:self.axis] + idx.shape + data.shape[self.axis + 1:], data.dtype),)


@dataclass(frozen=True, slots=True)
class Cast(Op):
    """Convert elements to ``to``; compiled only when folded into a constant or when it changes nothing."""

    to: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "to", np.dtype(self.to).name)

    def infer(self, inputs):
        _count(self, inputs, 1)
        return (TensorType(inputs[0].shape, self.to),)


#: operators that are only ever evaluated at compile time (no kernel computes them)
CONSTANT_ONLY = (Gather, Cast)

__all__ = ["BatchNorm", "Binary", "BinaryFn", "CONSTANT_ONLY", "Cast", "Concat", "Conv", "Dense", "EpilogueStep",
           "Gather", "Identity", "LRN", "MatMul", "Math", "Op", "Pad", "PadMode", "Pool", "PoolKind", "Relayout",
           "Reshape", "Slice", "Softmax", "TensorType", "Transpose", "Unary", "UnaryFn", "binary_formula",
           "broadcast_shapes", "conv_out", "unary_formula"]

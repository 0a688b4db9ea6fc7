"""Elementwise operators: activations and arithmetic, each one class whose formula is its whole definition.

An ``Elementwise`` operator computes each output element from the input elements at the same index (numpy
broadcasting for several inputs) by ``formula(xs, m)``, written once with the functions of ``m`` (``operators.
math``): numpy's in the interpreter, tensor expressions' in kernels. From the formula it gets its shape and dtype
inference, its numpy reference, its kernel (one vectorized pass over the output in any layout), its place in an
epilogue fused after a convolution or dense layer (``EpilogueStep``) and its layout rule; a new activation is a
class and its converter (see ``softplus.py``).

Formulas are branch-free where a kernel must vectorize them (leaky ReLU is ``max(x, 0) + alpha * min(x, 0)``).
bfloat16 is a storage type: a kernel computes the formula of bfloat16 operands in float32 and stores the result back
in bfloat16.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar, Sequence

import numpy as np

from ..dtype import DType
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node, TensorType
from ..graph.op import LayoutRule, Op, Pattern, broadcast_shapes, check_count, check_float
from ..te import Expr
from .kernel import KernelDef
from .map_op import MapOp, element_kernel
from .math import Math, NumpyMath, TeMath
from .onnx_convert import ImportContext, OnnxNode, Reject, converter, simple


class Elementwise(MapOp):
    """An operator of one formula over elements (see the module docstring); ``name``: its kernel's kind."""

    __slots__ = ()
    pattern = Pattern.ELEMWISE
    layout_rule = LayoutRule.ELEMENTWISE
    arity: ClassVar[int] = 1

    def formula(self, xs: Sequence, m: Math):  # pragma: no cover - abstract
        raise NotImplementedError

    def expr(self, xs: Sequence[Expr]) -> Expr:
        """The formula on tensor expressions (bfloat16 operands computed in float32)."""
        if not any(x.dtype is DType.bfloat16 for x in xs):
            return self.formula(xs, TeMath(xs[0].dtype))
        wide = [x.astype(DType.float32) if x.dtype is DType.bfloat16 else x for x in xs]
        out = self.formula(wide, TeMath(wide[0].dtype))
        return out.astype(DType.bfloat16) if out.dtype is DType.float32 else out

    def reference(self, *xs: np.ndarray) -> np.ndarray:
        dtype = np.result_type(*xs)
        return np.asarray(self.formula(xs, NumpyMath(dtype)), dtype)

    def element(self, xs, idx):
        return self.expr([x.broadcast(idx) for x in xs])

    def reads_once(self, input_shape, output_shape) -> bool:
        return input_shape == output_shape  # an input broadcast to the output is read again for each copy

    def __post_init__(self) -> None:
        for f in fields(self):  # parameters are floats (ONNX gives some as integers)
            if f.type in ("float", float):
                object.__setattr__(self, f.name, float(getattr(self, f.name)))

    def __str__(self) -> str:
        """``LeakyRelu[0.1]``: the name, then the parameters."""
        params = [f"{v:g}" if isinstance(v, float) else str(v) for v in (getattr(self, f.name) for f in fields(self))]
        name = "".join(w.capitalize() for w in self.name.split("_"))
        return name + (f"[{', '.join(params)}]" if params else "")


class Unary(Elementwise):
    """An elementwise function of one float tensor."""

    __slots__ = ()

    def infer(self, inputs):
        check_count(self, inputs, 1)
        check_float(self, inputs[0], "the input")
        return (inputs[0],)


class Binary(Elementwise):
    """An elementwise function of two tensors of one dtype, with numpy broadcasting."""

    __slots__ = ()
    pattern = Pattern.BROADCAST
    arity = 2
    #: whether the operator joins an epilogue whose running value is its second input (``passes.fuse_epilogues``)
    fuses_as_right_operand: ClassVar[bool] = True

    def infer(self, inputs):
        check_count(self, inputs, 2)
        a, b = inputs
        if a.dtype != b.dtype:
            raise GraphError(f"{self}: operands have different dtypes {a.dtype} and {b.dtype}")
        return (TensorType(broadcast_shapes(self, a.shape, b.shape), a.dtype),)


def int_kind(dtype) -> str:
    """``"i"`` for a signed integer dtype (a ``DType`` or numpy's), ``"u"`` for an unsigned one, else ``""``."""
    kind = (dtype.numpy if isinstance(dtype, DType) else np.dtype(dtype)).kind
    return kind if kind in "iu" else ""


def elementwise_kernel(g: Graph, node: Node, lanes: int, fn, kind: str) -> KernelDef:
    """The kernel of ``fn(input elements)`` over the node's output, each input read broadcast in its layout."""
    return element_kernel(g, node, lanes, lambda xs, idx: fn([x.broadcast(idx) for x in xs]), kind)


# ------------------------------------------------------------------------------------------- activations

@dataclass(frozen=True, slots=True)
class Relu(Unary):
    name = "relu"

    def formula(self, xs, m):
        return m.maximum(xs[0], m.const(0))


@dataclass(frozen=True, slots=True)
class Clip(Unary):
    """``min(max(x, low), high)``."""

    name = "clip"
    low: float
    high: float

    def __post_init__(self) -> None:
        Unary.__post_init__(self)
        if self.low > self.high:
            raise GraphError(f"Clip: min {self.low} is larger than max {self.high}")

    def formula(self, xs, m):
        return m.minimum(m.maximum(xs[0], m.const(self.low)), m.const(self.high))


@dataclass(frozen=True, slots=True)
class LeakyRelu(Unary):
    """``x if x >= 0 else alpha * x``."""

    name = "leaky_relu"
    alpha: float = 0.01

    def formula(self, xs, m):
        x = xs[0]
        return m.maximum(x, m.const(0)) + m.const(self.alpha) * m.minimum(x, m.const(0))


@dataclass(frozen=True, slots=True)
class Sigmoid(Unary):
    name = "sigmoid"

    def formula(self, xs, m):
        return m.const(1) / (m.const(1) + m.exp(-xs[0]))


@dataclass(frozen=True, slots=True)
class HardSigmoid(Unary):
    """``max(0, min(1, alpha * x + beta))``."""

    name = "hard_sigmoid"
    alpha: float = 0.2
    beta: float = 0.5

    def formula(self, xs, m):
        return m.minimum(m.maximum(xs[0] * m.const(self.alpha) + m.const(self.beta), m.const(0)), m.const(1))


@dataclass(frozen=True, slots=True)
class HardSwish(Unary):
    """``x * max(0, min(1, x / 6 + 1 / 2))``."""

    name = "hard_swish"

    def formula(self, xs, m):
        x = xs[0]
        return x * m.minimum(m.maximum(x * m.const(1 / 6) + m.const(0.5), m.const(0)), m.const(1))


@dataclass(frozen=True, slots=True)
class Swish(Unary):
    """``x * sigmoid(alpha * x)`` (SiLU for ``alpha = 1``)."""

    name = "swish"
    alpha: float = 1.0

    def formula(self, xs, m):
        x = xs[0]
        return x / (m.const(1) + m.exp(-(x * m.const(self.alpha))))


@dataclass(frozen=True, slots=True)
class Tanh(Unary):
    name = "tanh"

    def formula(self, xs, m):
        return m.tanh(xs[0])


simple("Relu", Relu)
simple("Sigmoid", Sigmoid)
simple("Tanh", Tanh)
simple("HardSwish", HardSwish)
simple("Swish", Swish, {"alpha": 1.0}, since=24)
simple("LeakyRelu", LeakyRelu, {"alpha": 0.01})
simple("HardSigmoid", HardSigmoid, {"alpha": 0.2, "beta": 0.5})

_FLOAT_MAX = float(np.finfo(np.float32).max)


@converter("Clip", attrs=("min", "max"), until=10)
def _clip_attributes(ctx: ImportContext, node: OnnxNode) -> None:
    op = Clip(float(node.attr("min", -_FLOAT_MAX)), float(node.attr("max", _FLOAT_MAX)))
    ctx.emit(op, [node.input(0)], node.outputs, node.name)


@converter("Clip", attrs=("min", "max"), since=11)
def _clip_inputs(ctx: ImportContext, node: OnnxNode) -> None:
    if "min" in node.attrs or "max" in node.attrs:
        raise Reject("min and max are inputs from opset 11 on, not attributes")
    lo, hi = ctx.need_static(node, 1, "min"), ctx.need_static(node, 2, "max")
    op = Clip(float(lo) if lo is not None else -_FLOAT_MAX, float(hi) if hi is not None else _FLOAT_MAX)
    ctx.emit(op, [node.input(0)], node.outputs, node.name)


# ------------------------------------------------------------------------------------------- arithmetic

@dataclass(frozen=True, slots=True)
class Add(Binary):
    name = "add"

    def formula(self, xs, m):
        return xs[0] + xs[1]


@dataclass(frozen=True, slots=True)
class Sub(Binary):
    name = "sub"

    def formula(self, xs, m):
        return xs[0] - xs[1]


@dataclass(frozen=True, slots=True)
class Mul(Binary):
    name = "mul"

    def formula(self, xs, m):
        return xs[0] * xs[1]


@dataclass(frozen=True, slots=True)
class Div(Binary):
    """``a / b``; integers divide truncating toward zero as onnxruntime does, with no trap: by zero gives 0, the
    smallest integer by -1 wraps to itself."""

    name = "div"

    def formula(self, xs, m):
        a, b = xs
        kind = int_kind(a.dtype)
        if not kind:
            return a / b
        one, zero = m.const(1), m.const(0)
        divides = m.not_equal(b, zero)
        if kind == "i":
            divides = divides & m.not_equal(b, m.const(-1))
        d = m.select(divides, b, one)
        q = a // d  # floor division: one less than the truncated quotient where a remainder is left and signs differ
        q = m.select(m.not_equal(a % d, zero) & m.not_equal(a < zero, d < zero), q + one, q)
        if kind == "i":
            q = m.select(m.equal(b, m.const(-1)), -a, q)
        return m.select(m.equal(b, zero), zero, q)


@dataclass(frozen=True, slots=True)
class PRelu(Binary):
    """``x if x >= 0 else slope * x``; the slope (second input) broadcasts to x, in one direction only."""

    name = "prelu"
    fuses_as_right_operand = False  # the slope broadcasts to x, not x to the slope

    def infer(self, inputs):
        (out,) = Binary.infer(self, inputs)
        if out.shape != inputs[0].shape:
            raise GraphError(f"PRelu: the slope {inputs[1].shape} must broadcast to the input {inputs[0].shape}")
        return (out,)

    def formula(self, xs, m):
        a, b = xs
        return m.maximum(a, m.const(0)) + b * m.minimum(a, m.const(0))

    def __str__(self) -> str:
        return "PRelu"


for _type, _cls in (("Add", Add), ("Sub", Sub), ("Mul", Mul), ("Div", Div), ("PRelu", PRelu)):
    simple(_type, _cls, inputs=2)


# ------------------------------------------------------------------------------------------- epilogues

@dataclass(frozen=True, slots=True)
class EpilogueStep:
    """One elementwise step fused after a convolution, dense layer or pooling: ``op`` applied to the running value
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

    def apply(self, x, operand=None, evaluate=None):
        """The step on the running value ``x`` (and its operand): ``evaluate(op, args)`` computes ``op`` (default:
        its tensor expression)."""
        evaluate = evaluate or (lambda op, args: op.expr(args))
        if not self.has_operand:
            return evaluate(self.op, [x])
        return evaluate(self.op, [operand, x] if self.operand_left else [x, operand])

    def __str__(self) -> str:
        if not self.has_operand:
            return str(self.op)
        return f"{self.op}({'operand, x' if self.operand_left else 'x, operand'})"


class WithEpilogue(Op):
    """An out-fusable operator or reduction that computes elementwise consumers on its output before storing it: its
    ``epilogue`` (a tuple of ``EpilogueStep``; a field of the subclass). Its inputs are its own
    (``num_base_inputs``), then one operand per binary step, in order (``passes.fuse_epilogues`` makes them)."""

    __slots__ = ()
    pattern = Pattern.OUT_FUSABLE

    @property
    def num_base_inputs(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError


def check_epilogue(op: Op, out: TensorType, epilogue: tuple[EpilogueStep, ...],
                   operands: Sequence[TensorType]) -> None:
    """An epilogue's operands: as many as its binary steps, each broadcasting to the output, of its dtype."""
    needed = sum(s.has_operand for s in epilogue)
    if len(operands) != needed:
        raise GraphError(f"{op.kind}: its epilogue takes {needed} operand input(s), got {len(operands)}")
    for t in operands:
        if broadcast_shapes(op, out.shape, t.shape) != out.shape or t.dtype != out.dtype:
            raise GraphError(f"{op.kind}: an epilogue operand {t} must broadcast to the output {out}")


def apply_epilogue(steps: Sequence[EpilogueStep], acc: np.ndarray, operands: Sequence[np.ndarray]) -> np.ndarray:
    """The fused steps on numpy arrays, each binary step taking the next operand (float64 results, from a float64
    bias, are kept in float32)."""
    rest = iter(operands)
    for step in steps:
        acc = step.apply(acc, next(rest) if step.has_operand else None, lambda op, args: op.reference(*args))
        acc = acc.astype(np.float32, copy=False) if acc.dtype == np.float64 else acc
    return acc

"""Elementwise math of one tensor: ONNX Exp, Log, Sqrt, Reciprocal, Erf, Sin, Cos, Floor, Ceil, Round, Neg, Abs and
the activations Elu, Selu, Softsign, Mish and Gelu, each one formula (``elementwise.Unary``).

Neg and Abs take signed integer tensors too (Abs unsigned ones as well), as onnxruntime does. Round rounds half to
even (C's ``rint`` in the default rounding mode). Elu and Selu are branch-free, ``max(x, 0) + alpha * (exp(min(x,
0)) - 1)``; Mish is ``x * tanh(softplus(x))`` with softplus's overflow-free formula.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ..graph.errors import GraphError
from ..graph.op import check_count, is_float
from .elementwise import Unary, int_kind
from .onnx_convert import ImportContext, OnnxNode, Reject, converter, simple
from .softplus import Softplus


class IntegerUnary(Unary):
    """A unary operator of float or integer tensors (unsigned ones only where ``unsigned``)."""

    __slots__ = ()
    unsigned: ClassVar[bool] = True

    def infer(self, inputs):
        check_count(self, inputs, 1)
        dt = inputs[0].dtype
        if not is_float(dt) and int_kind(dt) not in ("i", "u" if self.unsigned else "i"):
            kinds = "float or integer" if self.unsigned else "float or signed integer"
            raise GraphError(f"{self.kind}: the input must be a {kinds} tensor, got {dt}")
        return (inputs[0],)


@dataclass(frozen=True, slots=True)
class Neg(IntegerUnary):
    name = "neg"
    unsigned = False

    def formula(self, xs, m):
        return -xs[0]


@dataclass(frozen=True, slots=True)
class Abs(IntegerUnary):
    name = "abs"

    def formula(self, xs, m):
        return m.abs(xs[0])


@dataclass(frozen=True, slots=True)
class Exp(Unary):
    name = "exp"

    def formula(self, xs, m):
        return m.exp(xs[0])


@dataclass(frozen=True, slots=True)
class Log(Unary):
    name = "log"

    def formula(self, xs, m):
        return m.log(xs[0])


@dataclass(frozen=True, slots=True)
class Sqrt(Unary):
    name = "sqrt"

    def formula(self, xs, m):
        return m.sqrt(xs[0])


@dataclass(frozen=True, slots=True)
class Reciprocal(Unary):
    name = "reciprocal"

    def formula(self, xs, m):
        return m.const(1) / xs[0]


@dataclass(frozen=True, slots=True)
class Erf(Unary):
    name = "erf"

    def formula(self, xs, m):
        return m.erf(xs[0])


@dataclass(frozen=True, slots=True)
class Sin(Unary):
    name = "sin"

    def formula(self, xs, m):
        return m.sin(xs[0])


@dataclass(frozen=True, slots=True)
class Cos(Unary):
    name = "cos"

    def formula(self, xs, m):
        return m.cos(xs[0])


@dataclass(frozen=True, slots=True)
class Floor(Unary):
    name = "floor"

    def formula(self, xs, m):
        return m.floor(xs[0])


@dataclass(frozen=True, slots=True)
class Ceil(Unary):
    name = "ceil"

    def formula(self, xs, m):
        return m.ceil(xs[0])


@dataclass(frozen=True, slots=True)
class Round(Unary):
    """To the nearest integer, half to even."""

    name = "round"

    def formula(self, xs, m):
        return m.round(xs[0])


def _exp_minus_one_below_zero(x, m):
    """``exp(min(x, 0)) - 1``: ``exp(x) - 1`` for x <= 0, 0 above (no overflow for large x)."""
    return m.exp(m.minimum(x, m.const(0))) - m.const(1)


@dataclass(frozen=True, slots=True)
class Elu(Unary):
    """``x if x > 0 else alpha * (exp(x) - 1)``."""

    name = "elu"
    alpha: float = 1.0

    def formula(self, xs, m):
        x = xs[0]
        return m.maximum(x, m.const(0)) + m.const(self.alpha) * _exp_minus_one_below_zero(x, m)


#: ONNX's defaults of Selu (the constants of self-normalizing networks, as float32)
SELU_ALPHA, SELU_GAMMA = 1.67326319217681884765625, 1.05070102214813232421875


@dataclass(frozen=True, slots=True)
class Selu(Unary):
    """``gamma * (x if x > 0 else alpha * (exp(x) - 1))``."""

    name = "selu"
    alpha: float = SELU_ALPHA
    gamma: float = SELU_GAMMA

    def formula(self, xs, m):
        x = xs[0]
        return m.const(self.gamma) * (m.maximum(x, m.const(0)) + m.const(self.alpha) * _exp_minus_one_below_zero(x, m))


@dataclass(frozen=True, slots=True)
class Softsign(Unary):
    """``x / (1 + |x|)``."""

    name = "softsign"

    def formula(self, xs, m):
        return xs[0] / (m.const(1) + m.abs(xs[0]))


@dataclass(frozen=True, slots=True)
class Mish(Unary):
    """``x * tanh(softplus(x))``."""

    name = "mish"

    def formula(self, xs, m):
        return xs[0] * m.tanh(Softplus().formula(xs, m))


@dataclass(frozen=True, slots=True)
class Gelu(Unary):
    """``x * Phi(x)``, Phi the normal distribution: ``0.5 * x * (1 + erf(x / sqrt(2)))``, or with ``approximate=
    "tanh"``, ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))``."""

    name = "gelu"
    approximate: str = "none"

    def __post_init__(self) -> None:
        if self.approximate not in ("none", "tanh"):
            raise GraphError(f"Gelu: approximate must be 'none' or 'tanh', got {self.approximate!r}")

    def formula(self, xs, m):
        x = xs[0]
        if self.approximate == "tanh":
            inner = m.const(math.sqrt(2 / math.pi)) * (x + m.const(0.044715) * x * x * x)
            phi = m.tanh(inner)
        else:
            phi = m.erf(x * m.const(1 / math.sqrt(2)))
        return m.const(0.5) * x * (m.const(1) + phi)


for _type, _cls in (("Neg", Neg), ("Abs", Abs), ("Exp", Exp), ("Log", Log), ("Sqrt", Sqrt),
                    ("Reciprocal", Reciprocal), ("Erf", Erf), ("Sin", Sin), ("Cos", Cos), ("Floor", Floor),
                    ("Ceil", Ceil), ("Round", Round), ("Softsign", Softsign), ("Mish", Mish)):
    simple(_type, _cls)
simple("Elu", Elu, {"alpha": 1.0})
simple("Selu", Selu, {"alpha": SELU_ALPHA, "gamma": SELU_GAMMA})


@converter("Gelu", attrs=("approximate",), since=20)
def _gelu(ctx: ImportContext, node: OnnxNode) -> None:
    approximate = node.str_attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise Reject(f"approximate={approximate!r} is not supported (only 'none' and 'tanh')")
    ctx.emit(Gelu(approximate), [node.input(0)], node.outputs, node.name)

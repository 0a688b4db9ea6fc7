"""Softplus: ``log(1 + exp(x))``, elementwise.

Computed as ``max(x, 0) + log(1 + exp(-|x|))``, which equals it and overflows for no float: ``exp(x)`` itself
would be infinite for x > 88 in float32, where softplus is x.
"""
from __future__ import annotations

from dataclasses import dataclass

from .elementwise import Unary
from .onnx_convert import simple


@dataclass(frozen=True, slots=True)
class Softplus(Unary):
    name = "softplus"

    def formula(self, xs, m):
        x = xs[0]
        return m.maximum(x, m.const(0)) + m.log(m.const(1) + m.exp(-m.abs(x)))


simple("Softplus", Softplus)

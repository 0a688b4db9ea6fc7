"""IsNaN and IsInf: which elements of a float tensor are NaN, or infinite (of the signs asked for), as bools.

The dynamo exporter writes scaled dot-product attention with a mask as ``Where(IsNaN(softmax), 0, softmax)`` (rows
masked everywhere give NaN). NaN is the one value unequal to itself, so IsNaN is ``x != x`` (kernels are compiled
without fast-math, which would fold it). Like the comparisons they fuse into chains of element-by-element
operators and never into a convolution's epilogue (their output is bool).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph.ir import TensorType
from ..graph.op import check_count, check_float
from .compare import MixedElementwise
from .math import NumpyMath
from .onnx_convert import simple


class _FloatClass(MixedElementwise):
    """A test of each element of one float tensor, a bool tensor of its shape."""

    __slots__ = ()

    def infer(self, inputs):
        check_count(self, inputs, 1)
        check_float(self, inputs[0], "the input")
        return (TensorType(inputs[0].shape, "bool"),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(self.formula((x,), NumpyMath(x.dtype)), bool)


@dataclass(frozen=True, slots=True)
class IsNaN(_FloatClass):
    name = "is_nan"

    def formula(self, xs, m):
        return m.not_equal(xs[0], xs[0])


@dataclass(frozen=True, slots=True)
class IsInf(_FloatClass):
    """``x == +inf`` where ``detect_positive``, ``x == -inf`` where ``detect_negative``."""

    name = "is_inf"
    detect_positive: int = 1
    detect_negative: int = 1

    def formula(self, xs, m):
        x, inf = xs[0], float("inf")
        tests = [m.equal(x, m.const(s * inf)) for s, on in ((1, self.detect_positive), (-1, self.detect_negative)) if on]
        if not tests:
            return x > m.const(inf)  # no sign asked for: false everywhere (no float is above infinity)
        return tests[0] | tests[1] if len(tests) == 2 else tests[0]


simple("IsNaN", IsNaN, since=9)
simple("IsInf", IsInf, {"detect_positive": 1, "detect_negative": 1}, since=10)

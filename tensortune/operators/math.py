"""The functions formulas are written with, so that an elementwise operator is defined once: the same formula
computes numpy arrays in the interpreter (``NumpyMath``) and tensor expressions in kernels (``TeMath``).

A formula is a function ``(inputs, m) -> value`` using Python's arithmetic operators on its inputs and ``m``'s
functions: ``m.const(v)``, ``m.maximum``, ``m.minimum``, ``m.select(cond, a, b)``, comparisons ``m.less(a, b)``,
``m.equal``, ``m.not_equal`` (``<``, ``<=``, ``>``, ``>=`` and, on booleans, ``&``, ``|``, ``~`` work on both kinds
of values), and every math function of ``te.MathFunc`` by its name (``m.exp(x)``, ``m.pow(x, y)``; defined by the
one table ``te.MATH_FUNCTIONS``, which the C and CUDA code generators read too).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import te
from ..te import MATH_FUNCTIONS, MathFunc


class Math:
    """The functions of a formula over values of one dtype (see the module docstring)."""

    def const(self, value: float) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def call(self, func: MathFunc, *xs: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def maximum(self, a: Any, b: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def minimum(self, a: Any, b: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def select(self, cond: Any, a: Any, b: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def less(self, a: Any, b: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def equal(self, a: Any, b: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def not_equal(self, a: Any, b: Any) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def __getattr__(self, name: str):
        """``m.exp``, ``m.log``...: the math function of that name (``MathFunc``)."""
        try:
            func = MathFunc(name)
        except ValueError:
            raise AttributeError(f"{type(self).__name__} has no function {name!r}; the math functions are "
                                 f"{', '.join(f.value for f in MathFunc)}") from None
        return lambda *xs: self.call(func, *xs)


class NumpyMath(Math):
    """Numpy functions on arrays of one dtype (constants take that dtype)."""

    def __init__(self, dtype: np.dtype):
        self.dtype = np.dtype(dtype)

    def const(self, value: float):
        return self.dtype.type(value)

    def call(self, func: MathFunc, *xs):
        return MATH_FUNCTIONS[func].numpy(*xs)

    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    select = staticmethod(np.where)
    less = staticmethod(np.less)
    equal = staticmethod(np.equal)
    not_equal = staticmethod(np.not_equal)


class TeMath(Math):
    """Tensor-expression functions on expressions of one dtype."""

    def __init__(self, dtype):
        self.dtype = dtype

    def const(self, value: float) -> te.Expr:
        return te.const(value, self.dtype)

    def call(self, func: MathFunc, *xs: te.Expr) -> te.Expr:
        return te.call(func, *xs)

    maximum = staticmethod(te.maximum)
    minimum = staticmethod(te.minimum)
    select = staticmethod(te.select)
    equal = staticmethod(te.equal)
    not_equal = staticmethod(te.not_equal)

    @staticmethod
    def less(a: te.Expr, b: te.Expr) -> te.Expr:
        return a < b

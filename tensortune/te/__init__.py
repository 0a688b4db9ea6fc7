"""Tensor expressions: declare *what* an operator computes."""
from .expr import (MATH_FUNCTIONS, AxisKind, BinOp, Call, Cast, CmpOp, Compare, Const, Expr, IterVar, MathFunc,
                   MathImpl, Reduce, Reducer, Select, TensorRead, Var, abs_, as_expr, call, cast, const, equal, exp,
                   floor, if_then_else, log, logical_and, max, maximum, min, minimum, not_equal, prod, reduce_axis,
                   select, sigmoid, sqrt, sum, tanh)
from .tensor import ComputeOp, PlaceholderOp, Tensor, compute, placeholder, scan

__all__ = [
    "AxisKind", "BinOp", "Call", "Cast", "CmpOp", "Compare", "ComputeOp", "Const", "Expr", "IterVar",
    "MATH_FUNCTIONS", "MathFunc", "MathImpl", "PlaceholderOp", "Reduce", "Reducer", "Select", "Tensor", "TensorRead",
    "Var", "abs_", "as_expr", "call", "cast",
    "compute", "const", "equal", "exp", "floor", "if_then_else", "log", "logical_and", "max", "maximum", "min",
    "minimum", "not_equal", "placeholder", "prod", "reduce_axis", "scan", "select", "sigmoid", "sqrt", "sum",
    "tanh",
]

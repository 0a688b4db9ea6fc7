"""Readable text for expressions (used by ``str(expr)`` and the loop-IR printer)."""
from __future__ import annotations

from .expr import Binary, BinOp, Call, Cast, Compare, Const, Expr, IterVar, Not, Reduce, Select, TensorRead, Var

_PREC = {BinOp.OR: 1, BinOp.AND: 2, BinOp.ADD: 4, BinOp.SUB: 4, BinOp.MUL: 5, BinOp.DIV: 5,
         BinOp.FLOORDIV: 5, BinOp.FLOORMOD: 5}
_CMP_PREC = 3


def expr_str(e: Expr) -> str:
    return _str(e)[0]


def _wrap(e: Expr, min_prec: int, right: bool = False) -> str:
    s, p = _str(e)
    return f"({s})" if p < min_prec or (right and p == min_prec) else s


def _str(e) -> tuple[str, int]:
    """Text of ``e`` and its precedence (higher binds tighter)."""
    if isinstance(e, Var):
        return e.name, 9
    if isinstance(e, IterVar):
        return e.name, 9
    if isinstance(e, Const):
        if e.dtype.is_float:
            v = repr(e.value)
            return (v if e.dtype.value == "float32" else f"{v}f64"), 9
        return str(e.value), 9 if e.value >= 0 else 6
    if isinstance(e, Binary):
        if e.op in (BinOp.MIN, BinOp.MAX):
            return f"{e.op.value}({expr_str(e.a)}, {expr_str(e.b)})", 9
        p = _PREC[e.op]
        return f"{_wrap(e.a, p)} {e.op.value} {_wrap(e.b, p, right=True)}", p
    if isinstance(e, Compare):
        return f"{_wrap(e.a, _CMP_PREC + 1)} {e.op.value} {_wrap(e.b, _CMP_PREC + 1)}", _CMP_PREC
    if isinstance(e, Not):
        return f"!{_wrap(e.a, 8)}", 8
    if isinstance(e, Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.true_value)}, {expr_str(e.false_value)})", 9
    if isinstance(e, Cast):
        return f"{e.to.value}({expr_str(e.value)})", 9
    if isinstance(e, Call):
        return f"{e.func.value}({', '.join(expr_str(a) for a in e.args)})", 9
    if isinstance(e, TensorRead):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]", 9
    if isinstance(e, Reduce):
        axes = ", ".join(f"{a.name}:{a.extent}" for a in e.axes)
        return f"{e.combiner.value}({expr_str(e.source)}, axis=[{axes}])", 9
    text = getattr(e, "text", None)
    if text is not None:
        return text(expr_str), 9
    return repr(e), 9

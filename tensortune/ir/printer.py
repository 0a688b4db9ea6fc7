"""Readable, Python-like text for expressions and loop IR (``str(expr)``, ``print(func)``)."""
from __future__ import annotations

from ..te.expr import (Binary, BinOp, Call, Cast, Compare, Const, Expr, IterVar, Not, Reduce, Select, TensorRead,
                       Var)
from .nodes import Allocate, Barrier, For, ForKind, IfThenElse, Load, Prefetch, PrimFunc, Seq, Stmt, Store
from .visitor import Visitor

_PREC = {BinOp.OR: 1, BinOp.AND: 2, BinOp.ADD: 4, BinOp.SUB: 4, BinOp.MUL: 5, BinOp.DIV: 5,
         BinOp.FLOORDIV: 5, BinOp.FLOORMOD: 5}
_CMP_PREC = 3
_ATOM = 9  # precedence of names, literals and calls


def expr_str(e: Expr) -> str:
    return _EXPR.visit(e)[0]


def stmt_str(s: Stmt) -> str:
    printer = _StmtPrinter(0)
    printer.visit(s)
    return "\n".join(printer.lines)


def func_str(f: PrimFunc) -> str:
    def sig(b):
        return f"{b.name}: {b.dtype.value}{list(b.shape)}"

    printer = _StmtPrinter(1)
    printer.lines.append(f"def {f.name}({', '.join(sig(b) for b in f.args)}):")
    for w in f.workspaces:
        printer.lines.append(f"  workspace {sig(w)}")
    printer.visit(f.body)
    return "\n".join(printer.lines)


class _ExprPrinter(Visitor):
    """Each method returns ``(text, precedence)``; higher binds tighter."""

    def wrap(self, e: Expr, min_prec: int, right: bool = False) -> str:
        s, p = self.visit(e)
        return f"({s})" if p < min_prec or (right and p == min_prec) else s

    def visit_Var(self, e: Var):
        return e.name, _ATOM

    def visit_IterVar(self, e: IterVar):
        return e.name, _ATOM

    def visit_Const(self, e: Const):
        if e.dtype.is_float:
            v = repr(e.value)
            return (v if e.dtype.value == "float32" else f"{v}f64"), _ATOM
        return str(e.value), _ATOM if e.value >= 0 else 6

    def visit_Binary(self, e: Binary):
        if e.op in (BinOp.MIN, BinOp.MAX):
            return f"{e.op.value}({expr_str(e.a)}, {expr_str(e.b)})", _ATOM
        p = _PREC[e.op]
        return f"{self.wrap(e.a, p)} {e.op.value} {self.wrap(e.b, p, right=True)}", p

    def visit_Compare(self, e: Compare):
        return f"{self.wrap(e.a, _CMP_PREC + 1)} {e.op.value} {self.wrap(e.b, _CMP_PREC + 1)}", _CMP_PREC

    def visit_Not(self, e: Not):
        return f"!{self.wrap(e.a, 8)}", 8

    def visit_Select(self, e: Select):
        return f"select({expr_str(e.cond)}, {expr_str(e.true_value)}, {expr_str(e.false_value)})", _ATOM

    def visit_Cast(self, e: Cast):
        return f"{e.to.value}({expr_str(e.value)})", _ATOM

    def visit_Call(self, e: Call):
        return f"{e.func.value}({', '.join(expr_str(a) for a in e.args)})", _ATOM

    def visit_TensorRead(self, e: TensorRead):
        return f"{e.tensor.name}[{', '.join(expr_str(i) for i in e.indices)}]", _ATOM

    def visit_Reduce(self, e: Reduce):
        axes = ", ".join(f"{a.name}:{a.extent}" for a in e.axes)
        return f"{e.combiner.value}({expr_str(e.source)}, axis=[{axes}])", _ATOM

    def visit_Load(self, e: Load):
        return f"{e.buffer.name}[{expr_str(e.index)}]", _ATOM

    def generic_visit(self, e):
        return repr(e), _ATOM


_EXPR = _ExprPrinter()


class _StmtPrinter(Visitor):
    """Appends one line per statement to ``lines``, indented by loop depth."""

    def __init__(self, depth: int):
        self.depth = depth
        self.lines: list[str] = []

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    def nested(self, s: Stmt) -> None:
        self.depth += 1
        self.visit(s)
        self.depth -= 1

    def visit_Seq(self, s: Seq) -> None:
        for x in s.stmts:
            self.visit(x)

    def visit_For(self, s: For) -> None:
        kind = "" if s.kind is ForKind.SERIAL else f"  # {s.kind.value}"
        self.emit(f"for {s.var.name} in range({s.extent}):{kind}")
        self.nested(s.body)

    def visit_Store(self, s: Store) -> None:
        self.emit(f"{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}")

    def visit_IfThenElse(self, s: IfThenElse) -> None:
        self.emit(f"if {expr_str(s.cond)}:")
        self.nested(s.then)
        if s.otherwise is not None:
            self.emit("else:")
            self.nested(s.otherwise)

    def visit_Allocate(self, s: Allocate) -> None:
        b = s.buffer
        self.emit(f"{b.name} = allocate({b.dtype.value}{list(b.shape)}, {b.scope.value})")
        self.visit(s.body)

    def visit_Barrier(self, s: Barrier) -> None:
        self.emit("barrier()  # __syncthreads")

    def visit_Prefetch(self, s: Prefetch) -> None:
        self.emit(f"prefetch({s.buffer.name}[{expr_str(s.index)}])")

    def visit_Stmt(self, s: Stmt) -> None:  # pragma: no cover - a node kind the printer does not know
        raise AssertionError(f"the printer has no rule for statement {type(s).__name__}")

"""Pure IR-to-IR passes over a ``PrimFunc``. None mutates its input."""
from __future__ import annotations

from dataclasses import replace

from ..ir.nodes import Allocate, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store, seq
from ..te.expr import Const, substitute
from ..arith import Ranges, simplify

_EMPTY = Seq(())

#: Unrolled loops up to this extent are replicated into straight-line code; longer ones keep a loop
#: with an unroll pragma, so a bad config cannot blow up the size of the generated source.
MAX_UNROLL_EXTENT = 64
MAX_UNROLL_BODY = 4096


def simplify_func(func: PrimFunc) -> PrimFunc:
    """Simplify every expression using loop ranges; fold constant guards; drop empty code."""
    return replace(func, body=_simplify(func.body, {}) or _EMPTY)


def _simplify(s: Stmt, ranges: Ranges) -> Stmt | None:
    if isinstance(s, Seq):
        parts = [x for x in (_simplify(x, ranges) for x in s.stmts) if x is not None]
        return seq(*parts) if parts else None
    if isinstance(s, For):
        body = _simplify(s.body, {**ranges, s.var: (0, s.extent - 1)})
        return None if body is None else replace(s, body=body)
    if isinstance(s, Store):
        return Store(s.buffer, simplify(s.index, ranges), simplify(s.value, ranges))
    if isinstance(s, IfThenElse):
        cond = simplify(s.cond, ranges)
        then = _simplify(s.then, ranges)
        other = _simplify(s.otherwise, ranges) if s.otherwise is not None else None
        if isinstance(cond, Const):
            return then if cond.value else other
        if then is None and other is None:
            return None
        return IfThenElse(cond, then or _EMPTY, other)
    if isinstance(s, Allocate):
        body = _simplify(s.body, ranges)
        return None if body is None else replace(s, body=body)
    raise AssertionError(f"unknown statement {type(s).__name__}")


def remove_unit_loops(func: PrimFunc) -> PrimFunc:
    """Replace loops of extent 1 by their body with the variable set to 0."""

    def visit(s: Stmt) -> Stmt:
        if isinstance(s, For):
            body = visit(s.body)
            if s.extent == 1:
                return substitute(body, {s.var: Const(0)})
            return replace(s, body=body)
        return _map_children(s, visit)

    return replace(func, body=visit(func.body))


def unroll_loops(func: PrimFunc) -> PrimFunc:
    """Replicate the body of each unrolled loop (innermost first) into straight-line code."""

    def visit(s: Stmt) -> Stmt:
        if isinstance(s, For):
            body = visit(s.body)
            if s.kind is ForKind.UNROLLED and s.extent <= MAX_UNROLL_EXTENT and \
                    s.extent * _size(body) <= MAX_UNROLL_BODY:
                return seq(*(substitute(body, {s.var: Const(i)}) for i in range(s.extent)))
            return replace(s, body=body)
        return _map_children(s, visit)

    return replace(func, body=visit(func.body))


def _size(s: Stmt) -> int:
    if isinstance(s, Seq):
        return sum(_size(x) for x in s.stmts)
    if isinstance(s, (For, Allocate)):
        return 1 + _size(s.body)
    if isinstance(s, IfThenElse):
        return 1 + _size(s.then) + (_size(s.otherwise) if s.otherwise is not None else 0)
    return 1


def _map_children(s: Stmt, f) -> Stmt:
    if isinstance(s, Seq):
        return seq(*(f(x) for x in s.stmts)) if s.stmts else s
    if isinstance(s, (For, Allocate)):
        return replace(s, body=f(s.body))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, f(s.then), f(s.otherwise) if s.otherwise is not None else None)
    return s

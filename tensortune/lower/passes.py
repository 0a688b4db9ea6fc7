"""Pure IR-to-IR passes over a ``PrimFunc``. None mutates its input.

Each pass is ``pass(func, analyzer) -> func``; the analyzer is the lowering's (see ``tensortune.arith``).
"""
from __future__ import annotations

from dataclasses import replace

from ..arith import Analyzer, Ranges
from ..ir.nodes import Allocate, Barrier, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store, seq
from ..ir.visitor import Mutator, Visitor
from ..te.expr import BinOp, Binary, CmpOp, Compare, Const, Expr, free_vars, substitute, transform, walk

_EMPTY = Seq(())

#: Unrolled loops up to this extent are replicated into straight-line code; longer ones keep a loop
#: with an unroll pragma, so a bad config cannot blow up the size of the generated source.
MAX_UNROLL_EXTENT = 64
MAX_UNROLL_BODY = 4096


def simplify_func(func: PrimFunc, analyzer: Analyzer | None = None) -> PrimFunc:
    """Simplify every expression using loop ranges; fold constant guards; drop empty code."""
    return replace(func, body=_Simplify(analyzer or Analyzer()).visit(func.body) or _EMPTY)


class _Simplify(Mutator):
    """Returns the simplified statement, or None when nothing of it is left."""

    def __init__(self, analyzer: Analyzer):
        self.ana = analyzer
        self.ranges: Ranges = {}

    def visit_Seq(self, s: Seq) -> Stmt | None:
        parts = [x for x in (self.visit(x) for x in s.stmts) if x is not None]
        return seq(*parts) if parts else None

    def visit_For(self, s: For) -> Stmt | None:
        saved = self.ranges
        self.ranges = {**saved, s.var: (0, s.extent - 1)}
        body = self.visit(s.body)
        self.ranges = saved
        return None if body is None else replace(s, body=body)

    def visit_Store(self, s: Store) -> Stmt:
        return Store(s.buffer, self.ana.simplify(s.index, self.ranges), self.ana.simplify(s.value, self.ranges))

    def visit_IfThenElse(self, s: IfThenElse) -> Stmt | None:
        cond = self.ana.simplify(s.cond, self.ranges)
        then = self.visit(s.then)
        other = self.visit(s.otherwise) if s.otherwise is not None else None
        if isinstance(cond, Const):
            return then if cond.value else other
        if then is None and other is None:
            return None
        return IfThenElse(cond, then or _EMPTY, other)

    def visit_Allocate(self, s: Allocate) -> Stmt | None:
        body = self.visit(s.body)
        return None if body is None else replace(s, body=body)

    def visit_Barrier(self, s: Barrier) -> Stmt:
        return s

    def visit_Stmt(self, s: Stmt) -> Stmt:  # pragma: no cover - a node kind this pass does not know
        raise AssertionError(f"simplify has no rule for statement {type(s).__name__}")


def remove_unit_loops(func: PrimFunc, analyzer: Analyzer | None = None) -> PrimFunc:
    """Replace loops of extent 1 by their body with the variable set to 0."""
    return replace(func, body=_RemoveUnitLoops().visit(func.body))


class _StmtMutator(Mutator):
    """Rebuilds statements only: expressions are returned as they are (passes that rewrite loops)."""

    def visit_Expr(self, e: Expr) -> Expr:
        return e

    def visit_Seq(self, s: Seq) -> Stmt:
        return seq(*(self.visit(x) for x in s.stmts)) if s.stmts else s


class _RemoveUnitLoops(_StmtMutator):
    def visit_For(self, s: For) -> Stmt:
        body = self.visit(s.body)
        if s.extent == 1:
            return substitute(body, {s.var: Const(0)})
        return replace(s, body=body)


def unroll_loops(func: PrimFunc, analyzer: Analyzer | None = None) -> PrimFunc:
    """Replicate the body of each unrolled loop (innermost first) into straight-line code."""
    return replace(func, body=_UnrollLoops().visit(func.body))


class _UnrollLoops(_StmtMutator):
    def visit_For(self, s: For) -> Stmt:
        body = self.visit(s.body)
        if s.kind is ForKind.UNROLLED and s.extent <= MAX_UNROLL_EXTENT and \
                s.extent * _size(body) <= MAX_UNROLL_BODY:
            return seq(*(substitute(body, {s.var: Const(i)}) for i in range(s.extent)))
        return replace(s, body=body)


def partition_clamps(func: PrimFunc, analyzer: Analyzer | None = None) -> PrimFunc:
    """Give each innermost loop that clamps an index (``min(j, n - 1)``: a padded tile reading the last row or
    column again) a clamp-free copy for the iterations of the enclosing loops where no clamp can bite:
    ``if (clamp idle over the whole loop) loop-without-clamps else loop-as-it-was``. The test depends only on
    enclosing loops, so the C compiler hoists it out of them: every tile but the last runs plain contiguous
    code (a packing loop vectorizes again instead of clamping element by element)."""
    return replace(func, body=_PartitionClamps(analyzer or Analyzer()).visit(func.body))


class _PartitionClamps(_StmtMutator):
    KINDS = (ForKind.SERIAL, ForKind.VECTORIZED)

    def __init__(self, analyzer: Analyzer):
        self.ana = analyzer

    def visit_For(self, s: For) -> Stmt:
        if s.kind not in self.KINDS or any(isinstance(n, For) for n in walk(s.body)):
            return replace(s, body=self.visit(s.body))
        conds = []
        for clamp in dict.fromkeys(n for n in walk(s.body) if self._is_clamp(n, s.var)):
            idle = self._idle(clamp, s.var, s.extent)
            if idle is not None and not (isinstance(idle, Const) and not idle.value):  # never idle: keep it
                conds.append((clamp, idle))
        if not conds:
            return s
        idle_clamps = {c for c, _ in conds}
        clean = transform(s, lambda n: n.a if isinstance(n, Binary) and n in idle_clamps else n)
        tests = [c for _, c in conds if not isinstance(c, Const)]  # a constant one here is always idle
        if not tests:
            return clean
        test = tests[0]
        for c in tests[1:]:
            test = Binary(BinOp.AND, test, c)
        return IfThenElse(test, clean, s)

    @staticmethod
    def _is_clamp(n, var) -> bool:
        return isinstance(n, Binary) and n.op in (BinOp.MIN, BinOp.MAX) and isinstance(n.b, Const) \
            and n.a.dtype.is_int and var in free_vars(n.a)

    def _idle(self, clamp: Binary, var, extent: int) -> Expr | None:
        """The condition under which ``clamp`` returns its first operand for every value of ``var``; None
        unless that operand moves with ``var`` linearly (then its extreme is at the first or last iteration)."""
        terms, _ = self.ana.linear(clamp.a)
        coef = terms.get(var)
        if coef is None or any(var in free_vars(atom) for atom in terms if atom is not var):
            return None
        at = Const(extent - 1 if (coef > 0) == (clamp.op is BinOp.MIN) else 0, var.dtype)
        end = substitute(clamp.a, {var: at})
        return self.ana.simplify(Compare(CmpOp.LE if clamp.op is BinOp.MIN else CmpOp.GE, end, clamp.b))


def _size(s: Stmt) -> int:
    """Statements in ``s`` (loops, allocations and conditions count one each, plus their bodies)."""
    counter = _CountStmts()
    counter.visit(s)
    return counter.n


class _CountStmts(Visitor):
    def __init__(self):
        self.n = 0

    def visit_Expr(self, e: Expr) -> None:
        pass

    def visit_Seq(self, s: Seq) -> None:
        for x in s.stmts:
            self.visit(x)

    def visit_Stmt(self, s: Stmt) -> None:
        self.n += 1
        self.generic_visit(s)

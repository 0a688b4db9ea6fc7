"""Pure IR-to-IR passes over a ``PrimFunc``. None mutates its input.

Each pass is ``pass(func, analyzer) -> func``; the analyzer is the lowering's (see ``tensortune.arith``).
"""
from __future__ import annotations

from dataclasses import replace

from ..arith import Analyzer, Ranges
from ..ir.nodes import (Allocate, Barrier, For, ForKind, IfThenElse, Load, Prefetch, PrimFunc, Seq, Stmt, Store,
                        seq)
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

    def visit_Prefetch(self, s: Prefetch) -> Stmt:
        return Prefetch(s.buffer, self.ana.simplify(s.index, self.ranges))

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


def partition_tails(func: PrimFunc, analyzer: Analyzer | None = None) -> PrimFunc:
    """Give the full tiles of a non-dividing tiling code without what only the last tile needs: the clamps of
    a padded tile's reads (``min(i, n - 1)``: the last row or column again) and the guards of its writes
    (``if (j < n)``).

    - an innermost loop whose clamped index, or guard, moves linearly with it: ``if (none bites over the
      whole loop) loop-without-them else loop-as-it-was``. The test depends only on enclosing loops, so the C
      compiler hoists it out of them: a packing loop copies whole vectors again instead of clamping each
      element, and a tile's copy-out stores whole vectors instead of testing each element.
    - any other loop whose variable is the innermost one in at least ``MIN_CLAMPS_PER_ITERATION`` clamped
      indices: its body becomes ``if (no clamp bites in this iteration) body-without-clamps else body`` (a
      register tile's rows are then one pointer and constant offsets, not one clamped pointer per row, in all
      its tiles but the last).
    """
    return replace(func, body=_PartitionTails(analyzer or Analyzer()).visit(func.body))


#: Splitting a loop's body per iteration pays only when its clamps are many: each clamped row index of a
#: register tile holds a pointer register of its own. Measured on AVX-512 (AMD EPYC Zen 5, 2 threads): 11
#: clamped rows of a 12x32 or 14x32 matmul tile, 1.08-1.19x; 4 rows of an 11x16 tile, 1.00x; the 1 or 2
#: clamped columns of few-divisor convolutions, 0.86-0.91x (innermost loops alone there: 1.06-1.18x).
MIN_CLAMPS_PER_ITERATION = 6

_FLIP = {CmpOp.LT: CmpOp.GT, CmpOp.LE: CmpOp.GE, CmpOp.GT: CmpOp.LT, CmpOp.GE: CmpOp.LE}


class _PartitionTails(_StmtMutator):
    KINDS = (ForKind.SERIAL, ForKind.VECTORIZED, ForKind.UNROLLED, ForKind.PARALLEL)

    def __init__(self, analyzer: Analyzer):
        self.ana = analyzer
        self.ranges: Ranges = {}

    def visit_For(self, s: For) -> Stmt:
        saved = self.ranges
        self.ranges = {**saved, s.var: (0, s.extent - 1)}
        try:
            return self._partition(s, self.visit(s.body), saved)
        finally:
            self.ranges = saved

    def _partition(self, s: For, body: Stmt, outer: Ranges) -> Stmt:
        if s.kind not in self.KINDS:
            return replace(s, body=body)
        inner = {n.var for n in walk(body) if isinstance(n, For)}
        clamps = dict.fromkeys(n for n in walk(body) if isinstance(n, Binary) and n.op in (BinOp.MIN, BinOp.MAX)
                               and isinstance(n.b, Const) and n.a.dtype.is_int and s.var in free_vars(n.a)
                               and not free_vars(n.a) & inner)
        if not inner and s.kind is not ForKind.PARALLEL:  # innermost: test the whole loop's range at once
            guards = dict.fromkeys(n for n in walk(body) if isinstance(n, IfThenElse) and n.otherwise is None
                                   and s.var in free_vars(n.cond))
            if not clamps and not guards or not self._contiguous(body, s.var):
                return replace(s, body=body)
            self.ranges = outer
            tests = {c: self._holds_over(Compare(CmpOp.LE if c.op is BinOp.MIN else CmpOp.GE, c.a, c.b), s.var,
                                         s.extent) for c in clamps}
            tests |= {g: self._holds_over(g.cond, s.var, s.extent) for g in guards}
            return self._split(replace(s, body=body), tests)
        if len(clamps) < MIN_CLAMPS_PER_ITERATION:
            return replace(s, body=body)
        return replace(s, body=self._split(body, {c: self._holds(Compare(
            CmpOp.LE if c.op is BinOp.MIN else CmpOp.GE, c.a, c.b)) for c in clamps}))

    def _contiguous(self, body: Stmt, var) -> bool:
        """Whether every access of ``body`` moves by 0 or 1 element per step of ``var``, clamps aside: what a
        loop needs to become whole-vector loads and stores once its clamps and guards are gone. (A strided
        one, e.g. a transposing copy, would gather element by element anyway; it keeps its single loop.)"""
        for n in walk(body):
            if isinstance(n, (Load, Store)):
                index = transform(n.index, lambda e: e.a if isinstance(e, Binary) and e.op in (BinOp.MIN, BinOp.MAX)
                                  and isinstance(e.b, Const) else e)
                terms, _ = self.ana.linear(index)
                if terms.get(var, 0) not in (0, 1) or any(var in free_vars(a) for a in terms if a is not var):
                    return False
        return True

    def _split(self, stmt: Stmt, tests: dict) -> Stmt:
        """``if (every test) stmt-without-those-nodes else stmt``: a clamp goes as its first operand, a guard as
        its body. A node without a test, or whose test is false, stays in both; one whose test is true goes
        without a test."""
        tests = {n: t for n, t in tests.items() if t is not None and not (isinstance(t, Const) and not t.value)}
        if not tests:
            return stmt

        def drop(n):
            if n in tests:
                return n.then if isinstance(n, IfThenElse) else n.a
            return n

        simplify = _Simplify(self.ana)
        simplify.ranges = self.ranges  # the indices without their clamps, in canonical form again
        clean = simplify.visit(transform(stmt, lambda n: drop(n) if isinstance(n, (Binary, IfThenElse)) else n))
        conds = self._strongest([t for t in tests.values() if not isinstance(t, Const)])
        if not conds:
            return clean or _EMPTY
        cond = conds[0]
        for t in conds[1:]:
            cond = Binary(BinOp.AND, cond, t)
        return IfThenElse(cond, clean or _EMPTY, stmt)

    def _holds(self, cond: Expr) -> Expr:
        """``cond``, simplified in the ranges of the enclosing loops."""
        return self.ana.simplify(cond, self.ranges)

    def _holds_over(self, cond: Expr, var, extent: int) -> Expr | None:
        """A condition, free of ``var``, under which ``cond`` holds for every value of ``var`` in the loop; None
        unless ``cond`` is made of comparisons whose sides differ linearly in ``var`` (each is then weakest
        at the first or last iteration)."""
        if isinstance(cond, Binary) and cond.op is BinOp.AND:
            a, b = self._holds_over(cond.a, var, extent), self._holds_over(cond.b, var, extent)
            return None if a is None or b is None else self._holds(Binary(BinOp.AND, a, b))
        if not isinstance(cond, Compare) or cond.op not in _FLIP or not cond.a.dtype.is_int:
            return None
        if var not in free_vars(cond):
            return self._holds(cond)
        terms, _ = self.ana.linear(Binary(BinOp.SUB, cond.a, cond.b))
        coef = terms.get(var)
        if coef is None or any(var in free_vars(atom) for atom in terms if atom is not var):
            return None
        upper = cond.op in (CmpOp.LT, CmpOp.LE)  # a - b must stay below: weakest where it is largest
        at = Const(extent - 1 if (coef > 0) == upper else 0, var.dtype)
        return self._holds(substitute(cond, {var: at}))

    def _strongest(self, tests: list[Expr]) -> list[Expr]:
        """``tests`` without those another implies: of ``x + 3 <= n`` and ``x + 7 <= n``, the second."""
        best: dict = {}
        for t in tests:
            if not isinstance(t, Compare) or t.op not in _FLIP:
                best[t] = (t, 0)
                continue
            terms, c = self.ana.linear(Binary(BinOp.SUB, t.a, t.b))
            key = (t.op in (CmpOp.LT, CmpOp.LE), frozenset(terms.items()))
            c = c + (t.op is CmpOp.LT) if key[0] else -c + (t.op is CmpOp.GT)  # the larger, the stronger
            if key not in best or c > best[key][1]:
                best[key] = (t, c)
        return [t for t, _ in best.values()]


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

"""Integer arithmetic analysis: linear forms, interval bounds and expression simplification.

An ``Analyzer`` is created for one piece of work (a lowering, a code generation, the features of
one config) and passed to everything that analyses expressions there. It caches linear forms by
node identity, and remembers the sums and products it built itself in canonical form, which
``simplify`` then leaves as they are. The cache lives and dies with the analyzer: nothing is
global, and the result of an analysis never depends on what ran before in the process.

``Ranges`` maps loop variables to their inclusive integer bounds; simplification uses them to fold
comparisons (guards) and to remove ``//`` and ``%`` whose result is known.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from .dtype import DType
from .te.expr import (MATH_FUNCTIONS, Binary, BinOp, Call, Cast, CmpOp, Compare, Const, Expr, Not, Select, Var,
                      free_vars, transform)

Ranges = dict  # Var -> (lo, hi), inclusive

Linear = tuple  # (dict[Expr, int] atom -> coefficient, int constant)


class Analyzer:
    """Linear forms, bounds, simplification and access regions of integer expressions (see the module doc)."""

    def __init__(self, max_cache: int = 1 << 17):
        #: id(node) -> (node, linear form, canonical). Expressions are immutable, so a node's form never
        #: changes; the node is kept in the entry so its id cannot be reused while the entry exists.
        self._cache: dict[int, tuple[Expr, Linear, bool]] = {}
        self.max_cache = max_cache

    # ------------------------------------------------------------------ linear forms
    def linear(self, e: Expr) -> Linear:
        """Write an integer expression as ``sum(coef * atom) + const``; non-linear parts become atoms.

        The returned dict is shared (cached): callers must not modify it.
        """
        hit = self._cache.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = self._linear(e)
        self._remember(e, out, False)
        return out

    def _remember(self, e: Expr, form: Linear, canonical: bool) -> None:
        if len(self._cache) >= self.max_cache:
            self._cache.clear()
        self._cache[id(e)] = (e, form, canonical)

    def _is_canonical(self, e: Expr) -> bool:
        hit = self._cache.get(id(e))
        return hit is not None and hit[0] is e and hit[2]

    def _linear(self, e: Expr) -> Linear:
        if isinstance(e, Const):
            return {}, int(e.value)
        if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB):
            ta, ca = self.linear(e.a)
            tb, cb = self.linear(e.b)
            sign = 1 if e.op is BinOp.ADD else -1
            out = dict(ta)
            for k, v in tb.items():
                out[k] = out.get(k, 0) + sign * v
            out = {k: v for k, v in out.items() if v != 0}
            if len(out) > 1 and any(type(a) is Binary and a.op is BinOp.FLOORMOD for a in out):
                return self._merge_divmod(out, ca + sign * cb)
            return out, ca + sign * cb
        if isinstance(e, Binary) and e.op is BinOp.MUL:
            ta, ca = self.linear(e.a)
            tb, cb = self.linear(e.b)
            if not ta:
                return {k: v * ca for k, v in tb.items() if v * ca != 0}, ca * cb
            if not tb:
                return {k: v * cb for k, v in ta.items() if v * cb != 0}, ca * cb
        return {e: 1}, 0

    def _merge_divmod(self, terms: dict, c: int) -> Linear:
        """Fold ``k*d*(e // d) + k*(e % d)`` into ``k*e``: a fused loop split back into its two indices
        (``y = p // W``, ``x = p % W``) and flattened again (``y*W + x``) is the fused index ``p``."""
        for atom, coef in terms.items():
            if type(atom) is Binary and atom.op is BinOp.FLOORMOD and isinstance(atom.b, Const) and atom.b.value > 0:
                div = Binary(BinOp.FLOORDIV, atom.a, atom.b)
                if terms.get(div) == coef * atom.b.value:
                    merged = {k: v for k, v in terms.items() if k != atom and k != div}
                    inner, c_inner = self.linear(atom.a)
                    for k, v in inner.items():
                        merged[k] = merged.get(k, 0) + coef * v
                    return self._merge_divmod({k: v for k, v in merged.items() if v != 0}, c + coef * c_inner)
        return terms, c

    def from_linear(self, terms: dict, c: int, dtype: DType = DType.int32) -> Expr:
        """Rebuild an expression from a linear form: positive terms, then negative ones, then the constant.

        Every sum and product built here is already in this canonical form and its linear form is known:
        both are recorded, so that simplifying the result again costs time linear in its size.
        """
        out: Expr | None = None
        done: dict = {}

        def term(atom, coef) -> Expr:
            if coef in (1, -1):
                return atom
            return self._canonical(Binary(BinOp.MUL, atom, Const(abs(coef), dtype)), {atom: abs(coef)}, 0)

        for atom, coef in terms.items():
            if coef > 0:
                done[atom] = coef
                t = term(atom, coef)
                out = t if out is None else self._canonical(Binary(BinOp.ADD, out, t), dict(done), 0)
        for atom, coef in terms.items():
            if coef < 0:
                done[atom] = coef
                out = self._canonical(Binary(BinOp.SUB, Const(0, dtype) if out is None else out, term(atom, coef)),
                                      dict(done), 0)
        if out is None:
            return Const(c, dtype)
        if c > 0:
            return self._canonical(Binary(BinOp.ADD, out, Const(c, dtype)), done, c)
        if c < 0:
            return self._canonical(Binary(BinOp.SUB, out, Const(-c, dtype)), done, c)
        return out

    def _canonical(self, node: Binary, terms: dict, c: int) -> Binary:
        self._remember(node, (terms, c), True)
        return node

    # ------------------------------------------------------------------ bounds
    def bounds(self, e: Expr, ranges: Ranges) -> tuple[int, int] | None:
        """Inclusive integer bounds of ``e`` over ``ranges``, or None when unknown."""
        if isinstance(e, Const):
            return int(e.value), int(e.value)
        if isinstance(e, Var):
            return ranges.get(e)
        if isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB, BinOp.MUL):
            terms, c = self.linear(e)
            if len(terms) != 1 or next(iter(terms)) is not e:  # reducible to a linear form
                lo = hi = c
                for atom, coef in terms.items():
                    b = self.bounds(atom, ranges)
                    if b is None:
                        return None
                    lo += min(coef * b[0], coef * b[1])
                    hi += max(coef * b[0], coef * b[1])
                return lo, hi
            a, b = self.bounds(e.a, ranges), self.bounds(e.b, ranges)
            if a is None or b is None:
                return None
            ps = [x * y for x in a for y in b]
            return min(ps), max(ps)
        if isinstance(e, Binary) and e.op in (BinOp.FLOORDIV, BinOp.FLOORMOD) and isinstance(e.b, Const) \
                and e.b.value > 0:
            c = int(e.b.value)
            a = self.bounds(e.a, ranges)
            if e.op is BinOp.FLOORDIV:
                return None if a is None else (a[0] // c, a[1] // c)
            if a is not None and a[0] // c == a[1] // c:
                return a[0] % c, a[1] % c
            return 0, c - 1
        if isinstance(e, Binary) and e.op in (BinOp.MIN, BinOp.MAX):
            a, b = self.bounds(e.a, ranges), self.bounds(e.b, ranges)
            if a is None or b is None:
                return None
            f = min if e.op is BinOp.MIN else max
            return f(a[0], b[0]), f(a[1], b[1])
        if isinstance(e, Select):
            a, b = self.bounds(e.true_value, ranges), self.bounds(e.false_value, ranges)
            if a is None or b is None:
                return None
            return min(a[0], b[0]), max(a[1], b[1])
        return None

    # ------------------------------------------------------------------ simplification
    def simplify(self, e: Expr, ranges: Ranges | None = None) -> Expr:
        """Fold constants, canonicalise integer arithmetic and drop ``//``/``%``/guards known from ranges."""
        ranges = ranges or {}
        return transform(e, lambda n: self._rewrite(n, ranges) if isinstance(n, Expr) else n)

    def _rewrite(self, n: Expr, ranges: Ranges) -> Expr:
        if isinstance(n, Binary):
            return self._rewrite_binary(n, ranges)
        if isinstance(n, Compare):
            if isinstance(n.a, Const) and isinstance(n.b, Const):
                return _true(_CMP[n.op](n.a.value, n.b.value))
            if n.a.dtype.is_int:
                d = self.bounds(Binary(BinOp.SUB, n.a, n.b), ranges)
                if d is not None:
                    known = _decide(n.op, d)
                    if known is not None:
                        return _true(known)
            return n
        if isinstance(n, Not) and isinstance(n.a, Const):
            return _true(not n.a.value)
        if isinstance(n, Select) and isinstance(n.cond, Const):
            return n.true_value if n.cond.value else n.false_value
        if isinstance(n, Cast) and isinstance(n.value, Const):
            v = n.value.value
            if n.to.is_int and n.value.dtype.is_float:
                v = math.trunc(v)
            return Const(v, n.to)
        if isinstance(n, Call) and all(isinstance(a, Const) for a in n.args):
            with np.errstate(all="ignore"):  # outside the domain: NaN/inf, as C would compute
                xs = [np.asarray(a.value, dtype=n.dtype.numpy) for a in n.args]
                return Const(np.asarray(MATH_FUNCTIONS[n.func].numpy(*xs)).item(), n.dtype)
        return n

    def _rewrite_binary(self, n: Binary, ranges: Ranges) -> Expr:
        a, b, op = n.a, n.b, n.op
        if op in (BinOp.AND, BinOp.OR):
            for x, y in ((a, b), (b, a)):
                if isinstance(x, Const):
                    if op is BinOp.AND:
                        return y if x.value else _true(False)
                    return _true(True) if x.value else y
            return n
        if isinstance(a, Const) and isinstance(b, Const):
            return _fold(op, a, b)
        if not n.dtype.is_int:
            if op is BinOp.ADD and _is(b, 0) or op is BinOp.SUB and _is(b, 0):
                return a
            if op is BinOp.ADD and _is(a, 0):
                return b
            if op in (BinOp.MUL, BinOp.DIV) and _is(b, 1):
                return a
            if op is BinOp.MUL and _is(a, 1):
                return b
            return n
        if op in (BinOp.ADD, BinOp.SUB, BinOp.MUL):
            if self._is_canonical(n):
                return n
            terms, c = self.linear(n)
            return self.from_linear(terms, c, n.dtype)
        if op in (BinOp.FLOORDIV, BinOp.FLOORMOD) and isinstance(b, Const) and b.value > 0:
            return self._divmod(op, a, int(b.value), n, ranges)
        if op in (BinOp.MIN, BinOp.MAX):
            d = self.bounds(Binary(BinOp.SUB, a, b), ranges)
            if d is not None:
                if d[1] <= 0:
                    return a if op is BinOp.MIN else b
                if d[0] >= 0:
                    return b if op is BinOp.MIN else a
        return n

    def _divmod(self, op: BinOp, a: Expr, c: int, n: Expr, ranges: Ranges) -> Expr:
        if c == 1:
            return a if op is BinOp.FLOORDIV else Const(0, n.dtype)
        terms, k = self.linear(a)
        quot = {t: v // c for t, v in terms.items() if v % c == 0}
        rest = {t: v for t, v in terms.items() if v % c != 0}
        q0, k = divmod(k, c)
        r = self.from_linear(rest, k, n.dtype)
        rb = self.bounds(r, ranges)
        if rb is not None and rb[0] // c == rb[1] // c:
            base = rb[0] // c
            if op is BinOp.FLOORDIV:
                return self.from_linear(quot, q0 + base, n.dtype)
            return self.from_linear(rest, k - base * c, n.dtype)
        if op is BinOp.FLOORMOD:
            return Binary(BinOp.FLOORMOD, r, Const(c, n.dtype)) if quot else n
        if not quot:
            return n if q0 == 0 else self.from_linear({Binary(BinOp.FLOORDIV, r, Const(c, n.dtype)): 1}, q0, n.dtype)
        return self.from_linear({**quot, Binary(BinOp.FLOORDIV, r, Const(c, n.dtype)): 1}, q0, n.dtype)

    # ------------------------------------------------------------------ regions
    def region(self, e: Expr, free: Ranges, ranges: Ranges) -> tuple[Expr, int] | None:
        """Range of ``e`` while the ``free`` vars sweep their ranges and other vars stay fixed.

        Returns ``(min_expr, extent)`` where ``min_expr`` depends only on fixed variables, or None
        when the extent is not a constant (the caller then falls back to the whole dimension).
        """
        e = self.simplify(e, {**ranges, **free})
        terms, c = self.linear(e)
        fixed: dict = {}
        lo = hi = c
        for atom, coef in terms.items():
            deps = free_vars(atom)
            if not deps & free.keys():
                fixed[atom] = coef
                continue
            if deps - free.keys():
                return None
            b = self.bounds(atom, free)
            if b is None:
                return None
            lo += min(coef * b[0], coef * b[1])
            hi += max(coef * b[0], coef * b[1])
        return self.from_linear(fixed, lo, e.dtype), hi - lo + 1


_FOLD = {
    BinOp.ADD: operator.add, BinOp.SUB: operator.sub, BinOp.MUL: operator.mul,
    BinOp.MIN: min, BinOp.MAX: max,
}
_CMP = {CmpOp.EQ: operator.eq, CmpOp.NE: operator.ne, CmpOp.LT: operator.lt, CmpOp.LE: operator.le,
        CmpOp.GT: operator.gt, CmpOp.GE: operator.ge}


def _true(v: bool) -> Const:
    return Const(int(v), DType.bool)


def _decide(op: CmpOp, d: tuple[int, int]) -> bool | None:
    """Decide ``a op b`` from the bounds ``d`` of ``a - b``."""
    lo, hi = d
    if op is CmpOp.LT:
        return True if hi < 0 else False if lo >= 0 else None
    if op is CmpOp.LE:
        return True if hi <= 0 else False if lo > 0 else None
    if op is CmpOp.GT:
        return True if lo > 0 else False if hi <= 0 else None
    if op is CmpOp.GE:
        return True if lo >= 0 else False if hi < 0 else None
    if op is CmpOp.EQ:
        return True if lo == hi == 0 else False if lo > 0 or hi < 0 else None
    return False if lo == hi == 0 else True if lo > 0 or hi < 0 else None


def _is(e: Expr, v) -> bool:
    return isinstance(e, Const) and e.value == v


def _fold(op: BinOp, a: Const, b: Const) -> Expr:
    x, y = a.value, b.value
    if op in _FOLD:
        return Const(_FOLD[op](x, y), a.dtype)
    if op is BinOp.DIV:
        return Const(x / y, a.dtype) if y != 0 else Binary(op, a, b)
    if y == 0:
        return Binary(op, a, b)
    return Const(x // y if op is BinOp.FLOORDIV else x % y, a.dtype)

"""Tests of lowering: each pass on small hand-built IR, the integer simplifier, the printer, the verifier,
guards of non-dividing splits and bound inference of compute_at."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.dtype import DType
from tensortune.errors import LoweringError
from tensortune.ir import Allocate, Buffer, For, ForKind, IfThenElse, IRVerifyError, Load, PrimFunc, Scope, Seq, \
    Store, verify
from tensortune.arith import Analyzer
from ir_eval import evaluate


# Each helper call uses a fresh analyzer: results must not depend on what an analyzer saw before.
def simplify(e, ranges=None):
    return Analyzer().simplify(e, ranges)


def linear(e):
    return Analyzer().linear(e)


def bounds(e, ranges):
    return Analyzer().bounds(e, ranges)


def region(e, free, ranges):
    return Analyzer().region(e, free, ranges)
from tensortune.lower.passes import MAX_UNROLL_EXTENT, MIN_CLAMPS_PER_ITERATION, partition_tails, remove_unit_loops, simplify_func, \
    unroll_loops
from tensortune.te.expr import Binary, BinOp, CmpOp, Compare, Const, Select, Var, walk

F32 = DType.float32


def c(v: int) -> Const:
    return Const(v, DType.int32)


def f(v: float) -> Const:
    return Const(v, F32)


def add(a, b):
    return Binary(BinOp.ADD, a, b)


def mul(a, b):
    return Binary(BinOp.MUL, a, b)


def func(body, *bufs: Buffer) -> PrimFunc:
    return PrimFunc("k", tuple(bufs), (), body)


@pytest.fixture
def bufs():
    return Buffer("A", (16,), F32), Buffer("B", (16,), F32)


# --- simplify_func ---------------------------------------------------------------------------------


def test_simplify_folds_guards_known_from_loop_ranges(bufs):
    A, B = bufs
    i = Var("i")
    before = func(For(i, 8, ForKind.SERIAL, Seq((
        IfThenElse(Compare(CmpOp.LT, i, c(8)), Store(B, add(i, c(0)), Load(A, mul(i, c(1))))),  # always true
        IfThenElse(Compare(CmpOp.GE, i, c(8)), Store(B, i, f(0.0))),  # never true
        IfThenElse(Compare(CmpOp.LT, i, c(5)), Store(A, i, f(1.0))),  # depends on i: kept
    ))), A, B)
    expected = func(For(i, 8, ForKind.SERIAL, Seq((
        Store(B, i, Load(A, i)),
        IfThenElse(Compare(CmpOp.LT, i, c(5)), Store(A, i, f(1.0))),
    ))), A, B)
    assert simplify_func(before) == expected


def test_simplify_takes_the_else_branch_of_a_false_guard(bufs):
    A, B = bufs
    i = Var("i")
    before = func(For(i, 4, ForKind.SERIAL,
                      IfThenElse(Compare(CmpOp.GT, add(i, c(2)), c(10)), Store(B, i, f(1.0)), Store(B, i, f(2.0)))),
                  A, B)
    assert simplify_func(before) == func(For(i, 4, ForKind.SERIAL, Store(B, i, f(2.0))), A, B)


def test_simplify_drops_empty_code(bufs):
    A, B = bufs
    i, j = Var("i"), Var("j")
    L = Buffer("L", (4,), F32, Scope.LOCAL)
    dead = IfThenElse(Compare(CmpOp.LT, i, c(0)), Store(B, i, f(0.0)))
    before = func(Seq((
        For(i, 4, ForKind.SERIAL, Seq((dead, Seq(())))),  # loop whose body disappears
        Allocate(L, For(i, 4, ForKind.SERIAL, dead)),  # allocation whose body disappears
        For(j, 3, ForKind.SERIAL, Store(B, j, f(3.0))),
    )), A, B)
    assert simplify_func(before) == func(For(j, 3, ForKind.SERIAL, Store(B, j, f(3.0))), A, B)
    nothing = func(For(i, 4, ForKind.SERIAL, dead), A, B)
    assert simplify_func(nothing) == func(Seq(()), A, B)


def test_simplify_is_pure(bufs):
    A, B = bufs
    i = Var("i")
    before = func(For(i, 4, ForKind.SERIAL, Store(B, add(i, c(0)), Load(A, i))), A, B)
    copy = func(For(i, 4, ForKind.SERIAL, Store(B, add(i, c(0)), Load(A, i))), A, B)
    after = simplify_func(before)
    assert before == copy and after != before
    assert simplify_func(after) == after  # idempotent


# --- remove_unit_loops ------------------------------------------------------------------------------


def test_remove_unit_loops_substitutes_zero(bufs):
    A, B = bufs
    i, j, k = Var("i"), Var("j"), Var("k")
    before = func(For(i, 4, ForKind.SERIAL,
                      For(j, 1, ForKind.SERIAL,
                          For(k, 1, ForKind.UNROLLED, Store(B, add(mul(i, c(4)), add(j, k)), Load(A, add(i, j)))))),
                  A, B)
    expected = func(For(i, 4, ForKind.SERIAL,
                        Store(B, add(mul(i, c(4)), add(c(0), c(0))), Load(A, add(i, c(0))))), A, B)
    assert remove_unit_loops(before) == expected


def test_remove_unit_loops_keeps_longer_loops_and_guards(bufs):
    A, B = bufs
    i, j = Var("i"), Var("j")
    body = IfThenElse(Compare(CmpOp.LT, add(i, j), c(3)), Store(B, add(i, j), f(1.0)))
    before = func(Seq((For(i, 2, ForKind.SERIAL, For(j, 1, ForKind.VECTORIZED, body)),)), A, B)
    expected = func(For(i, 2, ForKind.SERIAL,
                        IfThenElse(Compare(CmpOp.LT, add(i, c(0)), c(3)), Store(B, add(i, c(0)), f(1.0)))), A, B)
    assert remove_unit_loops(before) == expected


# --- unroll_loops -----------------------------------------------------------------------------------


def test_unroll_replicates_the_body(bufs):
    A, B = bufs
    i = Var("i")
    before = func(For(i, 3, ForKind.UNROLLED, Store(B, i, mul(Load(A, i), f(2.0)))), A, B)
    expected = func(Seq(tuple(Store(B, c(n), mul(Load(A, c(n)), f(2.0))) for n in range(3))), A, B)
    assert unroll_loops(before) == expected


def test_unroll_nested_loops_inner_first(bufs):
    A, B = bufs
    i, j, k = Var("i"), Var("j"), Var("k")
    store = Store(B, add(mul(i, c(4)), add(mul(j, c(2)), k)), f(0.0))
    before = func(For(i, 2, ForKind.SERIAL,
                      For(j, 2, ForKind.UNROLLED,
                          For(k, 2, ForKind.UNROLLED, store))), A, B)
    expected = func(For(i, 2, ForKind.SERIAL, Seq(tuple(
        Store(B, add(mul(i, c(4)), add(mul(c(jj), c(2)), c(kk))), f(0.0)) for jj in range(2) for kk in range(2)
    ))), A, B)
    assert unroll_loops(before) == expected


def test_unroll_leaves_serial_and_overlong_loops(bufs):
    A, B = bufs
    i, j = Var("i"), Var("j")
    long = For(j, MAX_UNROLL_EXTENT + 1, ForKind.UNROLLED, Store(B, c(0), Load(A, c(0))))
    before = func(Seq((For(i, 3, ForKind.SERIAL, Store(B, i, f(1.0))), long)), A, B)
    assert unroll_loops(before) == before


# --- the integer simplifier --------------------------------------------------------------------------


def test_divmod_of_a_split_index_recovers_the_parts():
    io, ii = Var("io"), Var("ii")
    ranges = {ii: (0, 15)}
    assert simplify((io * 16 + ii) // 16, ranges) == io
    assert simplify((io * 16 + ii) % 16, ranges) == ii
    assert simplify((ii + io * 16) // 16, {ii: (0, 15), io: (0, 3)}) == io
    # without knowing ii's range the division stays, split into the known part and the rest
    assert simplify((io * 16 + ii) // 16) == add(io, Binary(BinOp.FLOORDIV, ii, c(16)))
    assert simplify((io * 16 + ii) % 16) == Binary(BinOp.FLOORMOD, ii, c(16))
    # an offset that crosses a block boundary is kept
    assert simplify((io * 16 + ii + 3) // 16, ranges) == add(io, Binary(BinOp.FLOORDIV, add(ii, c(3)), c(16)))
    assert simplify((io * 16 + ii + 3) % 16, {ii: (0, 12)}) == add(ii, c(3))


def test_linear_canonicalisation():
    i, j = Var("i"), Var("j")
    assert simplify(i + j - i + 3 - 1) == add(j, c(2))
    assert simplify((i * 2 + j) * 3) == add(mul(i, c(6)), mul(j, c(3)))
    assert simplify(j - i * 2 + 4 - i) == add(Binary(BinOp.SUB, j, mul(i, c(3))), c(4))
    assert simplify(i * 0 + 5) == c(5)
    assert simplify(i - i) == c(0)
    assert linear(i * 4 + j * 2 - 7) == ({i: 4, j: 2}, -7)
    assert linear(i * j + 1) == ({mul(i, j): 1}, 1)


def test_constant_folding():
    assert simplify(c(7) // c(2)) == c(3)
    assert simplify(c(-7) // c(2)) == c(-4)  # floor division
    assert simplify(c(-7) % c(3)) == c(2)
    assert simplify(f(1.5) * f(2.0) + f(0.5)) == f(3.5)
    assert simplify(te.cast("int32", f(-2.7))) == c(-2)  # C truncates
    assert simplify(te.exp(Const(0.0, DType.float64))) == Const(1.0, DType.float64)
    x = Var("x")
    assert simplify(te.select(Compare(CmpOp.LT, c(1), c(2)), x, c(0))) == x
    # division by zero is left for run time, not folded into a Python exception
    assert simplify(c(1) // c(0)) == Binary(BinOp.FLOORDIV, c(1), c(0))


def test_constant_folding_of_math_outside_python_domain():
    assert simplify(te.exp(f(1000.0))) == f(float("inf"))
    nan = simplify(te.sqrt(f(-1.0)))
    assert isinstance(nan, Const) and nan.value != nan.value


def test_comparisons_are_folded_from_ranges():
    i, j = Var("i"), Var("j")
    r = {i: (0, 9), j: (0, 3)}
    true, false = Const(1, DType.bool), Const(0, DType.bool)
    assert simplify(i < 10, r) == true
    assert simplify(i >= 0, r) == true
    assert simplify(i + j < 13, r) == true
    assert simplify(i * 4 + j >= 40, r) == false
    assert simplify(te.equal(j - j, 0), r) == true
    assert simplify(i < 9, r) == Compare(CmpOp.LT, i, c(9))  # undecided: kept
    assert simplify(i < 5) == Compare(CmpOp.LT, i, c(5))  # unknown range: kept
    # min/max decided from ranges too
    assert simplify(Binary(BinOp.MIN, i, j + 10), r) == i
    assert simplify(Binary(BinOp.MAX, i, j + 10), r) == add(j, c(10))
    # folded conditions collapse logical operators
    assert simplify((i < 10) & (j < 2), r) == Compare(CmpOp.LT, j, c(2))
    assert simplify((i > 20) | (j < 2), r) == Compare(CmpOp.LT, j, c(2))


def test_bounds_of_expressions():
    i, j = Var("i"), Var("j")
    r = {i: (0, 9), j: (-2, 3)}
    assert bounds(i * 4 - j + 1, r) == (-2, 39)
    assert bounds(i // 4, r) == (0, 2)
    assert bounds(i % 4, r) == (0, 3)
    assert bounds(i * j, r) == (-18, 27)
    assert bounds(i + Var("unknown"), r) is None


def test_region_of_an_access_inside_a_tile():
    io, ii, jj = Var("io"), Var("ii"), Var("jj")
    fixed = {io: (0, 2)}
    assert region(io * 4 + ii, {ii: (0, 3)}, fixed) == (mul(io, c(4)), 4)
    assert region(io * 4 + ii + 1, {ii: (0, 3)}, fixed) == (add(mul(io, c(4)), c(1)), 4)
    assert region(ii * 2 + 1, {ii: (0, 3)}, {}) == (c(1), 7)
    assert region(ii - jj, {ii: (0, 3), jj: (0, 2)}, {}) == (c(-2), 6)
    assert region(io * 8 + ii // 2, {ii: (0, 3)}, fixed) == (mul(io, c(8)), 2)
    # a non-linear access of a free variable and an unknown one has no constant extent
    assert region(ii * Var("n"), {ii: (0, 3)}, {}) is None


# --- property: simplification never changes the value --------------------------------------------

VARS = (Var("x"), Var("y"), Var("z"))
_leaves = st.one_of(st.sampled_from(VARS), st.integers(-20, 20).map(c))
_divisors = st.integers(-9, 9).filter(bool).map(c)


def _extend(children):
    return st.one_of(
        st.builds(Binary, st.sampled_from([BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.MIN, BinOp.MAX]), children, children),
        st.builds(Binary, st.sampled_from([BinOp.FLOORDIV, BinOp.FLOORMOD]), children, _divisors),
        st.builds(lambda op, a, b, t, e: Select(Compare(op, a, b), t, e),
                  st.sampled_from(list(CmpOp)), children, children, children, children),
    )


_exprs = st.recursive(_leaves, _extend, max_leaves=12)


@st.composite
def _ranges_and_points(draw):
    ranges = {}
    for v in VARS:
        lo = draw(st.integers(-20, 20))
        ranges[v] = (lo, draw(st.integers(lo, lo + 40)))
    points = [{v: draw(st.integers(*ranges[v])) for v in VARS} for _ in range(4)]
    return ranges, points


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_exprs, _ranges_and_points())
def test_simplify_preserves_values(e, ranges_points):
    ranges, points = ranges_points
    simple = simplify(e, ranges)
    b = bounds(e, ranges)
    for p in points:
        value = evaluate(e, p)
        assert evaluate(simple, p) == value, (str(e), str(simple), p)
        if b is not None:
            assert b[0] <= value <= b[1], (str(e), b, p)


# --- the printer ---------------------------------------------------------------------------------


def test_printer_text_of_a_split_add(check_lowering):
    A = te.placeholder((4, 4), "float32", "A")
    B = te.placeholder((4, 4), "float32", "B")
    C = te.compute((4, 4), lambda i, j: A[i, j] + B[i, j], "C")
    s = tt.create_schedule(C)
    s[C].split(s[C].axis[1], 2)
    assert str(check_lowering(s, [A, B, C])) == (
        "def kernel(A: float32[4, 4], B: float32[4, 4], C: float32[4, 4]):\n"
        "  for i in range(4):\n"
        "    for j.outer in range(2):\n"
        "      for j.inner in range(2):\n"
        "        C[i * 4 + j.outer * 2 + j.inner] = A[i * 4 + j.outer * 2 + j.inner] + B[i * 4 + j.outer * 2 + j.inner]"
    )


def test_printer_text_of_guards_annotations_reductions_and_workspaces(check_lowering):
    A = te.placeholder((5, 3), "float32", "A")
    k = te.reduce_axis(3, "k")
    P = te.compute((5, 3), lambda i, j: A[i, j] * 2.0, "P")
    C = te.compute((5,), lambda i: te.max(P[i, k], axis=k), "C")
    s = tt.create_schedule(C)
    io, ii = s[C].split(s[C].axis[0], 2)
    s[C].parallel(io)
    s[P].vectorize(s[P].axis[1])
    assert str(check_lowering(s, [A, C], name="rowmax")) == (
        "def rowmax(A: float32[5, 3], C: float32[5]):\n"
        "  workspace P: float32[5, 3]\n"
        "  for i in range(5):\n"
        "    for j in range(3):  # vectorized\n"
        "      P[i * 3 + j] = A[i * 3 + j] * 2.0\n"
        "  for i.outer in range(3):  # parallel\n"
        "    for i.inner in range(2):\n"
        "      if i.outer * 2 + i.inner < 5:\n"
        "        C[i.outer * 2 + i.inner] = -inf\n"
        "        for k in range(3):\n"
        "          C[i.outer * 2 + i.inner] = max(C[i.outer * 2 + i.inner], P[i.outer * 6 + i.inner * 3 + k])"
    )


# --- the verifier --------------------------------------------------------------------------------


def test_verifier_accepts_well_formed_ir(bufs):
    A, B = bufs
    i = Var("i")
    L = Buffer("L", (16,), F32, Scope.LOCAL)
    verify(func(For(i, 16, ForKind.PARALLEL, Allocate(L, Seq((Store(L, i, Load(A, i)), Store(B, i, Load(L, i)))))),
                A, B))


def test_verifier_catches_an_undefined_variable(bufs):
    A, B = bufs
    i, j = Var("i"), Var("j")
    with pytest.raises(IRVerifyError, match="variable 'j'"):
        verify(func(For(i, 4, ForKind.SERIAL, Store(B, i, Load(A, j))), A, B))
    with pytest.raises(IRVerifyError, match="variable 'i' .* after pass 'mypass'"):
        verify(func(Seq((For(i, 4, ForKind.SERIAL, Store(B, i, f(0.0))), Store(B, i, f(1.0)))), A, B), "mypass")


def test_verifier_catches_access_to_an_unallocated_buffer(bufs):
    A, B = bufs
    i = Var("i")
    L = Buffer("L", (16,), F32, Scope.LOCAL)
    with pytest.raises(IRVerifyError, match="buffer 'L' accessed outside its allocation"):
        verify(func(For(i, 4, ForKind.SERIAL, Store(B, i, Load(L, i))), A, B))
    # used after the allocation that defined it ended
    with pytest.raises(IRVerifyError, match="buffer 'L'"):
        verify(func(For(i, 4, ForKind.SERIAL, Seq((Allocate(L, Store(L, i, f(0.0))), Store(L, i, f(1.0))))), A, B))


def test_verifier_catches_other_broken_invariants(bufs):
    A, B = bufs
    i, j = Var("i"), Var("j")
    L = Buffer("L", (4,), F32, Scope.LOCAL)
    with pytest.raises(IRVerifyError, match="out of bounds"):
        verify(func(Store(B, c(16), f(0.0)), A, B))
    with pytest.raises(IRVerifyError, match="redefined"):
        verify(func(For(i, 4, ForKind.SERIAL, For(i, 4, ForKind.SERIAL, Store(B, i, f(0.0)))), A, B))
    with pytest.raises(IRVerifyError, match="nested in a parallel loop"):
        verify(func(For(i, 4, ForKind.PARALLEL, For(j, 4, ForKind.PARALLEL, Store(B, i * 4 + j, f(0.0)))), A, B))
    with pytest.raises(IRVerifyError, match="allocated twice"):
        verify(func(Allocate(L, Allocate(L, Store(L, c(0), f(0.0)))), A, B))
    with pytest.raises(IRVerifyError, match="duplicate buffer names"):
        verify(func(Store(B, c(0), f(0.0)), A, B, Buffer("A", (2,), F32)))
    X = te.placeholder((16,), "float32", "X")
    with pytest.raises(IRVerifyError, match="TensorRead survived lowering"):
        verify(func(For(i, 16, ForKind.SERIAL, Store(B, i, X[i])), A, B))


def test_lower_runs_the_verifier_after_every_pass(monkeypatch):
    lower_module = importlib.import_module("tensortune.lower.lower")  # the package re-exports lower() by this name

    A = te.placeholder((4,), "float32", "A")
    C = te.compute((4,), lambda i: A[i] + 1.0, "C")
    s = tt.create_schedule(C)
    i = Var("ghost")

    def broken_pass(fn: PrimFunc, analyzer) -> PrimFunc:
        return PrimFunc(fn.name, fn.args, fn.workspaces, Seq((fn.body, Store(fn.args[1], i, f(0.0)))))

    monkeypatch.setattr(lower_module, "PASSES", lower_module.PASSES + (("broken", broken_pass),))
    tt.lower(s)  # without verification the bad IR goes through
    with pytest.raises(IRVerifyError, match="variable 'ghost' .* after pass 'broken'"):
        tt.lower(s, verify=True)


# --- lowering a schedule ---------------------------------------------------------------------------


def _add2d(n: int, m: int):
    A = te.placeholder((n, m), "float32", "A")
    C = te.compute((n, m), lambda i, j: A[i, j] * 2.0 + 1.0, "C")
    return A, C


def _ifs(fn: PrimFunc) -> list[IfThenElse]:
    return [x for x in walk(fn.body) if isinstance(x, IfThenElse)]


@pytest.mark.parametrize("factor, guard", [
    (3, "i.outer * 3 + i.inner < 10"),
    (4, "i.outer * 4 + i.inner < 10"),
    (7, "i.outer * 7 + i.inner < 10"),
    (16, "i.inner < 10"),  # the outer loop has extent 1 and is removed
])
def test_non_dividing_split_is_guarded_and_correct(factor, guard, check_lowering, check_run, rng):
    A, C = _add2d(10, 6)
    s = tt.create_schedule(C)
    s[C].split(s[C].axis[0], factor)
    fn = check_lowering(s, [A, C])
    guards = _ifs(fn)
    assert len(guards) == 1 and str(guards[0].cond) == guard
    a = rng.standard_normal((10, 6)).astype("float32")
    check_run(s, [A, C], [a], a * 2 + 1)


def test_dividing_split_has_no_guard(check_lowering):
    A, C = _add2d(10, 6)
    s = tt.create_schedule(C)
    s[C].split(s[C].axis[0], 5)
    s[C].split(s[C].axis[1], nparts=3)
    assert _ifs(check_lowering(s, [A, C])) == []


def test_non_dividing_nparts_split_of_a_fused_axis_is_correct(check_lowering, check_run, rng):
    A, C = _add2d(7, 5)
    s = tt.create_schedule(C)
    fused = s[C].fuse(*s[C].axis)
    o, i = s[C].split(fused, nparts=4)
    s[C].unroll(i)
    fn = check_lowering(s, [A, C])
    assert _ifs(fn)  # 35 = 4 * 9 - 1: the last part is guarded
    a = rng.standard_normal((7, 5)).astype("float32")
    check_run(s, [A, C], [a], a * 2 + 1)


def _allocs(fn: PrimFunc) -> dict[str, Buffer]:
    return {x.buffer.name: x.buffer for x in walk(fn.body) if isinstance(x, Allocate)}


def test_compute_at_in_a_tile_allocates_the_tile_region(check_lowering, check_run, rng):
    A = te.placeholder((10, 12), "float32", "A")
    B = te.placeholder((12, 9), "float32", "B")
    k = te.reduce_axis(12, "k")
    C = te.compute((10, 9), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    s = tt.create_schedule(C)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(*s[C].axis, 4, 3)
    s[CC].compute_at(s[C], jo)
    fn = check_lowering(s, [A, B, C])
    assert _allocs(fn) == {"C.local": Buffer("C.local", (4, 3), F32, Scope.LOCAL)}
    assert fn.workspaces == ()
    a = rng.standard_normal((10, 12)).astype("float32")
    b = rng.standard_normal((12, 9)).astype("float32")
    check_run(s, [A, B, C], [a, b], a @ b, rtol=1e-4, atol=1e-5)


def test_compute_at_of_a_stencil_allocates_the_halo(check_lowering, check_run, rng):
    A = te.placeholder((12, 12), "float32", "A")
    P = te.compute((12, 12), lambda i, j: A[i, j] * 2.0, "P")
    C = te.compute((10, 10), lambda i, j: P[i, j] + P[i + 2, j + 1] + P[i + 1, j + 2], "C")
    s = tt.create_schedule(C)
    io, jo, ii, ji = s[C].tile(*s[C].axis, 4, 5)
    s[P].compute_at(s[C], jo)
    fn = check_lowering(s, [A, C])
    assert _allocs(fn)["P"].shape == (4 + 2, 5 + 2)
    a = rng.standard_normal((12, 12)).astype("float32")
    p = a * 2
    check_run(s, [A, C], [a], p[:10, :10] + p[2:, 1:11] + p[1:11, 2:])


def test_compute_at_an_outer_axis_allocates_rows(check_lowering):
    A = te.placeholder((8, 6), "float32", "A")
    P = te.compute((8, 6), lambda i, j: A[i, j] + 1.0, "P")
    C = te.compute((8, 6), lambda i, j: P[i, j] * P[i, 5 - j], "C")
    s = tt.create_schedule(C)
    io, ii = s[C].split(s[C].axis[0], 2)
    s[P].compute_at(s[C], io)
    assert _allocs(check_lowering(s, [A, C]))["P"].shape == (2, 6)


def _stencil_then_reduction(rows=6, cols=7, channels=5, taps=3):
    """P (a per-element stage of A) read with a halo of ``taps`` rows by C, a sum over channels and taps of P times
    weights, read by the output D: the shape of a depthwise layer's output read by the next layer's accumulator."""
    A = te.placeholder((channels, rows + taps - 1, cols), "float32", "A")
    Wt = te.placeholder((4, channels, taps), "float32", "Wt")
    P = te.compute(A.shape, lambda c, y, x: A[c, y, x] * 2.0 + 1.0, "P")
    r, t = te.reduce_axis(channels, "r"), te.reduce_axis(taps, "t")
    C = te.compute((4, rows, cols), lambda o, y, x: te.sum(P[r, y + t, x] * Wt[o, r, t], axis=[r, t]), "C")
    D = te.compute(C.shape, lambda o, y, x: te.maximum(C[o, y, x], te.const(0.0, "float32")), "D")
    return A, Wt, P, C, D


def _stencil_reference(a, w):
    p, taps = a * 2 + 1, w.shape[2]
    rows = a.shape[1] - taps + 1
    return np.maximum(sum(np.einsum("cyx,oc->oyx", p[:, t:t + rows], w[:, :, t]) for t in range(taps)), 0)


@pytest.mark.parametrize("band", [1, 2, 4])
def test_compute_at_a_loop_of_the_consumers_consumer_allocates_the_band(check_lowering, check_run, rng, band):
    """P computed at D's row-band loop, outside the output channels, while P's consumer C (a reduction) is computed
    per element inside that loop: P's buffer holds every channel of the band's rows and their halo, computed once
    per band, and the result equals numpy's."""
    A, Wt, P, C, D = _stencil_then_reduction()
    s = tt.create_schedule(D)
    o, y, x = s[D].axis
    yo, yi = s[D].split(y, band)
    s[D].reorder(yo, o, yi, x)
    s[C].compute_at(s[D], x)
    s[P].compute_at(s[D], yo)
    fn = check_lowering(s, [A, Wt, D])
    assert _allocs(fn)["P"].shape == (5, band + 2, 7)
    a = rng.standard_normal(A.shape).astype("float32")
    w = rng.standard_normal(Wt.shape).astype("float32")
    check_run(s, [A, Wt, D], [a, w], _stencil_reference(a, w), rtol=1e-4, atol=1e-4)


def test_compute_at_through_two_consumers(check_lowering, check_run, rng):
    """A chain of three: P computed at D's row-band loop is read by C.local (C's cache, the reduction), computed
    inside C, computed inside D: the region of each link is what the next reads there."""
    A, Wt, P, C, D = _stencil_then_reduction(rows=8)
    s = tt.create_schedule(D)
    CL = s.cache_write(C, "local")
    o, y, x = s[D].axis
    yo, yi = s[D].split(y, 4)
    s[D].reorder(yo, o, yi, x)
    s[C].compute_at(s[D], x)
    s[CL].compute_at(s[C], s[C].axis[2])
    s[P].compute_at(s[D], yo)
    fn = check_lowering(s, [A, Wt, D])
    assert _allocs(fn)["P"].shape == (5, 4 + 2, 7)
    a = rng.standard_normal(A.shape).astype("float32")
    w = rng.standard_normal(Wt.shape).astype("float32")
    check_run(s, [A, Wt, D], [a, w], _stencil_reference(a, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("block", [1, 3, 4])
def test_compute_at_with_two_readers_allocates_their_union(check_lowering, check_run, rng, block):
    """P read by Q1 (computed inside R's column blocks) and by R itself one column further on (the statistics of a
    row read by a normalization and by the output): computed once per block, over the union of what both read."""
    A = te.placeholder((6, 13), "float32", "A")
    P = te.compute((6, 13), lambda i, j: A[i, j] * 2.0, "P")
    Q1 = te.compute((6, 12), lambda i, j: P[i, j] + 1.0, "Q1")
    R = te.compute((6, 12), lambda i, j: Q1[i, j] * P[i, j + 1], "R")
    s = tt.create_schedule(R)
    i, j = s[R].axis
    jo, ji = s[R].split(j, block)
    s[Q1].compute_at(s[R], jo)
    s[P].compute_at(s[R], jo)
    fn = check_lowering(s, [A, R])
    assert _allocs(fn)["P"].shape == (1, block + 1)
    a = rng.standard_normal(A.shape).astype("float32")
    p = a * 2
    check_run(s, [A, R], [a], (p[:, :12] + 1) * p[:, 1:], rtol=1e-5, atol=1e-6)


def test_compute_at_through_a_stage_with_two_readers(check_lowering, check_run, rng):
    """P's only reader M has two (Q1, and R one column further on), all computed in R's column blocks: P's region
    is what M's union of regions reads, not what one of M's readers alone would."""
    A = te.placeholder((4, 14), "float32", "A")
    P = te.compute((4, 14), lambda i, j: A[i, j] + 1.0, "P")
    M = te.compute((4, 13), lambda i, j: P[i, j] * P[i, j + 1], "M")
    Q1 = te.compute((4, 12), lambda i, j: M[i, j] - 1.0, "Q1")
    R = te.compute((4, 12), lambda i, j: Q1[i, j] + M[i, j + 1], "R")
    s = tt.create_schedule(R)
    jo, ji = s[R].split(s[R].axis[1], 3)
    for t in (Q1, M, P):
        s[t].compute_at(s[R], jo)
    fn = check_lowering(s, [A, R])
    assert _allocs(fn)["M"].shape == (1, 4) and _allocs(fn)["P"].shape == (1, 5)
    a = rng.standard_normal(A.shape).astype("float32")
    p = a + 1
    m = p[:, :13] * p[:, 1:]
    check_run(s, [A, R], [a], m[:, :12] - 1 + m[:, 1:], rtol=1e-5, atol=1e-5)


def test_compute_at_inside_the_loop_that_holds_its_consumer_is_an_error(check_lowering):
    """P at D's innermost loop while its consumer C is computed at an outer loop of D: P would be computed after
    C read it."""
    A, Wt, P, C, D = _stencil_then_reduction()
    s = tt.create_schedule(D)
    o, y, x = s[D].axis
    s[C].compute_at(s[D], y)
    s[P].compute_at(s[D], x)
    with pytest.raises(tt.errors.ScheduleError, match="inside loop 'y' where its consumer 'C' is computed"):
        check_lowering(s, [A, Wt, D])


def test_inlined_stage_has_no_buffer(check_lowering, check_run, rng):
    A = te.placeholder((6,), "float32", "A")
    P = te.compute((6,), lambda i: A[i] * 2.0, "P")
    C = te.compute((6,), lambda i: P[i] + P[5 - i], "C")
    s = tt.create_schedule(C)
    s[P].compute_inline()
    fn = check_lowering(s, [A, C])
    assert fn.workspaces == () and _allocs(fn) == {}
    assert str(fn).splitlines()[-1] == "    C[i] = A[i] * 2.0 + A[0 - i + 5] * 2.0"
    a = rng.standard_normal(6).astype("float32")
    check_run(s, [A, C], [a], 2 * a + 2 * a[::-1])


def test_lowering_twice_gives_the_same_ir(check_lowering):
    A, C = _add2d(6, 6)
    s = tt.create_schedule(C)
    s[C].unroll(s[C].split(s[C].axis[1], 4)[1])
    steps, leaves = list(s.steps), list(s.stages["C"].leaves)
    first = check_lowering(s, [A, C])
    assert str(first) == str(tt.lower(s, [A, C]))
    assert s.steps == steps and s.stages["C"].leaves == leaves  # lowering does not touch the schedule


@pytest.mark.parametrize("args, match", [
    ("A", "missing \\['C'\\]"),
    ("C", "missing \\['A'\\]"),
    ("ACC", "listed twice"),
])
def test_bad_argument_lists_are_lowering_errors(args, match):
    A, C = _add2d(3, 3)
    tensors = {"A": A, "C": C}
    with pytest.raises(LoweringError, match=match):
        tt.lower(tt.create_schedule(C), [tensors[x] for x in args])
    with pytest.raises(LoweringError, match="not part of the scheduled computation"):
        tt.lower(tt.create_schedule(C), [A, te.placeholder((3,), "float32", "Z"), C])


def test_intermediate_argument_computed_at_keeps_its_full_shape():
    A = te.placeholder((8,), "float32", "A")
    P = te.compute((8,), lambda i: A[i] * 2.0, "P")
    C = te.compute((8,), lambda i: P[i] + 1.0, "C")
    s = tt.create_schedule(C)
    io, _ = s[C].split(s[C].axis[0], 4)
    s[P].compute_at(s[C], io)
    try:
        fn = tt.lower(s, [A, P, C], verify=True)
    except LoweringError:
        return  # refusing the request with a user error is acceptable too
    assert [b.shape for b in fn.args] == [(8,), (8,), (8,)]


def test_intermediate_argument_that_is_inlined_is_computed_or_rejected(rng):
    A = te.placeholder((8,), "float32", "A")
    P = te.compute((8,), lambda i: A[i] * 2.0, "P")
    C = te.compute((8,), lambda i: P[i] + 1.0, "C")
    s = tt.create_schedule(C)
    s[P].compute_inline()
    try:
        m = tt.build(s, [A, P, C])
    except LoweringError:
        return
    a = rng.standard_normal(8).astype("float32")
    p, out = np.zeros(8, "float32"), np.zeros(8, "float32")
    m(a, p, out)
    np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)
    np.testing.assert_allclose(p, a * 2, rtol=1e-6)


def test_intermediate_argument_at_root_is_computed_into_the_callers_array(check_run, rng):
    A = te.placeholder((8,), "float32", "A")
    P = te.compute((8,), lambda i: A[i] * 2.0, "P")
    C = te.compute((8,), lambda i: P[i] + 1.0, "C")
    s = tt.create_schedule(C)
    fn = tt.lower(s, [A, P, C], verify=True)
    assert [b.name for b in fn.args] == ["A", "P", "C"] and fn.workspaces == ()
    m = tt.build(s, [A, P, C])
    a = rng.standard_normal(8).astype("float32")
    p, out = np.zeros(8, "float32"), np.zeros(8, "float32")
    m(a, p, out)
    np.testing.assert_allclose(p, a * 2, rtol=1e-6)
    np.testing.assert_allclose(out, a * 2 + 1, rtol=1e-6)


def test_multiple_outputs(check_lowering, rng):
    A = te.placeholder((6,), "float32", "A")
    Q = te.compute((6,), lambda i: A[i] + 1.0, "Q")
    R = te.compute((6,), lambda i: Q[i] * A[i], "R")
    s = tt.create_schedule([Q, R])
    fn = check_lowering(s)
    assert [b.name for b in fn.args] == ["A", "Q", "R"]
    m = tt.build(s)
    a = rng.standard_normal(6).astype("float32")
    q, r = np.zeros(6, "float32"), np.zeros(6, "float32")
    m(a, q, r)
    np.testing.assert_allclose(q, a + 1, rtol=1e-6)
    np.testing.assert_allclose(r, (a + 1) * a, rtol=1e-6)


def test_simplify_does_not_depend_on_what_the_analyzer_saw_before():
    i, j = Var("i"), Var("j")
    ana = Analyzer()
    built = ana.from_linear({i: 3, j: -2}, 5)  # marked canonical in ``ana`` only
    again = ana.simplify(built)
    assert again is built  # known canonical: returned as it is
    fresh = Analyzer().simplify(built)  # a fresh analyzer recomputes it, to the same expression
    assert fresh == built
    assert Analyzer().simplify((i * 3 + 5) - j * 2) == built


def test_a_fused_index_split_back_and_flattened_again_is_the_fused_index():
    p, q = Var("p"), Var("q")
    assert simplify((p // 7) * 7 + p % 7) == p
    assert simplify(((p * 3 + q) // 7) * 14 + ((p * 3 + q) % 7) * 2 + 5) == simplify(p * 6 + q * 2 + 5)
    assert simplify((p // 7) * 7 + q % 7) == add(mul(Binary(BinOp.FLOORDIV, p, c(7)), c(7)),
                                                 Binary(BinOp.FLOORMOD, q, c(7)))  # different operands: kept


# ------------------------------------------------------------------ clamped indices (padded tiles)

def _clamped_copy(n: int, tile: int, reverse: bool):
    """``P[o, i] = B[min(o * tile + i, n - 1)]`` over whole tiles (or mirrored with ``max``: ``B[n - 1 -
    max(...)]`` reads the same clamp from the other side); vectorized like a matmul's packing loop."""
    tiles = -(-n // tile)
    B = te.placeholder((n,), "float32", "B")
    if reverse:
        P = te.compute((tiles, tile), lambda o, i: B[n - 1 - te.maximum(n - 1 - (o * tile + i), 0)], "P")
    else:
        P = te.compute((tiles, tile), lambda o, i: B[te.minimum(o * tile + i, n - 1)], "P")
    s = tt.create_schedule(P)
    s[P].vectorize(s[P].axis[1])
    return s, B, P


def _clamps(node) -> list:
    return [x for x in walk(node) if isinstance(x, Binary) and x.op in (BinOp.MIN, BinOp.MAX)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 70), tile=st.sampled_from([1, 3, 4, 8, 16]), reverse=st.booleans())
def test_partition_tails_gives_the_unclamped_tiles_a_clamp_free_loop(n, tile, reverse, check_lowering, check_run):
    s, B, P = _clamped_copy(n, tile, reverse)
    fn = check_lowering(s, [B, P])
    tiles = -(-n // tile)
    b = np.arange(n, dtype="float32")
    want = b[np.minimum(np.arange(tiles * tile), n - 1)].reshape(tiles, tile)
    check_run(s, [B, P], [b], want)
    ifs = _ifs(fn)
    if tiles * tile == n or tiles == 1:  # no clamp, or one that bites in the only tile: nothing to partition
        assert not ifs
        return
    (branch,) = ifs
    assert isinstance(branch.then, For) and not _clamps(branch.then)  # the fast loop: no clamp left
    assert _clamps(branch.otherwise)  # the last tile keeps its clamp
    # the test holds exactly for the tiles that end inside B
    o = next(v for v in tt.te.expr.free_vars(branch.cond))
    for value in range(tiles):
        held = Analyzer().simplify(tt.te.expr.substitute(branch.cond, {o: c(value)}))
        assert bool(held.value) == ((value + 1) * tile <= n)


def test_partition_tails_leaves_a_clamp_it_cannot_bound(bufs):
    src, dst = bufs
    i = Var("i", DType.int32)
    quadratic = Binary(BinOp.MIN, mul(i, i), c(7))  # not linear in the loop variable: no test over the loop
    body = For(i, 4, ForKind.SERIAL, Store(dst, quadratic, Load(src, i)))
    assert partition_tails(func(body, src, dst)).body == body


def test_partition_tails_tests_an_outer_clamp_once_per_iteration(bufs, check_run, rng):
    """Clamps that move with an outer loop only (a register tile's rows, clamped in the last tile) split that
    loop's body when they are many: the clean copy has canonical indices (one base and constant offsets)."""
    rows = MIN_CLAMPS_PER_ITERATION + 1
    for tile, split in ((rows, True), (MIN_CLAMPS_PER_ITERATION - 1, False)):
        A = te.placeholder((tile + 1, 4), "float32", "A")  # all but one row of the second tile are past the end
        P = te.compute((2 * tile, 4), lambda i, k: A[te.minimum(i, tile), k] * 2.0, "P")
        s = tt.create_schedule(P)
        io, ii = s[P].split(s[P].axis[0], tile)
        s[P].reorder(io, s[P].axis[1], ii)
        s[P].unroll(ii)
        fn = tt.lower(s, [A, P])
        a = rng.standard_normal((tile + 1, 4)).astype("float32")
        check_run(s, [A, P], [a], a[np.minimum(np.arange(2 * tile), tile)] * 2)
        if not split:  # too few clamps to pay for a second copy of the body
            assert not _ifs(fn)
            continue
        (branch,) = _ifs(fn)
        assert str(branch.cond) == f"i.outer * {tile} + {tile - 1} <= {tile}"  # the strongest of the row tests
        assert not _clamps(branch.then) and _clamps(branch.otherwise)
        stores = [x for x in walk(branch.then) if isinstance(x, Store)]
        assert [str(x.index) for x in stores] == [f"i.outer * {4 * tile} + k" + (f" + {4 * r}" if r else "")
                                                  for r in range(tile)]


def test_partition_tails_gives_the_full_tiles_an_unguarded_contiguous_copy(check_lowering, check_run, rng):
    """A tile's copy-out guards each element (``if (j < n)``); in the full tiles the guard goes, and the copy is
    whole vectors. A strided copy (a transpose) keeps its guarded loop: it would gather element by element."""
    n, tile = 23, 8
    A = te.placeholder((3, n), "float32", "A")
    for transpose in (False, True):
        if transpose:
            T = te.placeholder((n, 3), "float32", "T")
            C = te.compute((3, n), lambda i, j: T[j, i] + 1.0, "C")
            args, a = [T, C], rng.standard_normal((n, 3)).astype("float32")
            want = a.T + 1
        else:
            C = te.compute((3, n), lambda i, j: A[i, j] + 1.0, "C")
            args, a = [A, C], rng.standard_normal((3, n)).astype("float32")
            want = a + 1
        s = tt.create_schedule(C)
        jo, ji = s[C].split(s[C].axis[1], tile)
        s[C].vectorize(ji)
        fn = check_lowering(s, args)
        check_run(s, args, [a], want)
        loops = [x for x in walk(fn.body) if isinstance(x, For) and x.kind is ForKind.VECTORIZED]
        if transpose:
            assert len(loops) == 1 and _ifs(loops[0])  # one guarded loop, as it was
            continue
        (branch,) = [x for x in _ifs(fn) if x.otherwise is not None]
        assert str(branch.cond) == f"j.outer * {tile} + {tile - 1} < {n}"
        assert not _ifs(branch.then)  # the full tiles: no guard left

"""Tests of tensor expressions: construction, structural equality, dtypes and typed user errors."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensortune as tt
from tensortune import te
from tensortune.dtype import DType
from tensortune.errors import DTypeError, ExprError, ShapeError, TensortuneError
from tensortune.te.expr import Binary, BinOp, Call, Cast, Compare, CmpOp, Const, MathFunc, Not, Reduce, Reducer, \
    Select, TensorRead, Var


@pytest.fixture
def ab():
    return te.placeholder((4, 5), "float32", "A"), te.placeholder((4, 5), "int32", "B")


# --- construction -----------------------------------------------------------------------------


def test_placeholder_has_shape_dtype_and_name():
    A = te.placeholder((3, 4), "float64", "A")
    assert (A.shape, A.dtype, A.name, A.ndim) == ((3, 4), DType.float64, "A", 2)
    assert isinstance(A.op, te.PlaceholderOp)
    assert te.placeholder(7, "int32", "v").shape == (7,)
    assert te.placeholder((2,), np.float32, "w").dtype is DType.float32


def test_compute_records_axes_body_and_dtype():
    A = te.placeholder((3, 4), "float32", "A")
    C = te.compute((3, 4), lambda i, j: A[i, j] * 2.0, "C")
    op = C.op
    assert isinstance(op, te.ComputeOp)
    spatial = te.AxisKind.SPATIAL
    assert [(a.name, a.extent, a.kind) for a in op.axes] == [("i", 3, spatial), ("j", 4, spatial)]
    i, j = (a.var for a in op.axes)
    assert op.body == Binary(BinOp.MUL, TensorRead(A, (i, j)), Const(2.0, DType.float32))
    assert C.dtype is DType.float32 and C.shape == (3, 4)
    assert op.inputs() == [A] and op.reduce_axes == ()


def test_compute_with_varargs_names_axes_by_position():
    A = te.placeholder((2, 3, 4), "float32", "A")
    C = te.compute(A.shape, lambda *idx: A[idx] + 1.0, "C")
    assert [a.name for a in C.op.axes] == ["i0", "i1", "i2"]


@pytest.mark.parametrize("reducer, combiner", [(te.sum, Reducer.SUM), (te.max, Reducer.MAX), (te.min, Reducer.MIN)])
def test_reductions_build_a_reduce_body(reducer, combiner):
    A = te.placeholder((4, 6), "float32", "A")
    k = te.reduce_axis(6, "k")
    C = te.compute((4,), lambda i: reducer(A[i, k], axis=k), "C")
    body = C.op.body
    assert isinstance(body, Reduce) and body.combiner is combiner
    assert body.axes == (k,) and k.kind is te.AxisKind.REDUCE and k.extent == 6
    assert C.op.reduce_axes == (k,)
    assert body.source == TensorRead(A, (C.op.axes[0].var, k.var))


def test_reduction_identities():
    k = te.reduce_axis(3, "k")
    A = te.placeholder((3,), "float32", "A")
    I = te.placeholder((3,), "int32", "I")
    assert te.sum(A[k], axis=k).identity() == Const(0.0, DType.float32)
    assert te.max(A[k], axis=k).identity() == Const(-math.inf, DType.float32)
    assert te.min(A[k], axis=k).identity() == Const(math.inf, DType.float32)
    assert te.max(I[k], axis=k).identity() == Const(-(2**31), DType.int32)
    assert te.min(I[k], axis=k).identity() == Const(2**31 - 1, DType.int32)


def test_reduction_over_several_axes():
    A = te.placeholder((2, 3, 4), "float32", "A")
    r, s = te.reduce_axis(3, "r"), te.reduce_axis(4, "s")
    C = te.compute((2,), lambda i: te.sum(A[i, r, s], axis=[r, s]), "C")
    assert C.op.reduce_axes == (r, s)


# --- structural equality and hashing ----------------------------------------------------------


def test_same_construction_is_equal_and_hashes_equal(ab):
    A, _ = ab
    i, j = Var("i"), Var("j")
    e1 = te.exp(A[i, j] * 2.0 + 1.0)
    e2 = te.exp(A[i, j] * 2.0 + 1.0)
    assert e1 is not e2
    assert e1 == e2 and hash(e1) == hash(e2)
    assert len({e1, e2}) == 1


def test_different_vars_or_constants_are_not_equal(ab):
    A, _ = ab
    i, j, i2 = Var("i"), Var("j"), Var("i")
    assert i != i2  # same name, different variable
    assert A[i, j] + 1.0 != A[i2, j] + 1.0
    assert A[i, j] + 1.0 != A[i, j] + 2.0
    assert A[i, j] + 1.0 != A[j, i] + 1.0
    assert Const(1, DType.int32) != Const(1, DType.int64)
    # another tensor with the same name and shape is another tensor
    A2 = te.placeholder((4, 5), "float32", "A")
    assert A[i, j] != A2[i, j]


def test_bool_of_an_expression_is_an_error(ab):
    A, _ = ab
    i = Var("i")
    with pytest.raises(ExprError, match="select"):
        bool(A[i, 0] > 0)
    with pytest.raises(ExprError):
        if A[i, 0] < 1.0:  # the mistake the error is about
            pass
    with pytest.raises(ExprError):
        (A[i, 0] > 0) and (A[i, 0] < 1)  # noqa: B015


# --- typed errors -----------------------------------------------------------------------------


def test_dtype_mismatch_names_both_operands(ab):
    A, B = ab
    i, j = Var("i"), Var("j")
    with pytest.raises(DTypeError) as err:
        A[i, j] + B[i, j]
    msg = str(err.value)
    assert "A[i, j]" in msg and "B[i, j]" in msg and "float32" in msg and "int32" in msg
    assert isinstance(err.value, TypeError) and isinstance(err.value, TensortuneError)


def test_dtype_mismatch_in_a_compute_names_the_tensors():
    X = te.placeholder((4,), "float32", "X")
    Y = te.placeholder((4,), "float64", "Y")
    with pytest.raises(DTypeError, match=r"X\[i\].*Y\[i\]"):
        te.compute((4,), lambda i: X[i] * Y[i], "Z")


def test_float_constant_with_int_expression_is_a_dtype_error(ab):
    _, B = ab
    with pytest.raises(DTypeError, match="float constant"):
        B[Var("i"), 0] + 1.5


def test_wrong_number_of_indices_names_the_tensor(ab):
    A, _ = ab
    with pytest.raises(ShapeError, match=r"tensor 'A' has 2 dimensions .* indexed with 1 indices"):
        A[Var("i")]
    with pytest.raises(ShapeError, match="'A'"):
        A[0, 1, 2]


def test_float_index_is_a_dtype_error(ab):
    A, _ = ab
    with pytest.raises(DTypeError, match="index 1 of tensor 'A'"):
        A[0, 1.5]
    with pytest.raises(DTypeError, match="index 0 of tensor 'A'"):
        te.compute((4, 5), lambda i, j: A[A[i, j], j], "C")


def test_non_numeric_index_is_an_expr_error(ab):
    A, _ = ab
    with pytest.raises(ExprError):
        A["x", 0]


def test_reduction_nested_in_arithmetic_is_an_expr_error():
    A = te.placeholder((4, 6), "float32", "A")
    k = te.reduce_axis(6, "k")
    with pytest.raises(ExprError, match="reduction must be the whole body"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k) + 1.0, "C")
    with pytest.raises(ExprError, match="reduction must be the whole body"):
        te.compute((4,), lambda i: te.sum(te.max(A[i, k], axis=k), axis=te.reduce_axis(2, "r")), "C")


def test_reduce_axis_used_outside_its_reduction_is_an_expr_error():
    A = te.placeholder((4, 6), "float32", "A")
    k = te.reduce_axis(6, "k")
    with pytest.raises(ExprError, match="'k'"):
        te.compute((4,), lambda i: A[i, k], "C")


def test_reduce_over_a_spatial_axis_is_an_expr_error():
    A = te.placeholder((4, 6), "float32", "A")
    with pytest.raises(ExprError, match="not a reduce axis"):
        te.compute((4, 6), lambda i, j: te.sum(A[i, j], axis=j), "C")


def test_reduce_axis_named_like_a_spatial_axis_is_an_expr_error():
    A = te.placeholder((4, 6), "float32", "A")
    k = te.reduce_axis(6, "i")
    with pytest.raises(ExprError, match="unique"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k), "C")


def test_reduce_without_axis_is_an_expr_error():
    A = te.placeholder((4, 6), "float32", "A")
    with pytest.raises(ExprError):
        te.sum(A[0, 0], axis=None)


def test_compute_arity_mismatch_is_a_shape_error():
    A = te.placeholder((4, 5), "float32", "A")
    with pytest.raises(ShapeError, match=r"compute 'C' has 2 dimensions .* takes 1 indices \(i\)"):
        te.compute((4, 5), lambda i: A[i, 0], "C")
    with pytest.raises(ShapeError, match="takes 3 indices"):
        te.compute((4, 5), lambda i, j, k: A[i, j], "C")


@pytest.mark.parametrize("dtype", ["complex64", "float8", "string"])
def test_unknown_dtype_is_a_dtype_error(dtype):
    with pytest.raises(DTypeError, match="unsupported dtype"):
        te.placeholder((3,), dtype, "X")


@pytest.mark.parametrize("name", ["", "1A", "a b", "A-B", "x[0]", None])
def test_invalid_tensor_names_are_expr_errors(name):
    with pytest.raises(ExprError, match="invalid tensor name"):
        te.placeholder((3,), "float32", name)
    A = te.placeholder((3,), "float32", "A")
    with pytest.raises(ExprError, match="invalid tensor name"):
        te.compute((3,), lambda i: A[i], name)


def test_valid_unusual_names_are_accepted():
    assert te.placeholder((3,), "float32", "_a.b_1").name == "_a.b_1"


@pytest.mark.parametrize("shape", [(), (0,), (3, -1), (2.0,), (True,)])
def test_bad_shapes_are_shape_errors(shape):
    with pytest.raises(ShapeError, match="positive integers"):
        te.placeholder(shape, "float32", "A")


@pytest.mark.parametrize("extent", [0, -2, 2.5])
def test_bad_reduce_axis_extent_is_an_expr_error(extent):
    with pytest.raises(ExprError, match="positive integer extent"):
        te.reduce_axis(extent, "k")


def test_empty_var_name_is_an_expr_error():
    with pytest.raises(ExprError):
        Var("")


def test_operator_dtype_rules(ab):
    A, B = ab
    i = Var("i")
    with pytest.raises(DTypeError, match="'//' needs integer"):
        A[i, 0] // 2
    with pytest.raises(DTypeError, match="'/' needs float"):
        B[i, 0] / 2
    with pytest.raises(DTypeError, match="float argument"):
        te.exp(B[i, 0])
    with pytest.raises(DTypeError, match="needs boolean operands"):
        A[i, 0] & A[i, 1]
    with pytest.raises(DTypeError, match="cannot reduce a boolean"):
        te.sum(A[i, 0] > 0, axis=te.reduce_axis(3, "k"))
    with pytest.raises(DTypeError, match="not an integer"):
        te.const(1.5, "int32")


# --- select, cast and math functions ----------------------------------------------------------


def test_select_and_if_then_else_build_select_nodes(ab):
    A, _ = ab
    i = Var("i")
    x = A[i, 0]
    e = te.select(x > 0, x, 0)
    assert e == Select(Compare(CmpOp.GT, x, Const(0.0, DType.float32)), x, Const(0.0, DType.float32))
    assert e.dtype is DType.float32
    assert te.if_then_else(x > 0, x, 0) == e
    with pytest.raises(DTypeError, match="condition must be boolean"):
        te.select(x, 1.0, 2.0)
    with pytest.raises(DTypeError, match="branches have different dtypes"):
        te.select(x > 0, x, te.const(1, "int32"))


def test_logical_operators_build_bool_nodes(ab):
    A, _ = ab
    i = Var("i")
    c = (A[i, 0] > 0) & ~(A[i, 1] < 1.0) | te.equal(i, 2)
    assert c.dtype is DType.bool
    assert isinstance(c, Binary) and c.op is BinOp.OR
    assert c.a.op is BinOp.AND and isinstance(c.a.b, Not)
    assert te.logical_and(i > 0, i < 3, te.not_equal(i, 1)).dtype is DType.bool


def test_cast_builds_a_cast_node_only_when_needed(ab):
    A, B = ab
    i = Var("i")
    c = te.cast("int32", A[i, 0])
    assert c == Cast(DType.int32, A[i, 0]) and c.dtype is DType.int32
    assert B[i, 0].astype("float64").dtype is DType.float64
    x = A[i, 0]
    assert te.cast("float32", x) is x  # casting to its own dtype is the identity
    with pytest.raises(DTypeError):
        te.cast("float8", A[i, 0])


@pytest.mark.parametrize("fn, func", [(te.exp, MathFunc.EXP), (te.sqrt, MathFunc.SQRT), (te.tanh, MathFunc.TANH),
                                      (te.log, MathFunc.LOG), (te.floor, MathFunc.FLOOR), (te.abs_, MathFunc.ABS)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_math_functions_build_calls_of_the_argument_dtype(fn, func, dtype):
    X = te.placeholder((3,), dtype, "X")
    e = fn(X[Var("i")])
    assert isinstance(e, Call) and e.func is func and e.dtype is DType.of(dtype)


def test_pow_takes_two_arguments_of_one_dtype_and_folds_constants():
    X = te.placeholder((3,), "float32", "X")
    i = Var("i")
    e = te.call(MathFunc.POW, X[i], 2.0)
    assert isinstance(e, Call) and e.args[1] == Const(2.0, DType.float32) and e.dtype is DType.float32
    with pytest.raises(ExprError, match="pow takes 2 argument"):
        te.call(MathFunc.POW, X[i])
    with pytest.raises(ExprError, match="erf takes 1 argument"):
        te.call(MathFunc.ERF, X[i], X[i])
    with pytest.raises(DTypeError, match="different dtypes"):
        te.call(MathFunc.POW, X[i], te.placeholder((3,), "float64", "Y")[i])
    folded = tt.arith.Analyzer().simplify(te.call(MathFunc.POW, Const(2.0, DType.float32), Const(10.0, DType.float32)))
    assert folded == Const(1024.0, DType.float32)


def test_maximum_minimum_promote_python_numbers_to_the_expression_dtype():
    X = te.placeholder((3,), "float64", "X")
    I = te.placeholder((3,), "int32", "I")
    i = Var("i")
    assert te.maximum(X[i], 0) == Binary(BinOp.MAX, X[i], Const(0.0, DType.float64))
    assert te.minimum(1, I[i]) == Binary(BinOp.MIN, Const(1, DType.int32), I[i])
    assert te.maximum(X[i], 0).dtype is DType.float64
    assert te.minimum(I[i], 1).dtype is DType.int32
    with pytest.raises(DTypeError):
        te.maximum(X[i], I[i])


@pytest.mark.parametrize("dtype", ["int32", "int64", "float64"])
def test_non_float32_computes_keep_their_dtype(dtype):
    A = te.placeholder((5,), dtype, "A")
    k = te.reduce_axis(5, "k")
    C = te.compute((5,), lambda i: A[i] * 3 + A[(i + 1) % 5], "C")
    S = te.compute((1,), lambda i: te.sum(A[k] * 2, axis=k), "S")
    assert C.dtype is DType.of(dtype) and S.dtype is DType.of(dtype)
    assert C.op.body.b.indices[0] == Binary(BinOp.FLOORMOD, Binary(BinOp.ADD, C.op.axes[0].var, Const(1)), Const(5))


def test_str_of_expressions_is_readable():
    A = te.placeholder((4, 5), "float32", "A")
    k = te.reduce_axis(5, "k")
    C = te.compute((4,), lambda i: te.sum(te.exp(A[i, k]) * (A[i, k] - 1.0), axis=k), "C")
    assert str(C.op.body) == "sum(exp(A[i, k]) * (A[i, k] - 1.0), axis=[k:5])"
    i = C.op.axes[0].var
    assert str(te.select(i < 2, (i + 1) * 2, i // 3 % 2)) == "select(i < 2, (i + 1) * 2, i // 3 % 2)"


def test_expressions_lower_end_to_end_for_each_dtype():
    # construction is only half the contract: every dtype must also compute the right numbers.
    for dtype in ("int32", "float64"):
        A = te.placeholder((6,), dtype, "A")
        C = te.compute((6,), lambda i: te.maximum(A[i] * 2 - 3, te.minimum(A[i], 1)), "C")
        m = tt.build(tt.create_schedule(C))
        a = np.arange(-3, 3).astype(dtype)
        c = np.zeros(6, dtype)
        m(a, c)
        np.testing.assert_array_equal(c, np.maximum(a * 2 - 3, np.minimum(a, 1)))

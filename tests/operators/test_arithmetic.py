"""Arithmetic (``operators/arithmetic.py`` and the integer ``+ - * /`` of ``elementwise``): Pow with float and
integer exponents, the variadic Max, Min, Mean and Sum, and integer tensors, each equal to onnxruntime interpreted
and compiled at every opset where its definition changed, with broadcasting drawn by hypothesis."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from elementwise_checks import broadcast_shapes, check, one_node, opsets, values
from onnx_models import model, node
from tensortune.frontend import import_onnx
from tensortune.graph import UnsupportedModelError, interpret
from tensortune.network import optimized_graph
from tensortune.operators import Cast, Conv, Fused
from tensortune.operators.arithmetic import Maximum, Pow, PowScalar
from tensortune.target import Target

SEEDS = st.integers(0, 999)


def _inputs(shapes) -> dict[str, tuple[int, ...]]:
    return {f"x{k}": s for k, s in enumerate(shapes)}


@pytest.mark.parametrize("opset", opsets("Pow"))
@settings(max_examples=5, deadline=None)
@given(data=st.data())
def test_pow_equals_onnxruntime(opset, data):
    """A float base to a float or (from opset 12) integer exponent, broadcast both ways; negative bases only to
    integer powers (to others the result is NaN)."""
    a, b = data.draw(broadcast_shapes(2), "shapes")
    exp_dtype = data.draw(st.sampled_from(["float32"] if opset < 12 else ["float32", "float16", "int32", "int64"]))
    rng = np.random.default_rng(data.draw(SEEDS, "seed"))
    integer = exp_dtype.startswith("int")
    base = rng.uniform(-3 if integer else 0.1, 3, a).astype(np.float32)
    m = one_node("Pow", {"a": a, "b": b}, {"b": exp_dtype}, "float32", opset)
    check(m, {"a": base, "b": values(rng, b, exp_dtype, -3, 3)})


def test_pow_of_a_constant_exponent_is_unary_and_joins_an_epilogue():
    """Constant scalar exponents become ``PowScalar`` (products for 2 to 4, a square root, pow), which joins a convolution's
    epilogue; a run-time integer exponent is cast to the base's dtype inside the power's kernel."""
    x = np.array([-np.inf, -2.5, -1, -0.0, 0, 0.3, 1, 2, 7.5, np.inf], np.float32)
    for k in (2, 0.5, 3, 4, -1, 1, 0, -0.5):
        m = one_node("Pow", {"x": x.shape}, {}, "float32", 15, {"k": np.array([k], np.float32)})
        assert [type(n.op) for n in import_onnx(m).nodes] == [PowScalar]
        check(m, {"x": x})
    m = model([node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]), node("Pow", ["c", "k"], ["y"])],
              {"x": (1, 8, 4, 4)}, ["y"], {"w": np.ones((8, 8, 1, 1), np.float32), "k": np.float32(2)})
    conv = optimized_graph(m, Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")).nodes[1]
    assert isinstance(conv.op, Conv) and [s.op for s in conv.op.epilogue] == [PowScalar(2)]
    m = one_node("Pow", {"a": (3, 8), "b": (3, 8)}, {"b": "int64"}, "float32", 15)
    (fused,) = optimized_graph(m, Target.host()).nodes
    assert isinstance(fused.op, Fused) and [type(op) for op, _ in fused.op.steps] == [Cast, Pow]
    rng = np.random.default_rng(2)
    check(m, {"a": rng.uniform(-2, 2, (3, 8)).astype(np.float32), "b": rng.integers(-4, 5, (3, 8))})


def test_pow_of_float16_and_float64():
    rng = np.random.default_rng(3)
    for base, exponent in (("float16", "float16"), ("float16", "int64"), ("float64", "float32"), ("float32", "float64")):
        m = one_node("Pow", {"a": (4, 9), "b": (9,)}, {"a": base, "b": exponent}, base, 15)
        check(m, {"a": rng.uniform(0.1, 3, (4, 9)).astype(base), "b": values(rng, (9,), exponent, -3, 3)})


VARIADIC = [(op, v) for op in ("Max", "Min", "Mean", "Sum") for v in opsets(op)]


@pytest.mark.parametrize("op_type, opset", VARIADIC)
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_variadic_equals_onnxruntime(op_type, opset, data):
    """One to four inputs, broadcast together from opset 8 on (of one shape before), of the types onnxruntime
    computes."""
    n = data.draw(st.integers(1, 4), "inputs")
    shapes = data.draw(broadcast_shapes(n, same=opset < 8), "shapes")
    dtypes = ["float32", "float16"] + (["int8", "int32", "int64", "uint8"] if op_type in ("Max", "Min") and
                                       opset >= 12 else [])
    dtype = data.draw(st.sampled_from(dtypes), "dtype")
    rng = np.random.default_rng(data.draw(SEEDS, "seed"))
    names = _inputs(shapes)
    m = one_node(op_type, names, dict.fromkeys(names, dtype), dtype, opset)
    check(m, {k: values(rng, s, dtype, 0 if dtype == "uint8" else -50, 50) for k, s in names.items()})


def test_max_and_min_propagate_nan():
    a = np.array([np.nan, 1, np.nan, 2, -np.inf], np.float32)
    b = np.array([1, np.nan, np.nan, 3, np.inf], np.float32)
    for op_type in ("Max", "Min"):
        expected = check(one_node(op_type, {"a": (5,), "b": (5,)}, {}, "float32", 13), {"a": a, "b": b})[0]
        assert np.isnan(expected[:3]).all()
    assert str(Maximum()) == "Maximum"


ARITHMETIC = [(op, v, dt) for op in ("Add", "Sub", "Mul", "Div") for v in opsets(op)
              for dt in (("int32", "int64") if v < 14 else ("int8", "int16", "uint8", "int32", "int64"))]


@pytest.mark.parametrize("op_type, opset, dtype", ARITHMETIC)
@settings(max_examples=2, deadline=None)
@given(data=st.data())
def test_integer_arithmetic_equals_onnxruntime(op_type, opset, dtype, data):
    """Integers broadcast; division truncates toward zero (operands of either sign, divisors not zero)."""
    a, b = data.draw(broadcast_shapes(2), "shapes")
    rng = np.random.default_rng(data.draw(SEEDS, "seed"))
    low = 0 if dtype == "uint8" else -11
    x, y = values(rng, a, dtype, low, 11), values(rng, b, dtype, low, 11)
    if op_type == "Div":
        y[y == 0] = 3
    check(one_node(op_type, {"a": a, "b": b}, {"a": dtype, "b": dtype}, dtype, opset), {"a": x, "b": y})


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8"])
def test_integer_division_never_traps(dtype):
    """By zero gives 0 and the smallest integer by -1 wraps to itself (no SIGFPE), interpreted and compiled alike;
    onnxruntime leaves these undefined."""
    low = np.iinfo(dtype).min
    a = np.array([7, -7, 0, low, low, low, 9, -9], dtype)
    b = np.array([0, 0, 0, -1, 1, 2, -1, 4], dtype)
    want = np.array([0, 0, 0, low, low, low // 2, -9, -2], dtype)
    m = one_node("Div", {"a": (8,), "b": (8,)}, {"a": dtype, "b": dtype}, dtype, 14)
    np.testing.assert_array_equal(interpret(import_onnx(m), {"a": a, "b": b})["y"], want)
    np.testing.assert_array_equal(nw.compile(m)(a, b), want)


def test_rejected_types():
    with pytest.raises(UnsupportedModelError, match="integer base"):
        import_onnx(one_node("Pow", {"a": (3,), "b": (3,)}, {"a": "int32", "b": "int32"}, "int32", 15))
    with pytest.raises(UnsupportedModelError, match="mean of int32 tensors"):
        import_onnx(one_node("Mean", {"a": (3,), "b": (3,)}, {"a": "int32", "b": "int32"}, "int32", 13))
    with pytest.raises(UnsupportedModelError, match="exponent must be a float or integer tensor"):
        import_onnx(one_node("Pow", {"a": (3,), "b": (3,)}, {"b": "bool"}, "float32", 15))

"""Comparisons, logic and Where (``operators/compare.py``): each equal to onnxruntime, interpreted and compiled, at
every opset where its definition changed, over the types onnxruntime computes and shapes broadcast by hypothesis;
fused into chains of elementwise operators, never into a convolution's epilogue."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from elementwise_checks import broadcast_shapes, check, one_node, opsets, values
from onnx_models import model, node, rand
from tensortune.frontend import import_onnx
from tensortune.graph import GraphError, TensorType, UnsupportedModelError
from tensortune.network import compile as compile_network, optimized_graph
from tensortune.operators import Conv, Fused
from tensortune.operators.compare import Equal, Greater, Less, Not, Where
from tensortune.target import Target

SEEDS = st.integers(0, 999)
NUMBERS = ("float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8")
AVX2 = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")


def _types(op_type: str, opset: int) -> tuple[str, ...]:
    """The input types of ``op_type`` at ``opset`` (ONNX's, as onnxruntime computes them)."""
    if op_type == "Equal":
        return ("int32", "int64", "bool") if opset < 11 else NUMBERS + ("bool",)
    return ("float32", "float16", "float64") if opset < 9 else NUMBERS


def _numbers(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Few distinct values, so that equal elements are common (halves for floats)."""
    if dtype == "bool" or np.dtype(dtype).kind in "iu":
        return values(rng, shape, dtype, 0 if dtype == "uint8" else -3, 3)
    return np.asarray(np.round(rng.uniform(-3, 3, shape) * 2) / 2, dtype)


COMPARISONS = [(op, v) for op in ("Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual") for v in opsets(op)]


@pytest.mark.parametrize("op_type, opset", COMPARISONS)
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_comparison_equals_onnxruntime(op_type, opset, data):
    a, b = data.draw(broadcast_shapes(2), "shapes")
    dtype = data.draw(st.sampled_from(_types(op_type, opset)), "dtype")
    rng = np.random.default_rng(data.draw(SEEDS, "seed"))
    m = one_node(op_type, {"a": a, "b": b}, {"a": dtype, "b": dtype}, "bool", opset)
    check(m, {"a": _numbers(rng, a, dtype), "b": _numbers(rng, b, dtype)})


LOGIC = [(op, v) for op in ("And", "Or", "Xor", "Not") for v in opsets(op)]


@pytest.mark.parametrize("op_type, opset", LOGIC)
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_logic_equals_onnxruntime(op_type, opset, data):
    shapes = data.draw(broadcast_shapes(1 if op_type == "Not" else 2), "shapes")
    rng = np.random.default_rng(data.draw(SEEDS, "seed"))
    names = {f"x{k}": s for k, s in enumerate(shapes)}
    m = one_node(op_type, names, dict.fromkeys(names, "bool"), "bool", opset)
    check(m, {k: values(rng, s, "bool") for k, s in names.items()})


@pytest.mark.parametrize("opset", opsets("Where"))
@settings(max_examples=6, deadline=None)
@given(data=st.data())
def test_where_equals_onnxruntime(opset, data):
    """The condition, x and y broadcast together, x and y of any type onnxruntime selects."""
    c, a, b = data.draw(broadcast_shapes(3), "shapes")
    dtype = data.draw(st.sampled_from(("float32", "float16", "float64", "int8", "int32", "int64", "uint8")), "dtype")
    rng = np.random.default_rng(data.draw(SEEDS, "seed"))
    m = one_node("Where", {"c": c, "a": a, "b": b}, {"c": "bool", "a": dtype, "b": dtype}, dtype, opset)
    check(m, {"c": values(rng, c, "bool"), "a": values(rng, a, dtype, 0, 100), "b": values(rng, b, dtype, 0, 100)})


def test_comparisons_and_where_fuse_into_one_kernel():
    """``where(x < y, x, y * 0.5)`` and ``where(!(x > 0) & (y > 0), ...)``: one pass each, float in, bool between,
    float out; the rows split by the lanes of float32 (8 on AVX2), whose vectors the bool steps do not break."""
    nodes = [node("Less", ["x", "y"], ["c"]), node("Mul", ["y", "half"], ["h"]), node("Where", ["c", "x", "h"], ["a"]),
             node("Greater", ["x", "zero"], ["p"]), node("Not", ["p"], ["q"]), node("Greater", ["y", "zero"], ["r"]),
             node("And", ["q", "r"], ["s"]), node("Where", ["s", "a", "zero"], ["z"])]
    m = model(nodes, {"x": (2, 5, 16), "y": (2, 5, 16)}, ["z"], {"half": np.float32(0.5), "zero": np.float32(0)})
    (fused,) = [n for n in optimized_graph(m, AVX2).nodes]
    assert isinstance(fused.op, Fused) and len(fused.op.steps) == 8
    rng = np.random.default_rng(4)
    check(m, {"x": _numbers(rng, (2, 5, 16), "float32"), "y": _numbers(rng, (2, 5, 16), "float32")})
    less = one_node("Less", {"a": (4, 32), "b": (4, 32)}, {}, "bool", 13)
    assert "i1_inner < 8;" in compile_network(less, AVX2).source


def test_a_comparison_after_a_convolution_is_not_its_epilogue():
    """The convolution's output is float, the comparison's bool: a kernel of its own (blocked like its input);
    the Where that reads both fuses with it."""
    nodes = [node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node("Greater", ["c", "zero"], ["p"]), node("Mul", ["c", "k"], ["s"]), node("Where", ["p", "c", "s"], ["y"]),
             node("Less", ["c", "zero"], ["n"])]
    m = model(nodes, {"x": (1, 8, 6, 6)}, ["y", "n"], {"w": rand((16, 8, 3, 3), 1), "zero": np.float32(0),
                                                        "k": np.float32(0.1)}, dtypes={"n": "bool"})
    g = optimized_graph(m, AVX2)
    conv = next(n for n in g.nodes if isinstance(n.op, Conv))
    assert conv.op.epilogue == ()
    assert any(isinstance(n.op, Fused) and isinstance(n.op.steps[-1][0], Where) for n in g.nodes)
    check(m, {"x": rand((1, 8, 6, 6), 2)})


def test_rejected_types():
    cases = [(one_node("Less", {"a": (3,), "b": (3,)}, {"a": "bool", "b": "bool"}, "bool", 13), "must be numbers"),
             (one_node("And", {"a": (3,), "b": (3,)}, {}, "bool", 13), "must be bool tensors"),
             (one_node("Where", {"c": (3,), "a": (3,), "b": (3,)}, {}, "float32", 16), "condition must be a bool"),
             (one_node("Equal", {"a": (3,), "b": (2,)}, {}, "bool", 13), "do not broadcast")]
    for m, message in cases:
        with pytest.raises(UnsupportedModelError, match=message):
            import_onnx(m)
    with pytest.raises(GraphError, match="different dtypes"):
        Equal().infer([TensorType((2,), "int32"), TensorType((2,), "int64")])
    with pytest.raises(GraphError, match="different dtypes"):
        Where().infer([TensorType((2,), "bool"), TensorType((2,), "int32"), TensorType((2,), "float32")])
    assert Less().infer([TensorType((2, 1), "float16"), TensorType((3,), "float16")]) == (TensorType((2, 3), "bool"),)
    assert str(Greater()) == "Greater" and str(Not()) == "Not"


def _specials(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Numbers with NaN, +inf and -inf among them."""
    x = rng.uniform(-3, 3, shape)
    x[rng.uniform(size=shape) < 0.4] = np.nan
    x[rng.uniform(size=shape) < 0.2] = np.inf
    x[rng.uniform(size=shape) < 0.2] = -np.inf
    return x.astype(dtype)


FLOAT_CLASSES = [(op, v) for op in ("IsNaN", "IsInf") for v in opsets(op)]


@pytest.mark.parametrize("op_type, opset", FLOAT_CLASSES)
@settings(max_examples=4, deadline=None)
@given(data=st.data())
def test_isnan_and_isinf_equal_onnxruntime(op_type, opset, data):
    """Every sign IsInf may detect, over the float types onnxruntime tests at that opset."""
    shape = data.draw(st.lists(st.integers(1, 6), min_size=0, max_size=4), "shape")
    dtypes = ("float32", "float64") + (("float16",) if op_type == "IsNaN" or opset >= 20 else ())
    dtype = data.draw(st.sampled_from(dtypes), "dtype")
    attrs = {}
    if op_type == "IsInf":
        attrs = {"detect_positive": data.draw(st.integers(0, 1)), "detect_negative": data.draw(st.integers(0, 1))}
    m = one_node(op_type, {"x": shape}, {"x": dtype}, "bool", opset, **attrs)
    check(m, {"x": _specials(np.random.default_rng(data.draw(SEEDS, "seed")), shape, dtype)})


def test_masked_attention_of_the_dynamo_exporter_is_one_kernel():
    """``Where(IsNaN(softmax), 0, softmax)``, as the dynamo exporter writes attention with a mask: IsNaN and Where
    fuse into one pass; a row masked everywhere (NaN) becomes zeros."""
    nodes = [node("Softmax", ["x"], ["p"], axis=-1), node("IsNaN", ["p"], ["n"]), node("Where", ["n", "zero", "p"], ["y"])]
    m = model(nodes, {"x": (2, 4, 8)}, ["y"], {"zero": np.float32(0)}, opset=18)
    x = rand((2, 4, 8), 1)
    x[1, 2] = -np.inf
    assert np.isnan(check(m, {"x": x})[0]).sum() == 0
    fused = [n for n in optimized_graph(m, AVX2).nodes if isinstance(n.op, Fused)]
    assert len(fused) == 1 and [type(s[0]).__name__ for s in fused[0].op.steps] == ["IsNaN", "Where"]


def test_isnan_needs_a_float():
    with pytest.raises(UnsupportedModelError, match="must be a float tensor"):
        import_onnx(one_node("IsNaN", {"a": (3,)}, {"a": "int32"}, "bool", 13))

"""The unary math operators (``operators/unary_math.py``): each equal to onnxruntime, interpreted and compiled, at
every opset where its ONNX definition changed, over random shapes, attributes and the float and integer types
onnxruntime computes; activations joining a convolution's epilogue; rejected attributes and types."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from elementwise_checks import check, one_node, opsets, values
from onnx_models import model, node, ort_run, rand, assert_close
from tensortune.frontend import import_onnx
from tensortune.graph import GraphError, TensorType, UnsupportedModelError
from tensortune.network import optimized_graph
from tensortune.operators import Conv
from tensortune.operators.unary_math import Abs, Exp, Gelu, Neg
from tensortune.target import Target

#: op type -> the range its inputs are drawn from
DOMAINS = {"Neg": (-4, 4), "Abs": (-4, 4), "Exp": (-10, 10), "Log": (0.01, 100), "Sqrt": (0, 100),
           "Reciprocal": (-10, 10), "Erf": (-4, 4), "Sin": (-10, 10), "Cos": (-10, 10), "Floor": (-5, 5),
           "Ceil": (-5, 5), "Round": (-5, 5), "Elu": (-6, 6), "Selu": (-6, 6), "Softsign": (-20, 20),
           "Mish": (-40, 40), "Gelu": (-6, 6), "Swish": (-30, 30)}
ATTRIBUTES = {
    "Elu": st.fixed_dictionaries({}, optional={"alpha": st.floats(0.1, 3)}),
    "Selu": st.fixed_dictionaries({}, optional={"alpha": st.floats(0.5, 3), "gamma": st.floats(0.5, 2)}),
    "Gelu": st.fixed_dictionaries({}, optional={"approximate": st.sampled_from(["none", "tanh"])}),
    "Swish": st.fixed_dictionaries({}, optional={"alpha": st.floats(0.1, 3)}),
}
CASES = [(op, v) for op in DOMAINS for v in opsets(op)]
#: the float types onnxruntime computes each operator in (all take float16 and float32)
NO_FLOAT64 = {"Erf", "Elu", "Selu", "Softsign", "Gelu", "Mish", "Swish"}
INTEGERS = ("int8", "int16", "int32", "int64", "uint8")  # signed ones first


def inputs(op_type: str, shape, seed: int, dtype: str = "float32") -> np.ndarray:
    low, high = DOMAINS[op_type]
    x = np.random.default_rng(seed).uniform(low, high, shape)
    if op_type in ("Floor", "Ceil", "Round"):
        x = np.round(x * 4) / 4  # integers and halves among them: the ties of Round
    if op_type == "Reciprocal":
        x = np.where(np.abs(x) < 0.1, 0.5, x)
    return x.astype(dtype)


@pytest.mark.parametrize("op_type, opset", CASES)
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_unary_equals_onnxruntime_at_each_opset(op_type, opset, data):
    shape = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=4), "shape")
    attrs = data.draw(ATTRIBUTES.get(op_type, st.just({})), "attributes")
    m = one_node(op_type, {"x": shape}, {}, "float32", opset, **attrs)
    check(m, {"x": inputs(op_type, shape, data.draw(st.integers(0, 999), "seed"))})


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_unary_in_other_float_types(dtype):
    """Every operator onnxruntime computes in ``dtype``, in one model: float16 is computed in float and rounded."""
    ops = [op for op in DOMAINS if dtype == "float16" or op not in NO_FLOAT64]
    nodes = [node(op, [f"x_{op}"], [f"y_{op}"]) for op in ops]
    m = model(nodes, {f"x_{op}": (3, 17) for op in ops}, [f"y_{op}" for op in ops], opset=24,
              dtypes={n: dtype for op in ops for n in (f"x_{op}", f"y_{op}")})
    check(m, {f"x_{op}": inputs(op, (3, 17), k, dtype) for k, op in enumerate(ops)})


@pytest.mark.parametrize("op_type, dtype", [("Abs", dt) for dt in INTEGERS] + [("Neg", dt) for dt in INTEGERS[:-1]])
def test_neg_and_abs_of_integers(op_type, dtype):
    """Integers as onnxruntime takes them: Neg signed ones, Abs unsigned too; the smallest value wraps to itself."""
    x = values(np.random.default_rng(1), (4, 33), dtype, -100, 100)
    if dtype != "uint8":
        x.flat[0] = np.iinfo(dtype).min
    for opset in opsets(op_type):
        check(one_node(op_type, {"x": x.shape}, {"x": dtype}, dtype, opset), {"x": x})


def test_round_is_half_to_even_and_mish_has_no_overflow():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, 2.5001, 1e7 + 0.5, -0.0], np.float32)
    expected = check(one_node("Round", {"x": x.shape}, {}, "float32", 11), {"x": x})[0]
    np.testing.assert_array_equal(expected, np.rint(x))
    x = np.array([-200, -90, -20, -1e-3, 0, 1e-3, 20, 90, 200], np.float32)
    expected = check(one_node("Mish", {"x": x.shape}, {}, "float32", 18), {"x": x})[0]
    assert np.isfinite(expected).all()


def test_activations_after_a_convolution_join_its_epilogue():
    """Each new float activation after a convolution is a step of its epilogue: one kernel, in the blocked layout."""
    chain = [("Erf", {}), ("Selu", {}), ("Mish", {}), ("Gelu", {"approximate": "tanh"}), ("Softsign", {}),
             ("Abs", {}), ("Neg", {}), ("Sin", {}), ("Cos", {}), ("Elu", {"alpha": 0.5}), ("Exp", {}), ("Gelu", {})]
    nodes = [node("Conv", ["x", "w"], ["v0"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    nodes += [node(op, [f"v{k}"], [f"v{k + 1}"], **attrs) for k, (op, attrs) in enumerate(chain)]
    nodes.append(node("Conv", [f"v{len(chain)}", "w2"], ["y"], kernel_shape=[1, 1]))
    m = model(nodes, {"x": (1, 8, 6, 6)}, ["y"], {"w": rand((16, 8, 3, 3), 1, -0.3, 0.3),
                                                  "w2": rand((8, 16, 1, 1), 2)}, opset=20)
    target = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
    g = optimized_graph(m, target)
    first = next(n for n in g.nodes if isinstance(n.op, Conv))
    assert [type(s.op).__name__ for s in first.op.epilogue] == [op for op, _ in chain]
    assert first.op.epilogue[3].op == Gelu("tanh") and g.values[first.outputs[0]].layout.blocked
    x = rand((1, 8, 6, 6), 3)
    assert_close(nw.compile(m)(x), ort_run(m, {"x": x})[0])


def test_rejected_attributes_opsets_and_types():
    x = {"x": (3,)}
    cases = [
        (one_node("Gelu", x, {}, "float32", 20, approximate="erf"), "approximate='erf' is not supported"),
        (one_node("Gelu", x, {}, "float32", 19), "supported at opsets 20 and later, not 19"),
        (one_node("Exp", x, {"x": "int32"}, "int32", 13), "must be a float tensor"),
        (one_node("Neg", x, {"x": "uint8"}, "uint8", 13), "must be a float or signed integer tensor"),
        (one_node("Elu", x, {}, "float32", 13, beta=1.0), "unsupported attribute(s) beta"),
    ]
    for m, message in cases:
        with pytest.raises(UnsupportedModelError, match=message.replace("(", r"\(").replace(")", r"\)")):
            import_onnx(m)


def test_inference_of_types():
    assert Neg().infer([TensorType((2,), "int8")]) == (TensorType((2,), "int8"),)
    assert Abs().infer([TensorType((2,), "uint8")]) == (TensorType((2,), "uint8"),)
    for op, dtype in ((Neg(), "uint8"), (Abs(), "bool"), (Exp(), "int64")):
        with pytest.raises(GraphError):
            op.infer([TensorType((2,), dtype)])
    with pytest.raises(GraphError, match="approximate"):
        Gelu("erf")
    assert str(Gelu("tanh")) == "Gelu[tanh]"

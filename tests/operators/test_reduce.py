"""Reductions (``operators/reduce.py``: the ten ONNX Reduce* operators as one ``Reduction``, ArgMax and ArgMin) and
LogSoftmax and Hardmax (``operators/softmax.py``): imported at every opset where they changed (axes as an attribute,
then as an input), interpreted and compiled equal to onnxruntime for random shapes, axes and attributes; ties of
ArgMax, ArgMin and Hardmax resolved as onnxruntime does; a reduction followed by elementwise nodes is one kernel;
what they cannot take is refused with the reason."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune import te
from tensortune.dtype import DType
from tensortune.frontend import import_onnx
from tensortune.graph import GraphError, TensorType, UnsupportedModelError, interpret
from tensortune.network import optimized_graph
from tensortune.operators import supported_operators
from tensortune.operators.reduce import ArgKind, ArgReduce, ReduceKind, Reduction
from tensortune.operators.reshape import Identity
from tensortune.operators.softmax import Softmax, SoftmaxKind
from tensortune.target import Target

KINDS = [k.value for k in ReduceKind]
OPSETS = [7, 11, 13, 18, 21]


def axes_are_an_input(kind: str, opset: int) -> bool:
    return opset >= (13 if kind == "ReduceSum" else 18)


def reduce_model(kind, shape, axes=None, keepdims=True, opset=13, noop=None, dtype="float32"):
    """A one-node model of ``kind`` with ``axes`` (None: omitted) as the opset has them."""
    attrs, inputs, inits = {"keepdims": int(keepdims)}, ["x"], {}
    if axes_are_an_input(kind, opset):
        if noop is not None:
            attrs["noop_with_empty_axes"] = int(noop)
        if axes is not None:
            inputs.append("axes")
            inits["axes"] = np.array(axes, np.int64)
    elif axes:  # an attribute cannot be an empty list
        attrs["axes"] = list(axes)
    return model([node(kind, inputs, ["y"], **attrs)], {"x": shape}, ["y"], inits, opset=opset,
                 dtypes={"x": dtype, "y": dtype})


def data_for(kind, shape, seed=0, dtype="float32"):
    """Inputs each kind is defined on and keeps within float range: positive sums for the logarithm, factors near 1
    for products."""
    low, high = {"ReduceLogSum": (0.1, 2.0), "ReduceProd": (0.6, 1.4)}.get(kind, (-2.0, 2.0))
    return rand(shape, seed, low, high).astype(dtype)


def check(m, x, expected=None, exact=False):
    """The interpreted and the compiled model equal onnxruntime (or ``expected``)."""
    expected = ort_run(m, {"x": x})[0] if expected is None else expected
    got = [interpret(import_onnx(m), {"x": x})["y"], nw.compile(m)(x)]
    for out, what in zip(got, ("interpreted", "compiled")):
        assert out.dtype == expected.dtype, what
        if exact:
            np.testing.assert_array_equal(out, expected, err_msg=what)
        elif np.dtype(expected.dtype).itemsize == 2:
            ok, allowed = DType.of(expected.dtype).tolerance.check(out, expected)
            assert ok, f"{what}: {out} != {expected} (allowed {allowed})"
        else:
            assert_close(out, expected, what)


@st.composite
def axes_subsets(draw, rank):
    """None (omitted), empty, or a subset of the axes, each written positive or negative."""
    choice = draw(st.sampled_from(["omitted", "empty", "subset"]))
    if choice == "omitted":
        return None
    if choice == "empty":
        return []
    picked = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    return [a - rank if draw(st.booleans()) else a for a in picked]


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), kind=st.sampled_from(KINDS),
       opset=st.sampled_from(OPSETS), keepdims=st.booleans(), noop=st.sampled_from([None, False, True]),
       data=st.data())
def test_reductions_equal_onnxruntime(shape, kind, opset, keepdims, noop, data):
    axes = data.draw(axes_subsets(len(shape)))
    m = reduce_model(kind, shape, axes, keepdims, opset, noop)
    check(m, data_for(kind, shape, 1))


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_at_every_opset_where_its_axes_moved(kind):
    """Negative axes, keepdims off, and the opsets on each side of the move of axes to an input."""
    x = data_for(kind, (3, 4, 5), 2)
    for opset in (12, 13, 17, 18):
        check(reduce_model(kind, (3, 4, 5), [-1, 0], False, opset), x)


@pytest.mark.parametrize("kind", ["ReduceSum", "ReduceMean"])
def test_empty_axes_reduce_everything_or_nothing(kind):
    """No axes: every axis (to a scalar without keepdims); with noop_with_empty_axes the input itself."""
    x = data_for(kind, (2, 3, 4), 3)
    check(reduce_model(kind, (2, 3, 4), [], False, 18), x)
    m = reduce_model(kind, (2, 3, 4), None, True, 18, noop=True)
    assert [type(n.op) for n in import_onnx(m).nodes] == [Identity]
    check(m, x)


@pytest.mark.parametrize("kind", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                                  "ReduceSumSquare"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_reductions_are_exact(kind, dtype):
    rng = np.random.default_rng(4)
    x = rng.integers(-9, 10, (3, 4, 5)).astype(dtype)
    if kind == "ReduceProd":  # products of -1, 0, 1 and a few 2s: no overflow
        x = rng.choice(np.array([-1, 1, 1, 2], dtype), (3, 4, 5))
    for axes in ([1], [0, 2]):
        check(reduce_model(kind, (3, 4, 5), axes, True, 13, dtype=dtype), x, exact=True)


@pytest.mark.parametrize("kind", KINDS)
def test_float16_is_reduced_in_float32(kind):
    """A sum of 2000 float16 ones is exact (float16 alone stops counting at 2048 and loses halves before)."""
    x = data_for(kind, (2, 2000), 5, "float16")
    check(reduce_model(kind, (2, 2000), [1], True, 13, dtype="float16"), x)
    ones = np.ones((2, 2000), np.float16)
    assert nw.compile(reduce_model("ReduceSum", (2, 2000), [1], False, 13, dtype="float16"))(ones).tolist() == [
        2000, 2000]


@pytest.mark.parametrize("kind", KINDS)
def test_bfloat16_equals_the_float32_reduction_rounded(kind):
    """onnxruntime has no bfloat16 reductions: the reference is the float32 model's output, rounded."""
    x = data_for(kind, (3, 40), 6).astype(ml_dtypes.bfloat16)
    want = ort_run(reduce_model(kind, (3, 40), [1], True, 13), {"x": x.astype(np.float32)})[0]
    check(reduce_model(kind, (3, 40), [1], True, 13, dtype="bfloat16"), x, want.astype(ml_dtypes.bfloat16))


def test_log_sum_exp_does_not_overflow():
    """Elements up to 1000 (``exp`` overflows float32 beyond 88): the maximum is subtracted first."""
    x = rand((4, 30), 7, -1000, 1000)
    m = reduce_model("ReduceLogSumExp", (4, 30), [1], True, 13)
    expected = ort_run(m, {"x": x})[0]
    assert np.isfinite(expected).all()
    check(m, x, expected)


# ------------------------------------------------------------------------------------------- ArgMax, ArgMin

def arg_model(kind, shape, axis, keepdims, last=None, opset=13, dtype="float32"):
    attrs = {"axis": axis, "keepdims": int(keepdims)}
    if last is not None:
        attrs["select_last_index"] = int(last)
    return model([node(kind, ["x"], ["y"], **attrs)], {"x": shape}, ["y"], opset=opset,
                 dtypes={"x": dtype, "y": "int64"})


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), kind=st.sampled_from(["ArgMax", "ArgMin"]),
       opset=st.sampled_from([7, 11, 12, 13, 21]), keepdims=st.booleans(), last=st.booleans(),
       dtype=st.sampled_from(["float32", "float16", "int32", "int64"]), data=st.data())
def test_arg_reductions_and_their_ties_equal_onnxruntime(shape, kind, opset, keepdims, last, dtype, data):
    """Elements from {-1, 0, 1}: most rows hold their extreme several times, so the first or last index shows."""
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1) if opset >= 11 else st.integers(0, rank - 1))
    m = arg_model(kind, shape, axis, keepdims, last if opset >= 12 else None, opset, dtype)
    x = np.random.default_rng(data.draw(st.integers(0, 99))).integers(-1, 2, shape).astype(dtype)
    check(m, x, exact=True)


def test_select_last_index_picks_the_last_of_equal_extremes():
    x = np.array([[3, 1, 3, 0, 3], [0, 0, 2, 2, -1]], np.float32)
    for kind, first, last in (("ArgMax", [0, 2], [4, 3]), ("ArgMin", [3, 4], [3, 4])):
        for flag, want in ((0, first), (1, last)):
            m = arg_model(kind, (2, 5), 1, False, flag)
            check(m, x, np.array(want, np.int64), exact=True)
            assert ort_run(m, {"x": x})[0].tolist() == want


# ------------------------------------------------------------------------------------------- LogSoftmax, Hardmax

@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 6), min_size=1, max_size=4), kind=st.sampled_from(["LogSoftmax", "Hardmax"]),
       opset=st.sampled_from([7, 11, 13, 21]), data=st.data())
def test_log_softmax_and_hardmax_equal_onnxruntime(shape, kind, opset, data):
    """Before opset 13 the input is a 2-D matrix whose rows start at ``axis``; from 13 on, one axis. Hardmax's
    input has ties (integers), LogSoftmax's large values."""
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1) if opset >= 11 else st.integers(0, rank - 1))
    m = model([node(kind, ["x"], ["y"], axis=axis)], {"x": shape}, ["y"], opset=opset)
    rng = np.random.default_rng(data.draw(st.integers(0, 99)))
    if kind == "Hardmax":
        x = rng.integers(-1, 2, shape).astype(np.float32)
    else:
        x = rng.uniform(-200, 200, shape).astype(np.float32)
    check(m, x)


@pytest.mark.parametrize("kind", ["Softmax", "LogSoftmax"])
def test_softmax_exponentials_run_in_vectors_over_long_rows(kind):
    """A language model's output rows (a vocabulary of 1,000 here; 10,000-50,000 in use): the exponentials are a
    stage of whole vectors (no ``expf`` per element inside the row sum), LogSoftmax's logarithm one per row."""
    m = model([node(kind, ["x"], ["y"], axis=-1)], {"x": (5, 1003)}, ["y"], opset=13)
    x = rand((5, 1003), 4, -30, 30)
    check(m, x)
    src = nw.compile(m, target=Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")).source
    assert "tt_vexp_f32x8" in src and len(re.findall(r"\bexpf\(", src)) <= 1  # the row's last odd element


@settings(max_examples=12, deadline=None)
@given(rows=st.lists(st.integers(1, 5), min_size=0, max_size=3), vectors=st.integers(2, 9), tail=st.integers(0, 7),
       kind=st.sampled_from(["Softmax", "LogSoftmax"]), seed=st.integers(0, 99))
def test_softmax_rows_reduce_in_lanes_row_by_row(rows, vectors, tail, kind, seed):
    """Attention's rows (the last axis of two or more AVX2 vectors, and a tail: Whisper's 1500 frames): the
    maximum and the sum in vector lanes, the tail joining the lanes' reduction, every stage in one parallel loop
    over the rows; equal to onnxruntime."""
    shape = (*rows, 8 * vectors + tail)
    m = model([node(kind, ["x"], ["y"], axis=-1)], {"x": shape}, ["y"], opset=13)
    check(m, rand(shape, seed, -40, 40))
    src = nw.compile(m, target=Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")).source
    assert "row_max_lanes" in src and "row_sum_lanes" in src
    assert src.count("#pragma omp parallel") <= 1


@pytest.mark.parametrize("kind", ["Softmax", "LogSoftmax", "Hardmax"])
def test_the_softmax_family_on_float16(kind):
    m = model([node(kind, ["x"], ["y"], axis=-1)], {"x": (3, 50)}, ["y"], opset=13,
              dtypes={"x": "float16", "y": "float16"})
    check(m, rand((3, 50), 8, -6, 6).astype(np.float16))


def test_the_softmax_family_is_one_operator_with_a_mode():
    x = (2, 5)
    for kind in SoftmaxKind:
        g = import_onnx(model([node(kind.value, ["x"], ["y"], axis=-1)], {"x": x}, ["y"], opset=13))
        (n,) = g.nodes
        assert n.op == Softmax(1, kind) and str(n.op) == f"{kind.value}[axis=1]"


# ------------------------------------------------------------------------------------------- fusion, graphs

def test_a_reduction_computes_the_elementwise_chain_after_it_as_one_kernel():
    m = model([node("ReduceMean", ["x"], ["r"], axes=[2, 3], keepdims=1), node("Relu", ["r"], ["s"]),
               node("Mul", ["s", "k"], ["p"]), node("Add", ["p", "b"], ["y"])], {"x": (2, 8, 6, 6)}, ["y"],
              {"k": np.float32(3.0), "b": rand((1, 8, 1, 1), 1)}, opset=13)
    g = optimized_graph(m, Target.host())
    (n,) = g.nodes
    assert isinstance(n.op, Reduction) and [str(s.op) for s in n.op.epilogue] == ["Relu", "Mul", "Add"]
    module = nw.compile(m)
    assert [k.kind for k in module.manifest.kernels] == ["reduce"]
    x = rand((2, 8, 6, 6), 2)
    assert_close(module(x), ort_run(m, {"x": x})[0])


def test_a_global_average_pool_written_as_reduce_mean_reads_a_blocked_convolution():
    """``ReduceMean(axes=[2, 3])`` after a convolution (how some exporters write global average pooling) reads the
    convolution's output in plain layout, then a dense layer reads the pooled vector."""
    m = model([node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]), node("Relu", ["c"], ["r"]),
               node("ReduceMean", ["r"], ["p"], axes=[2, 3], keepdims=0), node("Gemm", ["p", "fc"], ["y"], transB=1)],
              {"x": (1, 8, 9, 9)}, ["y"], {"w": rand((16, 8, 3, 3), 1), "fc": rand((10, 16), 2)}, opset=13)
    target = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
    x = rand((1, 8, 9, 9), 3)
    assert_close(nw.compile(m, target)(x), ort_run(m, {"x": x})[0])


def layer_norm_decomposition(shape, ops):
    """``(x - mean) / sqrt(var + eps) * scale + bias`` over the last axis, as exporters before LayerNormalization
    wrote it; ``ops`` names the square (Pow or Mul) and how the standard deviation is taken."""
    eps = 1e-5
    n = shape[-1]
    nodes = [node("ReduceMean", ["x"], ["mean"], axes=[-1]), node("Sub", ["x", "mean"], ["d"])]
    inits = {"scale": rand((n,), 1, 0.5, 1.5), "bias": rand((n,), 2)}
    if ops == "exporter":
        inits.update(two=np.float32(2.0), eps=np.float32(eps))
        nodes += [node("Pow", ["d", "two"], ["sq"]), node("ReduceMean", ["sq"], ["var"], axes=[-1]),
                  node("Add", ["var", "eps"], ["v"]), node("Sqrt", ["v"], ["std"])]
    else:  # today's operators: sqrt(sum((d / sqrt(n))^2) + eps) is the L2 norm of [d / sqrt(n), sqrt(eps)]
        inits["inv_sqrt_n"] = np.float32(1 / np.sqrt(n))
        inits["sqrt_eps"] = np.full((*shape[:-1], 1), np.sqrt(eps), np.float32)
        nodes += [node("Mul", ["d", "inv_sqrt_n"], ["ds"]), node("Concat", ["ds", "sqrt_eps"], ["row"], axis=-1),
                  node("ReduceL2", ["row"], ["std"], axes=[-1])]
    nodes += [node("Div", ["d", "std"], ["z"]), node("Mul", ["z", "scale"], ["zs"]), node("Add", ["zs", "bias"], ["y"])]
    return model(nodes, {"x": shape}, ["y"], inits, opset=13)


@pytest.mark.parametrize("ops", [
    "l2_norm",
    pytest.param("exporter", marks=pytest.mark.skipif(not {"Pow", "Sqrt"} <= set(supported_operators()),
                                                      reason="Pow and Sqrt are not imported yet")),
])
def test_a_layer_norm_written_with_reduce_mean_compiles_and_equals_onnxruntime(ops):
    """Rows far from zero mean (offset 20) of a transformer-like shape."""
    m = layer_norm_decomposition((2, 16, 64), ops)
    x = rand((2, 16, 64), 3, -2, 2) + np.float32(20)
    expected = ort_run(m, {"x": x})[0]
    assert_close(interpret(import_onnx(m), {"x": x})["y"], expected)
    assert_close(nw.compile(m)(x), expected)


# ------------------------------------------------------------------------------------------- what is refused

@pytest.mark.parametrize("kind, opset", [("ReduceSum", 13), ("ReduceMean", 18), ("ReduceMax", 21)])
def test_axes_computed_at_run_time_are_refused(kind, opset):
    m = model([node(kind, ["x", "axes"], ["y"])], {"x": (2, 3), "axes": (1,)}, ["y"], opset=opset,
              dtypes={"axes": "int64"})
    with pytest.raises(UnsupportedModelError, match=r"its axes \(input 1, 'axes'\) must be a constant, but it is "
                                                    "computed at run time"):
        import_onnx(m)


def test_axes_folded_from_constants_at_import_are_accepted():
    """Axes computed from constants only (the last axis as the rank less one: ``Shape`` of ``Shape``) are evaluated
    when the model is imported."""
    m = model([node("Shape", ["x"], ["s"]), node("Shape", ["s"], ["rank"]), node("Sub", ["rank", "one"], ["last"]),
               node("ReduceSum", ["x", "last"], ["y"], keepdims=0)],
              {"x": (2, 3)}, ["y"], {"one": np.array(1, np.int64)}, opset=13)
    check(m, rand((2, 3), 9))


@pytest.mark.parametrize("build, reason", [
    (lambda: model([node("ReduceMean", ["x"], ["y"], axes=[1])], {"x": (2, 3)}, ["y"], opset=18),
     "unsupported attribute.*axes"),
    (lambda: reduce_model("ReduceSum", (2, 3), [1, -1]), "axes \\[1, -1\\] name an axis twice"),
    (lambda: reduce_model("ReduceMax", (2, 3), [2], opset=11), "axis 2 is out of range for rank 2"),
    (lambda: reduce_model("ReduceMean", (2, 3), [1], dtype="int32"), "the input is int32; ReduceMean takes float"),
    (lambda: model([node("ReduceSum", ["e"], ["y"], axes=[1])], {"x": (2,)}, ["y"],
                   {"e": np.zeros((2, 0), np.float32)}, opset=11), "reducing the empty axis 1"),
    (lambda: arg_model("ArgMax", (2, 3), 1, True, last=1, opset=11), "unsupported attribute.*select_last_index"),
])
def test_what_reductions_cannot_take_is_refused_with_the_reason(build, reason):
    with pytest.raises(UnsupportedModelError, match=reason):
        import_onnx(build())


def test_inference_checks_the_axes_and_the_dtype():
    x = TensorType((2, 0, 3), "float32")
    with pytest.raises(GraphError, match="reducing the empty axis 1"):
        Reduction(ReduceKind.SUM, (1,)).infer([x])
    with pytest.raises(GraphError, match="axis 3 is out of range"):
        ArgReduce(ArgKind.MAX, 3).infer([TensorType((2, 3), "float32")])
    with pytest.raises(GraphError, match="distinct non-negative integers in increasing order"):
        Reduction(ReduceKind.MEAN, (2, 1))
    assert Reduction(ReduceKind.L2, (0, 2), False).infer([TensorType((2, 4, 3), "float16")]) == (
        TensorType((4,), "float16"),)
    assert str(Reduction(ReduceKind.L2, (0, 2), False)) == "ReduceL2[axes=(0, 2), keepdims=False]"


def test_the_product_reducer_starts_from_one():
    a = te.placeholder((4,), "float32", "a")
    k = te.reduce_axis(4, "k")
    assert te.prod(a[k], axis=k).identity() == te.const(1.0, "float32")
    i = te.placeholder((4,), "int64", "i")
    assert te.prod(i[k], axis=k).identity() == te.const(1, "int64")

"""GroupNormalization (opsets 18 and 21) and InstanceNormalization, one operator (``operators/group_norm.py``):
imported, interpreted and compiled equal to onnxruntime for rank 3 to 5 inputs (1-D, 2-D and 3-D images), any number
of groups, rows far from zero mean; float16 and bfloat16 computed in float32; after a convolution it normalizes the
blocked layout the convolution writes; what it cannot take is refused with the reason."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.dtype import DType
from tensortune.frontend import import_onnx
from tensortune.graph import UnsupportedModelError, interpret
from tensortune.network import optimized_graph
from tensortune.operators.group_norm import GroupNorm
from tensortune.target import Target

AVX2 = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")


def norm_model(shape, groups=None, opset=21, param_shape=None, dtype="float32", **attrs):
    """InstanceNormalization when ``groups`` is None, else GroupNormalization (scale and bias per group at opset 18,
    per channel from 21, unless ``param_shape`` says otherwise)."""
    c = shape[1]
    if groups is None:
        op, param_shape = "InstanceNormalization", param_shape or (c,)
    else:
        op, param_shape = "GroupNormalization", param_shape or ((groups,) if opset < 21 else (c,))
        attrs["num_groups"] = groups
    inits = {"scale": rand(param_shape, 1, 0.5, 1.5).astype(dtype), "bias": rand(param_shape, 2).astype(dtype)}
    return model([node(op, ["x", "scale", "bias"], ["y"], **attrs)], {"x": shape}, ["y"], inits, opset=opset,
                 dtypes={"x": dtype, "y": dtype})


@settings(max_examples=15, deadline=None)
@given(data=st.data(), rank=st.integers(3, 5), kind=st.sampled_from(["instance", "group18", "group21"]),
       offset=st.floats(-5, 5), epsilon=st.sampled_from([1e-5, 1e-3]))
def test_group_and_instance_norm_equal_onnxruntime(data, rank, kind, offset, epsilon):
    """Any batch, channels, groups (a divisor of the channels) and positions of a 1-D, 2-D or 3-D image (rows near
    zero mean: onnxruntime's GroupNormalization computes the variance in one pass, ``E[x^2] - E[x]^2``, and loses
    its precision on rows far from it; see the next test)."""
    shape = data.draw(st.tuples(st.integers(1, 2), st.integers(1, 12), *[st.integers(1, 7)] * (rank - 2)))
    divisors = [d for d in range(1, shape[1] + 1) if shape[1] % d == 0]
    groups = None if kind == "instance" else data.draw(st.sampled_from(divisors))
    opset = {"instance": data.draw(st.sampled_from([7, 13, 21])), "group18": 18, "group21": 21}[kind]
    m = norm_model(shape, groups, opset, epsilon=epsilon)
    x = rand(shape, 3, -2, 2) + np.float32(offset)
    expected = ort_run(m, {"x": x})[0]
    g = import_onnx(m)
    assert [type(n.op) for n in g.nodes] == [GroupNorm]
    # onnxruntime's one-pass statistics lose digits on short rows away from zero (a row of one element, offset 5,
    # is off by 1e-4): the float64 reference is the tight oracle, onnxruntime agrees within 1e-3
    (norm,) = g.nodes
    exact = norm.op.reference(x.astype(np.float64), *(g.constants[i].astype(np.float64) for i in norm.inputs[1:]))
    for got in (interpret(g, {"x": x})["y"], nw.compile(m)(x)):
        assert_close(got, exact.astype(np.float32))
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)


def test_rows_far_from_zero_mean_keep_their_precision():
    """Two-pass float32 statistics (``layer_norm.row_statistics``) equal the float64 reference on rows of mean 100
    and deviation 1, where one pass would cancel (onnxruntime's GroupNormalization is off by about 1e-3 there)."""
    shape = (2, 6, 2, 9)
    m = norm_model(shape, 3)
    x = rand(shape, 7, -1, 1) + np.float32(100)
    rows = x.astype(np.float64).reshape(2, 3, -1)
    exact = ((rows - rows.mean(-1, keepdims=True)) / np.sqrt(rows.var(-1, keepdims=True) + 1e-5)).reshape(shape)
    g = import_onnx(m)
    scale, bias = (g.constants[n].reshape(1, -1, 1, 1) for n in ("scale", "bias"))
    expected = (exact * scale + bias).astype(np.float32)
    assert_close(interpret(g, {"x": x})["y"], expected)
    assert_close(nw.compile(m)(x), expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_inputs_are_normalized_with_float32_statistics(dtype):
    """The result is the float32 one rounded to the input's type (within its tolerance), offset rows included."""
    shape = (2, 8, 6, 5)
    x32 = rand(shape, 3, -2, 2) + np.float32(20)
    x = x32.astype(DType.of(dtype).numpy)
    expected = ort_run(norm_model(shape, 4), {"x": x.astype(np.float32)})[0]
    m = norm_model(shape, 4, dtype=dtype)
    for got in (interpret(import_onnx(m), {"x": x})["y"], nw.compile(m)(x)):
        assert got.dtype == x.dtype
        ok, _ = DType.of(dtype).tolerance.check(got.astype(np.float32), expected)
        assert ok


@pytest.mark.parametrize("groups, opset", [(4, 21), (2, 18), (None, 13)])
def test_after_a_convolution_it_normalizes_the_blocked_layout(groups, opset):
    """Its layout rule (``WINDOW``) keeps the convolution's NCHW8c output blocked through the normalization and
    the ReLU into the next convolution: no relayout between them; groups of 4 lie inside a block of 8, groups
    of 8 are one block, instance groups one channel."""
    param = (16,) if opset == 21 or groups is None else (groups,)
    attrs = {} if groups is None else {"num_groups": groups}
    op = "InstanceNormalization" if groups is None else "GroupNormalization"
    m = model([node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
               node(op, ["c", "s", "b"], ["n"], **attrs), node("Relu", ["n"], ["r"]),
               node("Conv", ["r", "w2"], ["y"], kernel_shape=[1, 1])],
              {"x": (2, 8, 10, 10)}, ["y"], {"w": rand((16, 8, 3, 3), 1), "w2": rand((16, 16, 1, 1), 2),
                                              "s": rand(param, 3), "b": rand(param, 4)}, opset=opset)
    g = optimized_graph(m, AVX2)
    (gn,) = [n for n in g.nodes if isinstance(n.op, GroupNorm)]
    assert g.values[gn.inputs[0]].layout.block == 8 and g.values[gn.outputs[0]].layout.block == 8
    assert [n.op.kind for n in g.nodes].count("Relayout") == 2  # the image in, the result out
    x = rand((2, 8, 10, 10), 5)
    assert_close(nw.compile(m, AVX2)(x), ort_run(m, {"x": x})[0])


@pytest.mark.parametrize("build, reason", [
    (lambda: norm_model((2, 6), None), "needs a batch, a channel and at least one spatial axis"),
    (lambda: norm_model((2, 6, 4), 3, 18, param_shape=(6,)), r"scale must hold one value per group, shape \(3,\)"),
    (lambda: norm_model((2, 6, 4), 3, 21, param_shape=(3,)), r"one value per channel, shape \(6,\)"),
    (lambda: norm_model((2, 6, 4), 4, 21), "num_groups 4 must be positive and divide the channels"),
    (lambda: norm_model((2, 6, 4), 3, 21, stash_type=0), "stash_type 0 is not supported"),
    (lambda: norm_model((2, 6, 4), 3, 17), "supported at opsets 18 to 20, 21 and later, not 17"),
])
def test_what_it_cannot_take_is_refused_with_the_reason(build, reason):
    with pytest.raises(UnsupportedModelError, match=reason):
        import_onnx(build())

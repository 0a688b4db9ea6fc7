"""LayerNormalization, the operator kind added as one module (``operators/layer_norm.py``): imported from opset
17, interpreted and compiled equal to onnxruntime for random shapes and axes, with and without bias; what it
cannot take is refused with the reason."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.frontend import import_onnx
from tensortune.graph import UnsupportedModelError, interpret
from tensortune.operators.layer_norm import LayerNorm


def layer_norm_model(shape, axis, bias=True, scale_shape=None, opset=17, **attrs):
    rank = len(shape)
    row = tuple(shape[axis % rank:])
    inits = {"scale": rand(scale_shape or row, 1, 0.5, 1.5)}
    if bias:
        inits["bias"] = rand(scale_shape or row, 2)
    m = model([node("LayerNormalization", ["x", "scale"] + (["bias"] if bias else []), ["y"], axis=axis, **attrs)],
              {"x": shape}, ["y"], inits, opset=opset)
    return m


@settings(max_examples=15, deadline=None)
@given(shape=st.lists(st.integers(1, 24), min_size=1, max_size=4), data=st.data(), bias=st.booleans(),
       offset=st.floats(-50, 50), epsilon=st.sampled_from([1e-5, 1e-3]), vectors=st.integers(0, 12))
def test_layer_norm_equals_onnxruntime(shape, data, bias, offset, epsilon, vectors):
    """Any shape, any axis (negative too), rows far from zero mean (the two-pass statistics keep precision); a
    last axis of ``vectors`` of 8 (and a tail) half the time: the statistics then summed in vector lanes."""
    if vectors:  # two or more vectors, and a tail of shape[-1] % 8 elements
        shape = [*shape[:-1], 8 * vectors + shape[-1] % 8]
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    m = layer_norm_model(shape, axis, bias, epsilon=epsilon)
    x = rand(shape, 3, -2, 2) + np.float32(offset)
    expected = ort_run(m, {"x": x})[0]
    g = import_onnx(m)
    assert [type(n.op) for n in g.nodes] == [LayerNorm]
    # the float64 reference is the oracle, within what float32 inputs allow: a row's mean is rounded to its
    # elements' ulp, so x - mean carries that error, large next to a row's deviation when its few elements are far
    # from zero and close together (two elements at offset 9 differing by 1e-3); onnxruntime agrees within 1e-3
    (norm,) = g.nodes
    exact = norm.op.reference(x.astype(np.float64), *(g.constants[i].astype(np.float64) for i in norm.inputs[1:]))
    axes = tuple(range(norm.op.axis, len(shape)))
    x64 = x.astype(np.float64)
    spread = np.sqrt(x64.var(axis=axes, keepdims=True) + epsilon)
    scale = np.abs(g.constants[norm.inputs[1]]).max()
    bound = 1e-5 + 1e-4 * np.abs(exact) + 8 * np.finfo(np.float32).eps * np.abs(x64).max(axis=axes, keepdims=True) \
        / spread * scale
    for got in (interpret(g, {"x": x})["y"], nw.compile(m)(x)):
        assert (np.abs(got - exact) <= bound).all(), float(np.max(np.abs(got - exact) - bound))
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3)


def test_a_scale_that_broadcasts_over_the_row():
    """A scale of one element per last axis of a two-axis row."""
    m = layer_norm_model((2, 3, 5, 4), 2, scale_shape=(4,))
    x = rand((2, 3, 5, 4), 5)
    assert_close(nw.compile(m)(x), ort_run(m, {"x": x})[0])


def test_a_transformer_block_shape_compiles_into_one_kernel():
    m = layer_norm_model((1, 128, 768), -1)
    module = nw.compile(m)
    assert [k.kind for k in module.manifest.kernels] == ["layer_norm"]
    assert "row_sum_lanes" in module.source and "row_squares_lanes" in module.source  # sums in vectors
    x = rand((1, 128, 768), 6, -3, 3)
    assert_close(module(x), ort_run(m, {"x": x})[0])


@pytest.mark.parametrize("opset, attrs, reason", [
    (16, {}, "supported at opsets 17 and later, not 16"),
    (17, {"stash_type": 0}, "stash_type 0 is not supported"),
])
def test_what_layer_norm_cannot_take_is_refused_with_the_reason(opset, attrs, reason):
    m = layer_norm_model((2, 8), -1, opset=opset, **attrs)
    with pytest.raises(UnsupportedModelError, match=reason):
        import_onnx(m)


def test_its_optional_statistics_outputs_are_refused():
    m = model([node("LayerNormalization", ["x", "scale"], ["y", "mean"], axis=-1)], {"x": (2, 8)}, ["y", "mean"],
              {"scale": rand((8,), 1)}, opset=17)
    with pytest.raises(UnsupportedModelError, match="mean and inverse standard deviation"):
        import_onnx(m)

"""Softplus, the elementwise operator added as one module (``operators/softplus.py``): imported, interpreted,
compiled, fused after a convolution and planned in blocked layouts by the generic rules, equal to onnxruntime."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.frontend import import_onnx
from tensortune.graph import interpret
from tensortune.network import optimized_graph
from tensortune.operators import Conv
from tensortune.operators.softplus import Softplus
from tensortune.target import Target


@settings(max_examples=12, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=4), scale=st.sampled_from([1.0, 30.0, 120.0]),
       opset=st.sampled_from([7, 13, 17]))
def test_softplus_equals_onnxruntime_interpreted_and_compiled(shape, scale, opset):
    """Any shape, values up to +-120 (``exp(x)`` overflows float32 beyond 88; the formula does not)."""
    m = model([node("Softplus", ["x"], ["y"])], {"x": shape}, ["y"], opset=opset)
    x = rand(shape, 3, -scale, scale)
    expected = ort_run(m, {"x": x})[0]
    assert np.isfinite(expected).all()
    assert_close(interpret(import_onnx(m), {"x": x})["y"], expected)
    assert_close(nw.compile(m)(x), expected)


def test_softplus_after_a_convolution_joins_its_epilogue_and_keeps_the_blocked_layout():
    """The fusion pass reads only the operator's pattern: Softplus joins the convolution's epilogue, the
    convolution's output stays blocked through it."""
    w = rand((16, 8, 3, 3), 1)
    m = model([node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
               node("Softplus", ["c"], ["s"]), node("Conv", ["s", "w2"], ["y"], kernel_shape=[1, 1])],
              {"x": (1, 8, 10, 10)}, ["y"], {"w": w, "w2": rand((16, 16, 1, 1), 2)})
    target = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
    g = optimized_graph(m, target)
    convs = [n for n in g.nodes if isinstance(n.op, Conv)]
    assert [s.op for s in convs[0].op.epilogue] == [Softplus()]
    assert g.values[convs[0].outputs[0]].layout.blocked
    x = rand((1, 8, 10, 10), 4, -3, 3)
    assert_close(nw.compile(m)(x), ort_run(m, {"x": x})[0])


def test_a_softplus_of_its_own_reads_and_writes_the_blocked_layout():
    """Where the convolution's output has two readers (no fusion), Softplus is a kernel of its own, planned in the
    layout of its input by its elementwise layout rule, between two blocked convolutions."""
    m = model([node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]), node("Softplus", ["c"], ["s"]),
               node("Conv", ["s", "w"], ["y"], kernel_shape=[1, 1]), node("Relu", ["c"], ["z"])],
              {"x": (1, 16, 5, 5)}, ["y", "z"], {"w": rand((16, 16, 1, 1), 1)})
    target = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
    g = optimized_graph(m, target)
    (sp,) = [n for n in g.nodes if isinstance(n.op, Softplus)]
    assert g.values[sp.inputs[0]].layout.blocked and g.values[sp.outputs[0]].layout.blocked
    module = nw.compile(m, target)
    assert "softplus" in {k.kind for k in module.manifest.kernels}
    x = rand((1, 16, 5, 5), 2, -2, 2)
    for got, want in zip(module(x), ort_run(m, {"x": x})):
        assert_close(got, want)

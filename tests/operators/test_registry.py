"""The operator registry: an operator is one class and its converter, found by the importer, the interpreter,
the fusion and layout passes and the network compiler with no edit elsewhere (shown here with an operator defined
in this test); converters are registered per opset range."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.frontend import import_onnx
from tensortune.graph import GraphError, Pattern, TensorType, UnsupportedModelError, interpret
from tensortune.network import optimized_graph
from tensortune.operators import Conv, Unary, onnx_convert, supported_operators
from tensortune.operators.math import NumpyMath
from tensortune.target import Target


@dataclass(frozen=True, slots=True)
class Softsign(Unary):
    """``x / (1 + |x|)``, defined here in place of the package's own (``operators.unary_math``)."""

    name = "softsign"

    def formula(self, xs, m):
        return xs[0] / (m.const(1) + m.abs(xs[0]))


@pytest.fixture
def softsign(monkeypatch):
    """The converters with the package's Softsign replaced by this module's."""
    monkeypatch.setattr(onnx_convert, "_CONVERTERS", {k: list(v) for k, v in onnx_convert._CONVERTERS.items()
                                                      if k != "Softsign"})
    onnx_convert.simple("Softsign", Softsign)


def test_an_operator_defined_outside_the_package_is_imported_interpreted_fused_and_compiled(softsign):
    m = model([node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3]), node("Softsign", ["c"], ["y"]),
               node("Softsign", ["x"], ["z"])], {"x": (1, 8, 7, 7)}, ["y", "z"], {"w": rand((16, 8, 3, 3), 1)})
    x = rand((1, 8, 7, 7), 2, -3, 3)
    expected = ort_run(m, {"x": x})
    got = interpret(import_onnx(m), {"x": x})
    for name, want in zip(("y", "z"), expected):
        assert_close(got[name], want)
    g = optimized_graph(m, Target.host())
    conv = next(n for n in g.nodes if isinstance(n.op, Conv))
    assert [s.op for s in conv.op.epilogue] == [Softsign()]  # fused by its pattern
    module = nw.compile(m)
    assert "softsign" in {k.kind for k in module.manifest.kernels}  # the one not after a convolution
    for got, want in zip(module(x), expected):
        assert_close(got, want)


def test_every_registered_operator_type_has_converters_for_disjoint_opset_ranges():
    names = supported_operators()
    assert {"Softplus", "LayerNormalization", "Conv", "Clip", "Softmax"} <= set(names)
    for op_type in names:
        spans = sorted((c.since, c.until or 10**6) for c in onnx_convert._CONVERTERS[op_type])
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:])), op_type


def test_a_second_converter_for_the_same_opsets_is_an_internal_error(monkeypatch):
    monkeypatch.setattr(onnx_convert, "_CONVERTERS", {k: list(v) for k, v in onnx_convert._CONVERTERS.items()})
    with pytest.raises(AssertionError, match="two converters of Clip"):
        onnx_convert.converter("Clip", since=12)(lambda ctx, n: None)


def test_the_converter_of_the_models_opset_is_used():
    """Clip's bounds are attributes before opset 11 and inputs from 11 on: each opset gets its converter."""
    old = model([node("Clip", ["x"], ["y"], min=-0.5, max=0.5)], {"x": (9,)}, ["y"], opset=10)
    new = model([node("Clip", ["x", "lo", "hi"], ["y"])], {"x": (9,)}, ["y"],
                {"lo": np.float32(-0.5), "hi": np.float32(0.5)}, opset=11)
    x = rand((9,), 3, -2, 2)
    for m in (old, new):
        assert_close(interpret(import_onnx(m), {"x": x})["y"], np.clip(x, -0.5, 0.5))
    with pytest.raises(UnsupportedModelError, match="min and max are inputs from opset 11 on"):
        import_onnx(model([node("Clip", ["x"], ["y"], min=-0.5)], {"x": (9,)}, ["y"], opset=11))


def test_patterns_and_formulas():
    assert Softsign.pattern is Pattern.ELEMWISE and Conv.pattern is Pattern.OUT_FUSABLE
    with pytest.raises(AttributeError, match="has no function 'erff'"):
        NumpyMath(np.float32).erff
    with pytest.raises(GraphError, match="must be a float tensor"):
        Softsign().infer([TensorType((3,), "int32")])


def test_a_producer_fusion_rule_registered_outside_the_package_is_applied(monkeypatch):
    """``passes.fuse_producers`` applies every rule of ``graph.op.PRODUCER_FUSIONS`` and names no operator: a rule
    defined here (a Tanh taken in by the Sigmoid that reads it, as one fused node) is applied with no other edit."""
    from tensortune.graph.ir import Node
    from tensortune.graph.op import PRODUCER_FUSIONS, producer_fusion
    from tensortune.operators import Fused, Sigmoid, Tanh

    monkeypatch.setattr("tensortune.passes.fuse_injective", lambda g: g)  # leave the pair to the rule

    def tanh_into_sigmoid(g, node, target):
        src = next((n for n in g.nodes if node.inputs[0] in n.outputs), None) if node.inputs else None
        if not isinstance(node.op, Sigmoid) or src is None or not isinstance(src.op, Tanh):
            return None
        return src, Node(Fused(((Tanh(), (0,)), (Sigmoid(), (-1,))), 1), src.inputs, node.outputs, node.name)

    producer_fusion(tanh_into_sigmoid)
    try:
        m = model([node("Tanh", ["x"], ["t"]), node("Sigmoid", ["t"], ["y"])], {"x": (3, 5)}, ["y"])
        g = optimized_graph(m, Target.host())
        assert [str(n.op) for n in g.nodes] == ["Fused[s0 = Tanh(x0); s1 = Sigmoid(s0)]"]
        x = rand((3, 5), 1, -3, 3)
        assert_close(nw.compile(m)(x), ort_run(m, {"x": x})[0])
    finally:
        PRODUCER_FUSIONS.remove(tanh_into_sigmoid)

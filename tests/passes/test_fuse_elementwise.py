"""Chains of elementwise nodes fused into one kernel (``passes.fuse_elementwise``): any chain equals onnxruntime,
and nodes stay apart where fusing would compute a value twice or lose a graph output."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.frontend import import_onnx
from tensortune.graph import interpret
from tensortune.network import optimized_graph
from tensortune.operators import FusedElementwise
from tensortune.passes import eliminate_dead_nodes, fuse_elementwise
from tensortune.target import Target

HOST = Target.host()
UNARY = ["Relu", "Sigmoid", "Tanh", "Softplus", "LeakyRelu", "HardSwish"]
BINARY = ["Add", "Sub", "Mul", "Div"]


@st.composite
def chains(draw):
    """A random DAG of elementwise nodes over up to three inputs of one shape (and a broadcast constant)."""
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)))
    values = ["x0"] + [f"x{k}" for k in range(1, draw(st.integers(1, 3)))]
    inputs = {v: shape for v in values}
    nodes, inits = [], {"c": rand(shape[-1:], 9, 0.5, 1.5)}
    for k in range(draw(st.integers(2, 7))):
        out = f"v{k}"
        if draw(st.booleans()):
            nodes.append(node(draw(st.sampled_from(UNARY)), [draw(st.sampled_from(values))], [out]))
        else:
            op = draw(st.sampled_from(BINARY))
            a = draw(st.sampled_from(values))
            b = "c" if op == "Div" else draw(st.sampled_from(values + ["c"]))  # no division by values near zero
            nodes.append(node(op, [a, b], [out]))
        values.append(out)
    return model(nodes, inputs, [values[-1]], inits, opset=14), {v: rand(shape, k, -2, 2) for k, v in enumerate(inputs)}


@settings(max_examples=25, deadline=None)
@given(chains())
def test_any_chain_of_elementwise_nodes_equals_onnxruntime(case):
    m, feeds = case
    expected = ort_run(m, feeds)[0]
    g = optimized_graph(m, HOST)
    # fewer nodes, none of them lost: every node imported is a node or a step of a fused one
    imported = eliminate_dead_nodes(import_onnx(m))
    steps = sum(len(n.op.steps) if isinstance(n.op, FusedElementwise) else 1 for n in g.nodes)
    assert steps == len(imported.nodes) and len(g.nodes) <= len(imported.nodes)
    assert_close(interpret(g, feeds)[m.graph.output[0].name], expected)
    assert_close(nw.compile(m).run(feeds)[m.graph.output[0].name], expected)


def test_silu_is_one_kernel():
    m = model([node("Sigmoid", ["x"], ["s"]), node("Mul", ["x", "s"], ["y"])], {"x": (1, 32, 14, 14)}, ["y"])
    module = nw.compile(m)
    assert [k.kind for k in module.manifest.kernels] == ["sigmoid_mul"]
    x = rand((1, 32, 14, 14), 1, -4, 4)
    assert_close(module(x), ort_run(m, {"x": x})[0])


def test_a_value_read_twice_a_graph_output_or_a_smaller_broadcast_one_stays_apart():
    """``s`` has two readers, ``t`` is a graph output, ``p`` (one row) broadcasts into a larger reader: none is
    computed inside another node; the rest of each chain still fuses."""
    m = model([node("Sigmoid", ["x"], ["s"]), node("Mul", ["s", "x"], ["a"]), node("Add", ["s", "a"], ["t"]),
               node("Tanh", ["t"], ["u"]), node("Relu", ["row"], ["p"]), node("Mul", ["u", "p"], ["y"])],
              {"x": (4, 6), "row": (1, 6)}, ["y", "t"])
    g = fuse_elementwise(import_onnx(m))
    outputs = {o for n in g.nodes for o in n.outputs}
    assert {"s", "t", "p"} <= outputs and "a" not in outputs and "u" not in outputs
    feeds = {"x": rand((4, 6), 1), "row": rand((1, 6), 2)}
    for got, want in zip(nw.compile(m).run(feeds).values(), ort_run(m, feeds)):
        assert_close(got, want)


def test_a_fused_node_prints_its_steps_and_keeps_the_blocked_layout():
    m = model([node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]), node("Relu", ["c"], ["r"]),
               node("Sigmoid", ["c"], ["s"]), node("Mul", ["r", "s"], ["y"]), node("Conv", ["y", "w"], ["z"],
                                                                              kernel_shape=[1, 1])],
              {"x": (1, 16, 5, 5)}, ["z"], {"w": rand((16, 16, 1, 1), 3)})
    target = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
    g = optimized_graph(m, target)
    (f,) = [n for n in g.nodes if isinstance(n.op, FusedElementwise)]
    assert str(f.op) == "Fused[s0 = Relu(x0); s1 = Sigmoid(x0); s2 = Mul(s0, s1)]"
    assert g.values[f.inputs[0]].layout.blocked and g.values[f.outputs[0]].layout.blocked
    x = rand((1, 16, 5, 5), 4)
    assert_close(nw.compile(m, target)(x), ort_run(m, {"x": x})[0])
    assert np.isfinite(nw.compile(m, target)(x)).all()

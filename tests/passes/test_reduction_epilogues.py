"""Elementwise consumers fused into a reduction (``passes.fuse_epilogues``): a max or average pooling computes the
chain after it on each result before storing it, in plain and blocked layouts, and equals onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.graph import interpret
from tensortune.network import optimized_graph
from tensortune.operators import Elementwise, Pool
from tensortune.target import Target

HOST = Target.host()
UNARY = ["Relu", "Sigmoid", "Tanh", "Softplus"]


@st.composite
def pooled_chains(draw):
    """A pooling (after a convolution when ``blocked``, so that it runs in NCHW[x]c) and a random chain after it:
    unary steps, and binary steps with a per-channel constant, a scalar or a graph input of the output's shape."""
    c, h = draw(st.sampled_from([4, 8, 16])), draw(st.integers(3, 9))
    blocked = draw(st.booleans())
    kind = draw(st.sampled_from(["MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"]))
    nodes, inits = [], {}
    src = "x"
    if blocked:
        inits["w"] = rand((c, c, 1, 1), 7)
        nodes.append(node("Conv", ["x", "w"], ["c0"], kernel_shape=[1, 1]))
        src = "c0"
    if kind.startswith("Global"):
        nodes.append(node(kind, [src], ["p"]))
        oh = 1
    else:
        k = draw(st.integers(1, min(3, h)))
        stride, pad = draw(st.integers(1, 2)), draw(st.integers(0, k - 1))
        extra = {"count_include_pad": draw(st.integers(0, 1))} if kind == "AveragePool" else {}
        nodes.append(node(kind, [src], ["p"], kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4,
                          **extra))
        oh = (h + 2 * pad - k) // stride + 1
    inputs = {"x": (1, c, h, h), "r": (1, c, oh, oh)}
    cur = "p"
    for k in range(draw(st.integers(1, 4))):
        out = f"e{k}"
        if draw(st.booleans()):
            nodes.append(node(draw(st.sampled_from(UNARY)), [cur], [out]))
        else:
            operand = draw(st.sampled_from(["per_channel", "scalar", "r"]))
            if operand != "r":
                inits[f"{out}_k"] = rand((1, c, 1, 1) if operand == "per_channel" else (), k + 10, 0.5, 1.5)
                operand = f"{out}_k"
            pair = [cur, operand] if draw(st.booleans()) else [operand, cur]
            nodes.append(node(draw(st.sampled_from(["Add", "Sub", "Mul"])), pair, [out]))
        cur = out
    nodes.append(node("Identity", ["r"], ["r_out"]))  # r is always an input of the model
    feeds = {"x": rand(inputs["x"], 1, -2, 2), "r": rand(inputs["r"], 2)}
    return model(nodes, inputs, [cur, "r_out"], inits), feeds, blocked


@settings(max_examples=30, deadline=None)
@given(pooled_chains())
def test_a_pooling_and_the_chain_after_it_are_one_kernel_equal_to_onnxruntime(case):
    m, feeds, blocked = case
    expected = ort_run(m, feeds)[0]
    g = optimized_graph(m, HOST)
    (pool,) = [n for n in g.nodes if isinstance(n.op, Pool)]
    assert pool.op.epilogue and not any(isinstance(n.op, Elementwise) for n in g.nodes)
    if blocked and HOST.lanes("float32") > 1:
        assert g.values[pool.inputs[0]].layout.blocked
    assert_close(interpret(g, feeds)[m.graph.output[0].name], expected)
    assert_close(nw.compile(m).run(feeds)[m.graph.output[0].name], expected)


def test_a_pooling_read_twice_by_one_chain_takes_the_chain():
    """``relu(p) + sigmoid(p)``: two readers of the pooling, one fused chain (``fuse_injective``), then its epilogue
    as one step; a pooling also read by a graph output keeps its readers apart."""
    m = model([node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]), node("Relu", ["p"], ["a"]),
               node("Sigmoid", ["p"], ["b"]), node("Add", ["a", "b"], ["y"])], {"x": (1, 8, 6, 6)}, ["y"])
    g = optimized_graph(m, HOST)
    (pool,) = [n for n in g.nodes if isinstance(n.op, Pool)]
    assert [str(s) for s in pool.op.epilogue] == ["Chain[s0 = Relu(x0); s1 = Sigmoid(x0); s2 = Add(s0, s1)]"]
    assert len(g.nodes) == 1
    x = rand((1, 8, 6, 6), 3)
    assert_close(nw.compile(m)(x), ort_run(m, {"x": x})[0])
    m.graph.output.append(_output("p"))
    g = optimized_graph(m, HOST)
    (pool,) = [n for n in g.nodes if isinstance(n.op, Pool)]
    assert pool.op.epilogue == ()
    got = nw.compile(m).run({"x": x})
    for name, want in zip(("y", "p"), ort_run(m, {"x": x})):
        assert_close(got[name], want, name)


def _output(name: str):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)


def test_a_blocked_pooling_with_its_epilogue_equals_the_reference_on_neon():
    """ARM NEON code (cross-compiled, run under qemu on other machines) of an average pooling of NCHW[x]c data
    (a convolution's output) with a per-channel scale and a ReLU fused after it."""
    import tensortune as tt
    from neon_tools import MISSING, NEON

    if MISSING:
        pytest.skip(f"running aarch64 kernels here needs {', '.join(MISSING)}")
    c = 2 * NEON.lanes("float32")
    m = model([node("Conv", ["x", "w"], ["c0"], kernel_shape=[1, 1]),
               node("AveragePool", ["c0"], ["p"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
               node("Mul", ["p", "k"], ["q"]), node("Relu", ["q"], ["y"])], {"x": (1, c, 5, 5)}, ["y"],
              {"w": rand((c, c, 1, 1), 3), "k": rand((1, c, 1, 1), 4)})
    g = optimized_graph(m, NEON)
    (pool,) = [n for n in g.nodes if isinstance(n.op, Pool)]
    layout = g.values[pool.inputs[0]].layout
    assert layout.blocked and [type(s.op).__name__ for s in pool.op.epilogue] == ["Mul", "Relu"]
    kd = pool.op.kernel(g, pool, NEON)
    data = rand((1, c, 5, 5), 5, -2, 2)
    b = layout.block
    arrays = [np.ascontiguousarray(data.reshape(1, c // b, b, 5, 5).transpose(0, 1, 3, 4, 2))
              if arg.value is not None else arg.const for arg in kd.args[:-1]]
    out = np.zeros(kd.tensors[-1].shape, "float32")
    tt.build(kd.schedule, list(kd.tensors), target=NEON)(*arrays, out)
    expected = pool.op.reference(data, *(g.constants[i] for i in pool.inputs[1:]))
    assert_close(out.transpose(0, 1, 4, 2, 3).reshape(expected.shape), expected)

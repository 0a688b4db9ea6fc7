"""Graph passes: each is pure and keeps the interpreter's results; each does its rewrite on a small graph."""
from __future__ import annotations

import numpy as np
import pytest

from onnx_cases import CASES
from onnx_models import assert_close, rand
from tensortune.graph import PLAIN, GraphBuilder, Layout, TensorType, Value, interpret
from tensortune.frontend import import_onnx
from tensortune.operators import (Add, BatchNorm, Conv, Dense, Div, EpilogueStep, Gather, Identity, MatMul, Mul, Pool,
                                  PoolKind, Relayout, Relu, Reshape, Sigmoid, Tanh)
from tensortune.passes import (eliminate_dead_nodes, fold_batchnorm, fold_constants, fuse_epilogues, fuse_injective,
                               graph_passes, matmul_to_dense, optimize, plan_layout, remove_identities, sink_reshapes)
from tensortune.network import zoo
from tensortune.target import Target

LANES = 8
AVX2 = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")  # LANES floats per vector

ZOO = [(name, fn) for name, fn in zoo.MODELS.items()]


def _graphs():
    for c in CASES:
        yield pytest.param(c.build, id=c.id)
    for name, fn in ZOO:
        yield pytest.param(lambda fn=fn: (fn(image=32), {"input": rand((1, 3, 32, 32), 1)}), id=f"zoo-{name}")


@pytest.mark.slow
@pytest.mark.parametrize("build", _graphs())
def test_every_pass_keeps_results(build):
    m, feeds = build()
    g = import_onnx(m)
    expected = interpret(g, feeds)
    seen = []

    def check(name, after):
        seen.append(name)
        got = interpret(after, feeds)
        assert list(got) == list(expected)
        for k in expected:
            assert_close(got[k], expected[k], f"{k} after {name}")

    before = str(g)
    optimize(g, AVX2, trace=check)
    assert seen == [name for name, _ in graph_passes(AVX2)]
    assert str(g) == before  # passes never change their input


def _conv_graph(epilogue_nodes: bool = True):
    """x -> Conv(w) -> BatchNorm -> Add(per-channel const) -> Relu -> Add(residual x) -> out."""
    b = GraphBuilder("g")
    b.inputs = ["x"]
    b.values["x"] = Value("x", TensorType((1, 8, 6, 6)))
    w = b.add_constant("w", rand((8, 8, 3, 3), 2))
    stats = [b.add_constant(n, rand((8,), k, 0.5, 1.5)) for k, n in enumerate(("g", "bt", "m", "v"))]
    (c,) = b.add(Conv(pads=(1, 1, 1, 1)), ["x", w], "conv")
    (y,) = b.add(BatchNorm(), [c] + stats, "bn")
    if epilogue_nodes:
        (y,) = b.add(Add(), [y, b.add_constant("k", rand((1, 8, 1, 1), 7))], "add_const")
        (y,) = b.add(Relu(), [y], "relu")
        (y,) = b.add(Add(), ["x", y], "residual")
    b.outputs = [y]
    return b.build()


def _same(g1, g2, feeds):
    for k, v in interpret(g1, feeds).items():
        assert_close(interpret(g2, feeds)[k], v, k)


def test_fold_batchnorm_into_conv():
    g = _conv_graph(epilogue_nodes=False)
    out = fold_batchnorm(g)
    assert [n.op.kind for n in out.nodes] == ["Conv"]
    assert out.nodes[0].op.has_bias and out.nodes[0].outputs == g.nodes[1].outputs
    _same(g, out, {"x": rand((1, 8, 6, 6), 1)})


def test_batchnorm_without_conv_becomes_scale_and_shift():
    b = GraphBuilder("g")
    b.inputs = ["x"]
    b.values["x"] = Value("x", TensorType((2, 4, 3, 3)))
    stats = [b.add_constant(n, rand((4,), k, 0.5, 1.5)) for k, n in enumerate(("g", "bt", "m", "v"))]
    (y,) = b.add(BatchNorm(1e-3), ["x"] + stats, "bn")
    b.outputs = [y]
    g = b.build()
    out = fold_batchnorm(g)
    assert [str(n.op) for n in out.nodes] == ["Mul", "Add"]
    _same(g, out, {"x": rand((2, 4, 3, 3), 1)})


def test_fuse_epilogues_folds_bias_then_fuses_activation_and_residual():
    g = fold_batchnorm(_conv_graph())
    out = fuse_epilogues(g)
    assert len(out.nodes) == 1
    (conv,) = out.nodes
    relu, residual = EpilogueStep(Relu()), EpilogueStep(Add(), operand_left=True)
    assert conv.op.epilogue == (relu, residual)
    assert conv.inputs[0] == "x" and conv.inputs[-1] == "x" and len(conv.inputs) == 4
    assert "epilogue=(Relu, Add(operand, x))" in str(out)
    _same(g, out, {"x": rand((1, 8, 6, 6), 1)})


def test_fuse_epilogues_stops_at_a_shared_value():
    b = GraphBuilder("g")
    b.inputs = ["x"]
    b.values["x"] = Value("x", TensorType((1, 8, 4, 4)))
    (c,) = b.add(Conv(), ["x", b.add_constant("w", rand((8, 8, 1, 1)))], "conv")
    (r,) = b.add(Relu(), [c], "relu")
    (s,) = b.add(Sigmoid(), [r], "sig")
    (t,) = b.add(Tanh(), [r], "tanh")
    b.outputs = [s, t]
    out = fuse_epilogues(b.build())
    assert [str(n.op) for n in out.nodes] == ["Conv[epilogue=(Relu)]", "Sigmoid", "Tanh"]


def test_residual_computed_after_the_conv_is_defined_before_the_fused_node():
    b = GraphBuilder("g")
    b.inputs = ["x"]
    b.values["x"] = Value("x", TensorType((1, 8, 4, 4)))
    (c1,) = b.add(Conv(), ["x", b.add_constant("w1", rand((8, 8, 1, 1), 1))], "main")
    (c2,) = b.add(Conv(), ["x", b.add_constant("w2", rand((8, 8, 1, 1), 2))], "shortcut")
    (y,) = b.add(Add(), [c1, c2], "add")
    b.outputs = [y]
    g = b.build()
    out = fuse_epilogues(g)
    assert [n.name for n in out.nodes] == ["shortcut", "main"]
    assert out.nodes[1].inputs[-1] == c2
    _same(g, out, {"x": rand((1, 8, 4, 4), 3)})


def test_matmul_to_dense_and_epilogue():
    b = GraphBuilder("g")
    b.inputs = ["x"]
    b.values["x"] = Value("x", TensorType((3, 5)))
    (y,) = b.add(MatMul(), ["x", b.add_constant("w", rand((5, 4), 1))], "mm")
    (y,) = b.add(Add(), [y, b.add_constant("c", rand((4,), 2))], "bias")
    (y,) = b.add(Mul(), [y, b.add_constant("s", np.float32(0.5))], "scale")
    b.outputs = [y]
    g = b.build()
    out = fuse_epilogues(matmul_to_dense(g))
    (dense,) = out.nodes
    assert dense.op == Dense(has_bias=True, epilogue=(EpilogueStep(Mul()),))
    assert out.constants[dense.inputs[1]].shape == (4, 5)
    _same(g, out, {"x": rand((3, 5), 4)})


def _transformer_ffn(bias_first: bool = True, tokens: int = 6):
    """A transformer's feed-forward block as exporters write it: ``[1, tokens, 8]`` activations by a constant
    ``[8, 12]``, the bias added (on the left, as PyTorch's exporter writes it, or on the right), exact GELU (its
    input read twice), by a constant ``[12, 8]`` with its bias, and the block's input added back."""
    from tensortune.operators.unary_math import Erf

    b = GraphBuilder("g")
    b.inputs = ["x"]
    b.values["x"] = Value("x", TensorType((1, tokens, 8)))

    def linear(y: str, k: int, n: int, name: str) -> str:
        (y,) = b.add(MatMul(), [y, b.add_constant(f"{name}_w", rand((k, n), n))], name)
        bias = b.add_constant(f"{name}_b", rand((n,), n + 1))
        (y,) = b.add(Add(), [bias, y] if bias_first else [y, bias], f"{name}_bias")
        return y

    y = linear("x", 8, 12, "up")
    (e,) = b.add(Div(), [y, b.add_constant("sqrt2", np.float32(np.sqrt(2)))], "div")
    (e,) = b.add(Erf(), [e], "erf")
    (e,) = b.add(Add(), [e, b.add_constant("one", np.float32(1))], "plus1")
    (y,) = b.add(Mul(), [y, e], "gelu")
    (y,) = b.add(Mul(), [y, b.add_constant("half", np.float32(0.5))], "half")
    y = linear(y, 12, 8, "down")
    (y,) = b.add(Add(), [y, "x"], "residual")
    (y,) = b.add(Tanh(), [y], "act")  # the graph's output, read as a [1, tokens, 8] tensor again
    b.outputs = [y]
    return b.build()


@pytest.mark.parametrize("bias_first", [True, False])
def test_sink_reshapes_lets_bias_gelu_and_residual_join_dense_layers(bias_first):
    """``matmul_to_dense`` puts a Reshape between a Dense of 3-D activations and what reads it; sunk below the
    elementwise nodes, the biases (added on either side), the GELU and the residual all join the Dense layers'
    epilogues."""
    g = _transformer_ffn(bias_first)
    out = fuse_epilogues(fuse_injective(fuse_epilogues(sink_reshapes(matmul_to_dense(g)))))
    out = eliminate_dead_nodes(out)
    assert [n.op.kind for n in out.nodes if n.op.kind != "Reshape"] == ["Dense", "Dense", "Tanh"]
    up, down = [n for n in out.nodes if n.op.kind == "Dense"]
    assert out.values[up.outputs[0]].shape == (6, 12) and len(up.op.epilogue) == 1  # the GELU chain
    assert down.op.has_bias and down.op.epilogue == (EpilogueStep(Add()),)  # the residual
    feeds = {"x": rand((1, 6, 8), 4)}
    _same(g, out, feeds)
    _same(g, optimize(g, AVX2), feeds)


def test_sink_reshapes_leaves_what_would_broadcast_otherwise():
    """A constant varying along an axis the reshape changes, or a run-time operand broadcast onto the reshaped
    shape, keeps the elementwise node after the Reshape."""
    b = GraphBuilder("g")
    b.inputs = ["x", "r"]
    b.values["x"] = Value("x", TensorType((6, 8)))
    b.values["r"] = Value("r", TensorType((1, 1, 8)))
    (y,) = b.add(Reshape((2, 3, 8)), ["x"], "split")
    (y,) = b.add(Add(), [y, b.add_constant("rows", rand((3, 1), 1))], "per_row")  # axis 1 of (2, 3, 8): not x's
    (z,) = b.add(Reshape((2, 3, 8)), ["x"], "split2")
    (z,) = b.add(Mul(), [z, "r"], "bcast")
    (z,) = b.add(Add(), [y, z], "sum")
    b.outputs = [z]
    g = b.build()
    out = sink_reshapes(g)
    assert [n.op.kind for n in out.nodes] == [n.op.kind for n in g.nodes]
    _same(g, out, {"x": rand((6, 8), 2), "r": rand((1, 1, 8), 3)})


def test_fold_constants_identities_and_dead_nodes():
    b = GraphBuilder("g")
    b.inputs = ["x"]
    b.values["x"] = Value("x", TensorType((2, 6)))
    table = b.add_constant("table", np.arange(12, dtype=np.float32).reshape(4, 3))
    (row,) = b.add(Gather(0), [table, b.add_constant("i", np.array([1, 2], np.int64))], "gather")
    (flat,) = b.add(Reshape((6,)), [row], "flat")
    (same,) = b.add(Identity(), ["x"], "id")
    (y,) = b.add(Add(), [same, flat], "add")
    b.add(Tanh(), [y], "unused")
    b.outputs = [y]
    g = b.build()
    folded = fold_constants(g)
    assert [n.op.kind for n in folded.nodes] == ["Identity", "Add", "Tanh"]
    assert folded.constants[flat].tolist() == [3, 4, 5, 6, 7, 8]
    simple = eliminate_dead_nodes(remove_identities(folded))
    assert [str(n.op) for n in simple.nodes] == ["Add"] and simple.nodes[0].inputs == ("x", flat)
    assert set(simple.constants) == {flat}
    _same(g, simple, {"x": rand((2, 6), 1)})


def test_plan_layout_blocks_between_convolutions_only():
    b = GraphBuilder("g")
    b.inputs = ["x"]
    b.values["x"] = Value("x", TensorType((1, 3, 8, 8)))
    (c1,) = b.add(Conv(pads=(1, 1, 1, 1)), ["x", b.add_constant("w1", rand((16, 3, 3, 3)))], "c1")
    (p,) = b.add(Pool(PoolKind.MAX, (2, 2), (2, 2)), [c1], "pool")
    (c2,) = b.add(Conv(), [p, b.add_constant("w2", rand((16, 16, 1, 1)))], "c2")
    (s,) = b.add(Add(), [c2, p], "add")
    (f,) = b.add(Reshape((1, 256)), [s], "flatten")
    b.outputs = [f, s]
    g = b.build()
    out = plan_layout(g, AVX2)
    kinds = [(n.op.kind, str(out.values[n.outputs[0]].layout)) for n in out.nodes]
    assert kinds == [("Relayout", "NCHW3c"), ("Conv", "NCHW8c"), ("Pool", "NCHW8c"), ("Conv", "NCHW8c"),
                     ("Add", "NCHW8c"), ("Relayout", ""), ("Reshape", "")]
    assert out.values[s].layout == PLAIN  # a graph output is plain: its blocked version is relayouted once
    assert sum(isinstance(n.op, Relayout) for n in out.nodes) == 2
    _same(g, out, {"x": rand((1, 3, 8, 8), 1)})


def test_blocked_layout_needs_divisible_channels():
    with pytest.raises(Exception, match="blocks of 8"):
        Value("v", TensorType((1, 12, 4, 4)), Layout(8))


def test_a_grouped_convolution_reads_blocks_its_merged_groups_hold_whole(monkeypatch):
    """Groups of 8 channels run in 16-channel blocks as groups of two merged (``conv_kernels.merged_groups``): a
    grouped convolution reads a 16-channel output as it is, and ``choose_blocks`` may give it 16-channel blocks;
    results unchanged."""
    from tensortune.network import layouts

    b = GraphBuilder("g")
    b.inputs = ["x"]
    b.values["x"] = Value("x", TensorType((1, 3, 8, 8)))
    (c1,) = b.add(Conv(pads=(1, 1, 1, 1)), ["x", b.add_constant("w1", rand((32, 3, 3, 3)))], "c1")
    (c2,) = b.add(Conv(pads=(1, 1, 1, 1), groups=4), [c1, b.add_constant("w2", rand((32, 8, 3, 3), 2))], "c2")
    (c3,) = b.add(Conv(), [c2, b.add_constant("w3", rand((16, 32, 1, 1), 3))], "c3")
    b.outputs = [c3]
    g = b.build()
    out = plan_layout(g, AVX2, {"c1": 2 * LANES})
    seen = {n.name: (str(out.values[n.inputs[0]].layout), str(out.values[n.outputs[0]].layout)) for n in out.nodes}
    assert seen["c1"][1] == f"NCHW{2 * LANES}c"
    assert seen["c2"][0] == f"NCHW{2 * LANES}c"  # c1's output as it is
    assert sum(isinstance(n.op, Relayout) for n in out.nodes) == 2  # x blocked, the output plain
    _same(g, out, {"x": rand((1, 3, 8, 8), 1)})

    # a log whose grouped layer would be 10x faster writing 16-channel blocks: a block its merged groups can run
    wide = 2 * LANES
    times = {(LANES, wide): 1e-3, (LANES, LANES): 1e-2, (wide, LANES): 1e-2, (wide, wide): 1e-2}
    monkeypatch.setattr(layouts, "layer_times", lambda *args: {"c2": times})
    assert layouts.choose_blocks(g, AVX2, []) == {"c2": wide}

"""Chains of elementwise and injective nodes fused into one kernel (``passes.fuse_injective``): any chain equals
onnxruntime, and nodes stay apart where fusing would compute a value twice, lose a graph output or change a layout
rule."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.frontend import import_onnx
from tensortune.graph import interpret
from tensortune.network import optimized_graph
from tensortune.operators import Fused
from tensortune.passes import eliminate_dead_nodes, fuse_injective
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
    steps = sum(len(n.op.steps) if isinstance(n.op, Fused) else 1 for n in g.nodes)
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
    g = fuse_injective(import_onnx(m))
    outputs = {o for n in g.nodes for o in n.outputs}
    assert {"s", "t", "p"} <= outputs and "a" not in outputs and "u" not in outputs
    feeds = {"x": rand((4, 6), 1), "row": rand((1, 6), 2)}
    for got, want in zip(nw.compile(m).run(feeds).values(), ort_run(m, feeds)):
        assert_close(got, want)


def test_a_fused_node_prints_its_steps_and_keeps_the_blocked_layout():
    # c is read by the chain and by a residual Add: the chain stays a node of its own (not c's epilogue)
    m = model([node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]), node("Relu", ["c"], ["r"]),
               node("Sigmoid", ["c"], ["s"]), node("Mul", ["r", "s"], ["y"]), node("Conv", ["y", "w"], ["z0"],
                                                                              kernel_shape=[1, 1]),
               node("Add", ["z0", "c"], ["z"])],
              {"x": (1, 16, 5, 5)}, ["z"], {"w": rand((16, 16, 1, 1), 3)})
    target = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
    g = optimized_graph(m, target)
    (f,) = [n for n in g.nodes if isinstance(n.op, Fused)]
    assert str(f.op) == "Fused[s0 = Relu(x0); s1 = Sigmoid(x0); s2 = Mul(s0, s1)]"
    assert g.values[f.inputs[0]].layout.blocked and g.values[f.outputs[0]].layout.blocked
    x = rand((1, 16, 5, 5), 4)
    assert_close(nw.compile(m, target)(x), ort_run(m, {"x": x})[0])
    assert np.isfinite(nw.compile(m, target)(x)).all()


# ------------------------------------------------------------------------------------------- injective operators

def _slice(draw, name, out, shape, inits):
    """A Slice node of ``name`` along one random axis (steps 1, 2 or -1), its new shape."""
    axis = draw(st.integers(0, len(shape) - 1))
    n, step = shape[axis], draw(st.sampled_from([1, 2, -1]))
    start = draw(st.integers(0, n - 1))
    if step > 0:
        end = draw(st.integers(start + 1, n))
        size = len(range(start, end, step))
    else:
        end = draw(st.integers(-1, start - 1))
        size = len(range(start, end, step))
        end = -n - 1 if end == -1 else end  # ONNX reads a negative end from the back: this one means "past the front"
    for key, v in (("s", start), ("e", end), ("a", axis), ("t", step)):
        inits[f"{out}_{key}"] = np.array([v], np.int64)
    new = list(shape)
    new[axis] = size
    return node("Slice", [name] + [f"{out}_{k}" for k in "seat"], [out]), tuple(new)


@st.composite
def injective_chains(draw):
    """A random DAG of elementwise, Transpose, Slice, Pad (constant, edge, reflect) and Concat nodes over two
    inputs of one random shape."""
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    values = {"x0": shape, "x1": shape}
    inputs = dict(values)
    nodes, inits = [], {}
    for k in range(draw(st.integers(2, 6))):
        out = f"v{k}"
        name = draw(st.sampled_from(sorted(values)))
        s = values[name]
        kind = draw(st.sampled_from(["unary", "binary", "transpose", "slice", "pad", "concat"]))
        if kind == "unary":
            nodes.append(node(draw(st.sampled_from(UNARY)), [name], [out]))
        elif kind == "binary":
            other = draw(st.sampled_from(sorted(v for v, sh in values.items() if sh == s)))
            nodes.append(node(draw(st.sampled_from(["Add", "Sub", "Mul"])), [name, other], [out]))
        elif kind == "transpose":
            perm = draw(st.permutations(range(len(s))))
            nodes.append(node("Transpose", [name], [out], perm=list(perm)))
            s = tuple(s[p] for p in perm)
        elif kind == "slice":
            n, s = _slice(draw, name, out, s, inits)
            nodes.append(n)
        elif kind == "pad":
            mode = draw(st.sampled_from(["constant", "edge", "reflect"]))
            pads = [draw(st.integers(0, 2 if mode != "reflect" else d - 1)) for d in s + s]
            inits[f"{out}_p"] = np.array(pads, np.int64)
            nodes.append(node("Pad", [name, f"{out}_p"], [out], mode=mode))
            s = tuple(d + a + b for d, a, b in zip(s, pads[:len(s)], pads[len(s):]))
        else:
            axis = draw(st.integers(0, len(s) - 1))
            fits = sorted(v for v, sh in values.items() if len(sh) == len(s) and v != name
                          and all(a == b for d, (a, b) in enumerate(zip(sh, s)) if d != axis))
            other = draw(st.sampled_from(fits)) if fits else name
            nodes.append(node("Concat", [name, other], [out], axis=axis))
            s = tuple(d + values[other][axis] if i == axis else d for i, d in enumerate(s))
        values[out] = s
    feeds = {v: rand(shape, k, -2, 2) for k, v in enumerate(inputs)}
    return model(nodes, inputs, [f"v{k}"], inits, opset=14), feeds


def _steps(g) -> int:
    return sum(len(n.op.steps) if isinstance(n.op, Fused) else 1 for n in g.nodes)


@settings(max_examples=40, deadline=None)
@given(injective_chains())
def test_any_chain_of_elementwise_and_injective_nodes_equals_onnxruntime(case):
    m, feeds = case
    expected = ort_run(m, feeds)[0]
    g = optimized_graph(m, HOST)
    imported = eliminate_dead_nodes(import_onnx(m))
    assert _steps(g) == len(imported.nodes) and len(g.nodes) <= len(imported.nodes)
    for n in g.nodes:  # each step of a fused node but the last feeds exactly one later step
        if isinstance(n.op, Fused):
            reads = [a for _, args in n.op.steps for a in dict.fromkeys(args) if a < 0]
            assert sorted(reads) == list(range(-len(n.op.steps) + 1, 0))
    assert_close(interpret(g, feeds)[m.graph.output[0].name], expected)
    assert_close(nw.compile(m).run(feeds)[m.graph.output[0].name], expected)


def _bias_transpose_slice():
    """``(x + b)`` transposed, then every other row of it: three nodes, one pass."""
    inits = {"b": rand((5,), 3), "s": np.array([0], np.int64), "e": np.array([4], np.int64),
             "a": np.array([2], np.int64), "t": np.array([2], np.int64)}
    return model([node("Add", ["x", "b"], ["a0"]), node("Transpose", ["a0"], ["t0"], perm=[0, 2, 1, 3]),
                  node("Slice", ["t0", "s", "e", "a", "t"], ["y"])], {"x": (2, 3, 4, 5)}, ["y"], inits)


def test_a_bias_a_transpose_and_a_slice_are_one_kernel():
    m = _bias_transpose_slice()
    module = nw.compile(m)
    assert [k.kind for k in module.manifest.kernels] == ["add_transpose_slice"]
    x = rand((2, 3, 4, 5), 1)
    assert_close(module(x), ort_run(m, {"x": x})[0])


def test_the_fused_kernel_equals_onnxruntime_on_neon():
    """ARM NEON code (cross-compiled, run under qemu on other machines) of the fused transpose."""
    import tensortune as tt
    from neon_tools import MISSING, NEON

    if MISSING:
        pytest.skip(f"running aarch64 kernels here needs {', '.join(MISSING)}")
    m = _bias_transpose_slice()
    g = optimized_graph(m, NEON)
    (n,) = g.nodes
    kd = n.op.kernel(g, n, NEON)
    x = rand((2, 3, 4, 5), 2)
    arrays = [x if arg.value is not None else arg.const for arg in kd.args[:-1]]
    out = np.zeros(kd.tensors[-1].shape, "float32")
    tt.build(kd.schedule, list(kd.tensors), target=NEON)(*arrays, out)
    assert_close(out, ort_run(m, {"x": x})[0])


def test_an_edge_pad_a_channel_concat_and_a_reshape_keep_their_producers():
    """An edge pad reads border elements again, a channel concatenation of images keeps its blocked layout and a
    reshape moves nothing: their producers stay kernels of their own; a constant pad and a concatenation along
    another axis absorb theirs."""
    pads = {"p2": np.array([0, 1, 0, 2], np.int64)}
    m = model([node("Relu", ["x"], ["r"]), node("Pad", ["r", "p2"], ["y1"], mode="edge"),
               node("Sigmoid", ["x"], ["s"]), node("Pad", ["s", "p2"], ["y2"]),
               node("Tanh", ["img"], ["t"]), node("Concat", ["t", "img"], ["y3"], axis=1),
               node("Tanh", ["img"], ["u"]), node("Concat", ["u", "img"], ["y4"], axis=3),
               node("Relu", ["x"], ["n"]), node("Reshape", ["n", "shape"], ["y5"])],
              {"x": (3, 4), "img": (1, 8, 3, 3)}, ["y1", "y2", "y3", "y4", "y5"],
              {**pads, "shape": np.array([4, 3], np.int64)})
    g = optimized_graph(m, HOST)
    fused = sorted(str(n.op) for n in g.nodes if isinstance(n.op, Fused))
    assert fused == ["Fused[s0 = Sigmoid(x0); s1 = Pad[pads=(0, 1, 0, 2)](s0)]",
                     "Fused[s0 = Tanh(x0); s1 = Concat[axis=3](s0, x0)]"]
    feeds = {"x": rand((3, 4), 1), "img": rand((1, 8, 3, 3), 2)}
    for got, want in zip(nw.compile(m).run(feeds).values(), ort_run(m, feeds)):
        assert_close(got, want)


def test_a_gated_linear_unit_is_one_parallel_kernel():
    """The two halves of [1, 128, 384], one through a sigmoid, multiplied: one kernel over the output, its 128 rows
    shared among threads (the leading axis of one element is not the one run in parallel)."""
    inits = {"s0": np.array([0], np.int64), "e0": np.array([192], np.int64), "s1": np.array([192], np.int64),
             "e1": np.array([384], np.int64), "ax": np.array([2], np.int64)}
    m = model([node("Slice", ["h", "s0", "e0", "ax"], ["a"]), node("Slice", ["h", "s1", "e1", "ax"], ["b"]),
               node("Sigmoid", ["b"], ["g"]), node("Mul", ["a", "g"], ["y"])], {"h": (1, 128, 384)}, ["y"], inits)
    module = nw.compile(m)
    assert [k.kind for k in module.manifest.kernels] == ["slice_slice_sigmoid_mul"]
    assert "omp parallel for" in module.source
    h = rand((1, 128, 384), 6, -3, 3)
    assert_close(module(h), ort_run(m, {"h": h})[0])

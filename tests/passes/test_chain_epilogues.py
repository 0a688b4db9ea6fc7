"""Elementwise chains that read a convolution's output twice (SiLU ``x * sigmoid(x)``, GELU ``x * (1 + erf(x /
sqrt 2)) / 2``, Mish, and random ones) join its epilogue once ``fuse_injective`` has made them one node: one kernel,
equal to onnxruntime."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.network import optimized_graph
from tensortune.operators import Conv, Fused
from tensortune.operators.fused import ElementwiseChain
from tensortune.target import Target

HOST = Target.host()
SCALARS = {"half": 0.5, "one": 1.0, "sqrt2": float(np.sqrt(2)), "three": 3.0}


def conv_then(chain: list, shape=(1, 8, 6, 5), out: str = "y"):
    nodes = [node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])] + chain
    inits = {"w": rand((8, shape[1], 3, 3), 1), "b": rand((8,), 2)}
    inits |= {k: np.array(v, np.float32) for k, v in SCALARS.items()}
    return model(nodes, {"x": shape}, [out], inits)


SILU = [node("Sigmoid", ["c"], ["s"]), node("Mul", ["c", "s"], ["y"])]
GELU = [node("Div", ["c", "sqrt2"], ["d"]), node("Erf", ["d"], ["e"]), node("Add", ["e", "one"], ["e1"]),
        node("Mul", ["c", "e1"], ["m"]), node("Mul", ["m", "half"], ["y"])]
MISH = [node("Softplus", ["c"], ["sp"]), node("Tanh", ["sp"], ["t"]), node("Mul", ["c", "t"], ["y"])]


def check_joined(m, steps: int):
    g = optimized_graph(m, HOST)
    convs = [n for n in g.nodes if isinstance(n.op, Conv)]
    assert len(convs) == 1 and not any(isinstance(n.op, Fused) for n in g.nodes), str(g)
    (chain,) = [s.op for s in convs[0].op.epilogue if isinstance(s.op, ElementwiseChain)]
    assert len(chain.steps) == steps
    feeds = {"x": rand(tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim), 3)}
    assert_close(nw.compile(m).run(feeds)["y"], ort_run(m, feeds)[0])


def test_silu_gelu_and_mish_join_the_convolution():
    check_joined(conv_then(SILU), 2)
    check_joined(conv_then(GELU), 5)
    check_joined(conv_then(MISH, shape=(1, 5, 7, 7)), 3)


def test_a_chain_reading_another_tensor_stays_a_kernel_of_its_own():
    """``c * sigmoid(c) + x``'s second operand is a tensor, not a scalar: the chain is not an epilogue step."""
    chain = [node("Sigmoid", ["c"], ["s"]), node("Mul", ["c", "s"], ["m"]), node("Add", ["m", "other"], ["y"])]
    nodes = [node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])] + chain
    m = model(nodes, {"x": (1, 8, 6, 5), "other": (1, 8, 6, 5)}, ["y"], {"w": rand((8, 8, 3, 3), 1)})
    g = optimized_graph(m, HOST)
    assert any(isinstance(n.op, Fused) for n in g.nodes)
    feeds = {"x": rand((1, 8, 6, 5), 3), "other": rand((1, 8, 6, 5), 4)}
    assert_close(nw.compile(m).run(feeds)["y"], ort_run(m, feeds)[0])


@settings(max_examples=8, deadline=None)
@given(ops=st.lists(st.sampled_from(["Sigmoid", "Tanh", "Relu", "Mul", "Add", "Sub", "Div3", "Abs"]), min_size=1,
                    max_size=5))
def test_a_random_chain_over_the_output_and_scalars_joins_and_is_exact(ops):
    """Each binary step reads the convolution's output again, so every chain reads it at least twice."""
    chain, prev = [], "c"
    for k, op in enumerate(ops):
        out = f"t{k}"
        if op == "Div3":
            chain.append(node("Div", [prev, "three"], [out]))
        elif op in ("Mul", "Add", "Sub"):
            chain.append(node(op, ["c", prev] if k % 2 else [prev, "c"], [out]))
        else:
            chain.append(node(op, [prev], [out]))
        prev = out
    chain.append(node("Mul", [prev, "c"], ["y"]))
    check_joined(conv_then(chain), len(chain))

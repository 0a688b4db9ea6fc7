"""A transformer encoder layer as exporters write it (``onnx.helper``, opset 17): Q, K and V projections with their
biases added on the left, the heads' Reshape and Transpose, ``Q @ K^T`` scaled, an additive mask (padding or
causal), Softmax, ``@ V``, the heads merged, the output projection with the residual, LayerNormalization, then the
feed-forward block with exact (Erf) or tanh GELU and its residual and LayerNorm. Over random token counts (primes
among them), heads, head sizes and masks it equals onnxruntime, and its dense layers absorb their bias, GELU and
residual."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st
from onnx import helper

import tensortune.network as nw
from onnx_models import model, node, ort_run, rand

RELATIVE = 1e-4  # of the largest output magnitude (LayerNorm's outputs are about 1)


def encoder_layer(tokens: int, heads: int, head: int, ffn: int, mask: str, gelu: str, seed: int = 0):
    """``(model, feeds)`` of one post-LayerNorm encoder layer over ``x [1, tokens, heads * head]``."""
    hidden = heads * head
    inits: dict[str, np.ndarray] = {}
    nodes = []

    def const(name: str, value) -> str:
        inits[name] = np.asarray(value, np.float32) if not isinstance(value, np.ndarray) else value
        return name

    def linear(x: str, k: int, n: int, name: str) -> str:
        nodes.append(node("MatMul", [x, const(f"{name}_w", rand((k, n), seed + len(inits), -0.3, 0.3))],
                          [f"{name}_mm"]))
        nodes.append(node("Add", [const(f"{name}_b", rand((n,), seed + len(inits), -0.1, 0.1)), f"{name}_mm"],
                          [name]))
        return name

    def heads_of(x: str, name: str, perm: list[int]) -> str:
        nodes.append(node("Reshape", [x, const(f"{name}_shape", np.array([1, tokens, heads, head], np.int64))],
                          [f"{name}_split"]))
        nodes.append(node("Transpose", [f"{name}_split"], [name], perm=perm))
        return name

    def layer_norm(x: str, name: str) -> str:
        nodes.append(node("LayerNormalization", [x, const(f"{name}_g", rand((hidden,), seed + 7, 0.5, 1.5)),
                                                 const(f"{name}_beta", rand((hidden,), seed + 8, -0.1, 0.1))],
                          [name], axis=-1, epsilon=1e-5))
        return name

    q = heads_of(linear("x", hidden, hidden, "q"), "qh", [0, 2, 1, 3])
    k = heads_of(linear("x", hidden, hidden, "k"), "kh", [0, 2, 3, 1])
    v = heads_of(linear("x", hidden, hidden, "v"), "vh", [0, 2, 1, 3])
    nodes += [node("MatMul", [q, k], ["scores"]),
              node("Div", ["scores", const("scale", np.float32(np.sqrt(head)))], ["scaled"]),
              node("Add", ["scaled", "mask"], ["masked"]),
              node("Softmax", ["masked"], ["probs"], axis=-1),
              node("MatMul", ["probs", v], ["context"]),
              node("Transpose", ["context"], ["context_t"], perm=[0, 2, 1, 3]),
              node("Reshape", ["context_t", const("merge", np.array([1, tokens, hidden], np.int64))], ["merged"])]
    out = linear("merged", hidden, hidden, "o")
    nodes.append(node("Add", [out, "x"], ["res1"]))
    h = layer_norm("res1", "ln1")
    up = linear(h, hidden, ffn, "up")
    if gelu == "erf":
        nodes += [node("Div", [up, const("sqrt2", np.float32(np.sqrt(2)))], ["g1"]), node("Erf", ["g1"], ["g2"]),
                  node("Add", ["g2", const("one", np.float32(1))], ["g3"]), node("Mul", [up, "g3"], ["g4"]),
                  node("Mul", ["g4", const("half", np.float32(0.5))], ["act"])]
    else:  # GPT-2's: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
        nodes += [node("Pow", [up, const("three", np.float32(3))], ["t1"]),
                  node("Mul", ["t1", const("c", np.float32(0.044715))], ["t2"]), node("Add", [up, "t2"], ["t3"]),
                  node("Mul", ["t3", const("s", np.float32(np.sqrt(2 / np.pi)))], ["t4"]),
                  node("Tanh", ["t4"], ["t5"]), node("Add", ["t5", const("one", np.float32(1))], ["t6"]),
                  node("Mul", [up, "t6"], ["t7"]), node("Mul", ["t7", const("half", np.float32(0.5))], ["act"])]
    down = linear("act", ffn, hidden, "down")
    nodes.append(node("Add", [down, h], ["res2"]))
    layer_norm("res2", "y")
    if mask == "causal":
        m = np.triu(np.full((tokens, tokens), -1e4, np.float32), 1)[None, None]
    else:  # padding: the last quarter of the tokens masked out for every query
        m = np.zeros((1, 1, 1, tokens), np.float32)
        m[..., tokens - tokens // 4:] = -1e4
    mdl = model(nodes, {"x": (1, tokens, hidden), "mask": m.shape}, ["y"], inits, opset=17)
    return mdl, {"x": rand((1, tokens, hidden), seed + 99), "mask": m}


@settings(max_examples=5, deadline=None)
@given(tokens=st.sampled_from([1, 2, 7, 13, 16, 23]), heads=st.integers(1, 4), head=st.sampled_from([4, 8, 13, 16]),
       ffn=st.sampled_from([16, 40]), mask=st.sampled_from(["padding", "causal"]),
       gelu=st.sampled_from(["erf", "tanh"]), seed=st.integers(0, 50))
def test_encoder_layer_equals_onnxruntime(tokens, heads, head, ffn, mask, gelu, seed):
    mdl, feeds = encoder_layer(tokens, heads, head, ffn, mask, gelu, seed)
    want = ort_run(mdl, feeds)[0]
    module = nw.compile(mdl)
    got = module.run(feeds)["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=RELATIVE * float(np.abs(want).max()))
    # the projections and the feed-forward pair are dense kernels (Q, K and V of one shape share one); their
    # biases, the GELU and the residuals joined them, so no elementwise kernel of theirs runs on its own
    kinds = [k.kind for k in module.manifest.kernels]
    assert kinds.count("dense") >= 3, kinds
    assert not any(k in ("add", "erf", "tanh", "pow_scalar") or k.startswith(("add_", "mul_", "pow_")) for k in kinds), \
        kinds

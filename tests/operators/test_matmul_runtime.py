"""Products of matrices as register-tiled GEMMs over the output padded to whole tiles: two run-time tensors
(attention's ``Q @ K^T`` and ``P @ V``, ``matmul.matmul_kernel``) per batch, and dense layers of several rows with
their epilogue (``matmul.dense_gemm_kernel``), equal onnxruntime for any shapes, batch broadcasting and tile
remainders."""
from __future__ import annotations

from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand


def check(sa, sb):
    m = model([node("MatMul", ["a", "b"], ["y"])], {"a": sa, "b": sb}, ["y"])
    feeds = {"a": rand(sa, 1), "b": rand(sb, 2)}
    module = nw.compile(m)
    assert_close(module.run(feeds)["y"], ort_run(m, feeds)[0])
    return module


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 13), n=st.integers(1, 70), k=st.integers(1, 40),
       batch=st.sampled_from([((), ()), ((3,), (3,)), ((2, 1), (4,)), ((1,), (2, 3)), ((2,), ())]))
def test_any_shapes_and_broadcast_batches_equal_onnxruntime(m, n, k, batch):
    """Rows and columns that fill no whole tile, K of one, batches broadcast either way."""
    check((*batch[0], m, k), (*batch[1], k, n))


def test_attention_shapes_accumulate_in_vectors():
    """``[heads, T, d] @ [heads, d, T]`` then ``@ [heads, T, d]``: the accumulation is vector FMAs on a register
    tile (no per-element reduction loop), and B's columns are padded once (``b_pad``)."""
    module = check((6, 50, 64), (6, 64, 50))
    src = module.source
    assert "b_pad" in src and "tt_f32x" in src
    check((6, 50, 50), (6, 50, 64))


@settings(max_examples=10, deadline=None)
@given(m=st.integers(2, 13), n=st.integers(1, 70), k=st.integers(1, 40), residual=st.booleans())
def test_a_dense_layer_of_several_rows_is_a_gemm_with_its_epilogue(m, n, k, residual):
    """MatMul by a constant, bias, ReLU (and a residual add, an operand of the epilogue): one ``dense`` kernel of
    packed weight panels, equal to onnxruntime for tile remainders of rows and columns."""
    nodes = [node("MatMul", ["x", "w"], ["t"]), node("Add", ["t", "b"], ["u"]), node("Relu", ["u"], ["v" if residual
                                                                                                    else "y"])]
    inputs = {"x": (m, k)}
    if residual:
        nodes.append(node("Add", ["v", "r"], ["y"]))
        inputs["r"] = (m, n)
    mdl = model(nodes, inputs, ["y"], {"w": rand((k, n), 1), "b": rand((n,), 2)})
    feeds = {name: rand(shape, 3 + j) for j, (name, shape) in enumerate(inputs.items())}
    module = nw.compile(mdl)
    assert_close(module.run(feeds)["y"], ort_run(mdl, feeds)[0])
    assert [kd.kind for kd in module.manifest.kernels] == ["dense"]

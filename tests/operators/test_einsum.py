"""Einsum in the forms exporters emit (``operators/einsum.py``), imported as the Transpose, Reshape and MatMul that
compute it, interpreted and compiled equal to onnxruntime; the forms a matrix product cannot compute are refused
with the reason."""
from __future__ import annotations

import pytest

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.frontend import import_onnx
from tensortune.graph import UnsupportedModelError, interpret


def einsum(equation, *shapes):
    names = [f"x{k}" for k in range(len(shapes))]
    m = model([node("Einsum", names, ["y"], equation=equation)], dict(zip(names, shapes)), ["y"], opset=12)
    return m, {n: rand(s, k) for k, (n, s) in enumerate(zip(names, shapes))}


@pytest.mark.parametrize("equation, shapes, kinds", [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)], ["MatMul"]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)], ["Transpose", "MatMul"]),  # attention scores
    ("bhqk,bhkd->bhqd", [(1, 2, 3, 5), (1, 2, 5, 4)], ["MatMul"]),  # attention output
    ("bqhd,bkhd->bhqk", [(2, 3, 2, 4), (2, 5, 2, 4)], ["Transpose", "Transpose", "MatMul"]),
    ("ibnd,jbnd->bnij", [(3, 1, 2, 4), (5, 1, 2, 4)], ["Transpose", "Transpose", "MatMul"]),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)], ["Reshape", "MatMul", "Reshape"]),
    ("...ij,...kj->...ik", [(1, 2, 3, 4), (2, 1, 5, 4)], ["Transpose", "MatMul"]),  # batch axes broadcast
    ("ij,jk", [(3, 4), (4, 5)], ["MatMul"]),  # implicit result: the letters used once, in order
    ("i,j->ij", [(3,), (4,)], ["Reshape", "Reshape", "MatMul"]),  # outer product
    ("i,i->", [(3,), (3,)], ["Reshape", "Reshape", "MatMul", "Reshape"]),  # dot product
    ("ij->ji", [(3, 4)], ["Transpose"]),
])
def test_einsum_imports_as_matmul_transpose_and_reshape(equation, shapes, kinds):
    m, feeds = einsum(equation, *shapes)
    g = import_onnx(m)
    assert [n.op.kind for n in g.nodes] == kinds
    expected = ort_run(m, feeds)[0]
    assert_close(interpret(g, feeds)["y"], expected)
    assert_close(nw.compile(m).run(feeds)["y"], expected)


@pytest.mark.parametrize("equation, shapes, reason", [
    ("ii->i", [(3, 3)], "a letter repeated in operand 'ii'"),
    ("ij->i", [(3, 4)], "a sum over axes of one operand"),
    ("ij,jk->k", [(3, 4), (4, 5)], "a sum over an axis of one operand"),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)], "Einsum of 3 operands"),
    ("ij,jk->ik", [(3, 4), (5, 6)], "letter 'j' of equation 'ij,jk->ik' has sizes 4 and 5"),
    ("ijk->kji", [(3, 4)], "does not match its shape"),
])
def test_what_einsum_cannot_take_is_refused_with_the_reason(equation, shapes, reason):
    m, _ = einsum(equation, *shapes)
    with pytest.raises(UnsupportedModelError, match=reason):
        import_onnx(m)

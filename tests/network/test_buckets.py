"""A module for several sizes of a symbolic dimension (``network.buckets``): inputs padded to the smallest size that
holds them, outputs cropped back, equal to onnxruntime run on the unpadded inputs; one copy of the constants in
memory and on disk; the exported folder loads back; what cannot be padded or cropped is a typed error."""
from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from hypothesis import given, settings, strategies as st

import tensortune as tt
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.cli import main
from tensortune.errors import ArgumentError
from tensortune.graph.errors import NetworkCompileError
from tensortune.network import BucketError, compile_buckets
from tensortune.network.program import ConstantArena

HIDDEN = 8


def sequence_model(symbol: str = "sequence") -> onnx.ModelProto:
    """Per-token layers, a causal sum over the tokens (CumSum), a reverse one of the input that reads the padding (0
    leaves it unchanged), the tokens' Gram matrix (both axes cropped) and a max over the tokens (not cropped), of
    ``x [1, symbol, HIDDEN]``."""
    inits = {"w": rand((HIDDEN, HIDDEN), 1, -0.5, 0.5), "b": rand((HIDDEN,), 2, -0.1, 0.1),
             "axis": np.array(1, np.int64)}
    nodes = [node("MatMul", ["x", "w"], ["h0"]), node("Add", ["h0", "b"], ["h1"]), node("Relu", ["h1"], ["h"]),
             node("CumSum", ["h", "axis"], ["causal"]),
             node("CumSum", ["x", "axis"], ["anticausal"], reverse=1),
             node("Transpose", ["h"], ["ht"], perm=[0, 2, 1]), node("MatMul", ["h", "ht"], ["gram"])]
    return model(nodes, {"x": [1, symbol, HIDDEN]}, ["causal", "anticausal", "gram"], inits, opset=17)


def max_model() -> onnx.ModelProto:
    """The max over the tokens of ``x [1, sequence, HIDDEN]`` (``[1, 1, HIDDEN]``): exact when the padding is -inf."""
    return model([node("ReduceMax", ["x"], ["m"], axes=[1], keepdims=1)], {"x": [1, "sequence", HIDDEN]}, ["m"],
                 opset=17)


@pytest.fixture(scope="module")
def seq_module():
    m = sequence_model()
    return m, compile_buckets(m, {"sequence": [4, 9, 16]})


@settings(max_examples=12, deadline=None)
@given(length=st.integers(1, 16), seed=st.integers(0, 2**16))
def test_padded_runs_equal_onnxruntime_unpadded(seq_module, length, seed):
    m, module = seq_module
    x = rand((1, length, HIDDEN), seed)
    got = module.run({"x": x})
    for name, expected in zip(["causal", "anticausal", "gram"], ort_run(m, {"x": x})):
        assert_close(got[name], expected, name)
    assert module.bucket_for(length) == min(s for s in (4, 9, 16) if s >= length)


def test_layout_found_from_the_sizes(seq_module):
    _, module = seq_module
    assert module.sizes == (4, 9, 16)
    assert dict(module.layout.input_axes) == {"x": (1,)}
    assert dict(module.layout.output_axes) == {"causal": (1,), "anticausal": (1,), "gram": (1, 2)}
    arenas = {m.constants.ctypes.data for m in module.modules.values()}
    assert len(arenas) == 1  # one copy of the weights for every size


def test_one_size_crops_outputs_the_model_does_not_name():
    """One size: the outputs' padded axes found by importing the graph at the next size (this output declares no
    shape)."""
    m = model([node("Relu", ["x"], ["y"])], {"x": [1, "sequence", 3]}, ["y"], opset=17)
    m.graph.output[0].type.tensor_type.ClearField("shape")
    module = compile_buckets(m, {"sequence": [8]})
    assert dict(module.layout.output_axes) == {"y": (1,)}
    x = rand((1, 5, 3), 2)
    assert_close(module(x), np.maximum(x, 0))


def test_pad_values_and_outputs_not_cropped():
    m = max_model()
    module = compile_buckets(m, {"sequence": [8]}, pad_values={"x": -np.inf})
    assert dict(module.layout.output_axes) == {}
    x = rand((1, 5, HIDDEN), 3, -2.0, -1.0)  # all negative: a padding of 0 would be the max
    assert_close(module(x), ort_run(m, {"x": x})[0])


def test_export_shares_one_constants_file_and_loads_back(seq_module, tmp_path):
    m, module = seq_module
    path = module.export(tmp_path / "seq.tt")
    files = [path / str(s) / "constants.bin" for s in module.sizes]
    assert len({os.stat(f).st_ino for f in files}) == 1
    assert json.loads((path / "buckets.json").read_text())["sizes"] == [4, 9, 16]
    loaded = tt.load(path)
    assert len({mm.constants.ctypes.data for mm in loaded.modules.values()}) == 1
    x = rand((1, 7, HIDDEN), 5)
    for got, expected in zip(loaded(x), ort_run(m, {"x": x})):
        assert_close(got, expected)


def test_errors(seq_module):
    m, module = seq_module
    with pytest.raises(BucketError, match="more than the largest size compiled"):
        module.run({"x": rand((1, 17, HIDDEN))})
    with pytest.raises(BucketError, match="no input of the model has the symbolic dimension 'tokens'"):
        compile_buckets(m, {"tokens": [4]})
    with pytest.raises(BucketError, match="exactly one symbolic dimension"):
        compile_buckets(m, {"sequence": [4], "batch": [1]})
    with pytest.raises(BucketError, match="positive"):
        compile_buckets(m, {"sequence": [0, 4]})
    with pytest.raises(BucketError, match="pad values given for"):
        compile_buckets(m, {"sequence": [4]}, pad_values={"y": 0})
    doubled = model([node("Concat", ["x", "x"], ["y"], axis=1)], {"x": [1, "sequence", HIDDEN]}, ["y"], opset=17)
    with pytest.raises(NetworkCompileError, match="cannot be cropped"):
        compile_buckets(doubled, {"sequence": [2, 4]})


def test_bad_feeds_and_pad_values(seq_module):
    _, module = seq_module
    with pytest.raises(ArgumentError, match="none of those padded along sequence"):
        module.run({})
    ids = model([node("Cast", ["t"], ["y"], to=1)], {"t": [1, "sequence"]}, ["y"], opset=17, dtypes={"t": "int64"})
    with pytest.raises(BucketError, match="pad it with an integer"):
        compile_buckets(ids, {"sequence": [4]}, pad_values={"t": 0.5})
    module = compile_buckets(ids, {"sequence": [4]}, pad_values={"t": 7})
    got = module.run({"t": np.array([[1, 2]], np.int64)})["y"]
    assert got.tolist() == [[1.0, 2.0]]


def test_inputs_that_disagree_on_the_length():
    two = model([node("Add", ["a", "b"], ["y"])], {"a": [1, "sequence"], "b": [1, "sequence"]}, ["y"], opset=17)
    module = compile_buckets(two, {"sequence": [4, 8]})
    with pytest.raises(BucketError, match="disagree on sequence"):
        module.run({"a": rand((1, 3)), "b": rand((1, 5))})
    a, b = rand((1, 6), 1), rand((1, 6), 2)
    assert_close(module.run({"a": a, "b": b})["y"], a + b)


def test_constant_arena_by_content():
    arena = ConstantArena(by_content=True)
    w = rand((3, 5), 1)
    first = arena.place(w)
    assert arena.place(w.copy()) == first and len(arena.constants) == 1
    assert arena.place(w[:, :4].copy()) != first and len(arena.constants) == 2
    plain = ConstantArena()
    assert plain.place(w) != plain.place(w.copy())  # only by identity (build_program dedupes by id)


def test_cli_compile_buckets_and_run(tmp_path, capsys):
    m = sequence_model()
    onnx.save(m, tmp_path / "seq.onnx")
    code = main(["compile", str(tmp_path / "seq.onnx"), "-o", str(tmp_path / "seq.tt"), "--buckets",
                 "sequence=4,16", "--json"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["sizes"] == [4, 16]
    x = rand((1, 11, HIDDEN), 9)
    np.save(tmp_path / "x.npy", x)
    code = main(["run", str(tmp_path / "seq.tt"), "--input", str(tmp_path / "x.npy"), "--output",
                 str(tmp_path / "y.npz")])
    assert code == 0
    got = np.load(tmp_path / "y.npz")
    assert_close(got["gram"], ort_run(m, {"x": x})[2])
    assert main(["compile", str(tmp_path / "seq.onnx"), "-o", str(tmp_path / "bad.tt"), "--buckets",
                 "sequence=four"]) == 2
    assert main(["compile", str(tmp_path / "seq.onnx"), "-o", str(tmp_path / "bad.tt"), "--shape", "sequence=4",
                 "--pad", "x=0"]) == 2
    assert "--buckets" in capsys.readouterr().err


def test_bert_padded_with_its_attention_mask(tmp_path):
    """BERT (small, random weights, exported with a dynamic sequence axis): shorter inputs padded with token 0 and
    mask 0 give onnxruntime's outputs on the unpadded inputs."""
    pytest.importorskip("transformers")
    from model_zoo import ZOO, to_onnx

    z = ZOO["bert"]
    net, inputs = z.build(True)
    axes = {n: {1: "sequence"} for n in z.input_names} | {"output": {1: "sequence"}}
    m = to_onnx(net, inputs, z.opset, False, z.input_names, z.output_names, axes)
    module = compile_buckets(m, {"sequence": [8, 16]})
    rng = np.random.default_rng(0)
    for length in (3, 11, 16):
        feeds = {"input_ids": rng.integers(1, 1000, (1, length)).astype(np.int64),
                 "attention_mask": np.ones((1, length), np.int64)}
        feeds["attention_mask"][0, length - length // 4:] = 0
        assert_close(module.run(feeds)["output"], ort_run(m, feeds)[0])

"""ONNX import: every operator and attribute variant, run by the reference interpreter, equals onnxruntime;
unsupported models fail with one error that lists every unsupported node."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from onnx_cases import CASES
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.graph import GraphError, InputShapeError, interpret, ModelError, UnsupportedModelError
from tensortune.frontend import import_onnx
from tensortune.operators import Conv, Reshape


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_interpreter_equals_onnxruntime(case):
    m, feeds = case.build()
    expected = ort_run(m, feeds)
    g = import_onnx(m)
    got = interpret(g, feeds)
    assert list(got) == [o.name for o in m.graph.output]
    for (name, actual), exp in zip(got.items(), expected):
        assert_close(actual, exp, name)


def test_graph_prints_one_line_per_node():
    m, _ = dict((c.id, c) for c in CASES)["conv3x3_pad1"].build()
    text = str(import_onnx(m))
    assert "Conv[pads=(1, 1, 1, 1), has_bias=True](%x, $w, $b)  : float32[1,16,9,9]" in text
    assert "constants: 2" in text


def test_initializers_listed_as_inputs_are_constants():
    m, _ = dict((c.id, c) for c in CASES)["initializers_as_inputs_ir3"].build()
    g = import_onnx(m)
    assert g.inputs == ("x",) and g.is_constant("w")


def test_every_unsupported_node_is_listed():
    nodes = [node("Relu", ["x"], ["a"]), helper.make_node("Det", ["a"], ["b"], name="det1"),
             helper.make_node("NonZero", ["a"], ["c"], name="nz"), node("Relu", ["b"], ["d"]),
             helper.make_node("Pad", ["d", "p"], ["y"], name="wrap_pad", mode="wrap")]
    m = model(nodes, {"x": (1, 2, 3, 3)}, ["y"], {"p": np.zeros(8, np.int64)}, opset=19)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(m)
    listed = [(n.op_type, n.name, n.opset) for n in info.value.nodes]
    # the Relu and the Pad read an unsupported node's output: their operators are supported, so they are not listed
    assert listed == [("Det", "det1", 19), ("NonZero", "nz", 19)]
    assert "Det 'det1' (opset 19)" in str(info.value) and "NonZero 'nz'" in str(info.value)


def test_unsupported_nodes_after_an_unsupported_node_are_listed():
    """A chain of unsupported layers (a DCGAN generator's transposed convolutions) lists each, not only the first;
    a reader whose operator is supported is not listed."""
    nodes = [helper.make_node("Det", ["x"], ["a"], name="det1"), node("Relu", ["a"], ["b"]),
             helper.make_node("Det", ["b"], ["c"], name="det2"),
             helper.make_node("MaxPool", ["c"], ["d"], name="pool", kernel_shape=[1], foo=1),
             helper.make_node("Pad", ["d", "p"], ["y"], name="wrap_pad", mode="wrap")]
    m = model(nodes, {"x": (2, 2)}, ["y"], {"p": np.zeros(4, np.int64)}, opset=19)
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(m)
    assert [(n.op_type, n.name) for n in info.value.nodes] == [("Det", "det1"), ("Det", "det2"), ("MaxPool", "pool")]
    assert "unsupported attribute(s) foo" in str(info.value)


def test_unsupported_attribute_and_runtime_shape_are_listed():
    nodes = [node("MaxPool", ["x"], ["a"], kernel_shape=[2, 2], storage_order=1, foo=3),
             node("Reshape", ["x", "s"], ["b"]), node("Add", ["a", "a"], ["y"])]
    m = model(nodes, {"x": (1, 2, 4, 4), "s": (2,)}, ["y", "b"])
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(m)
    msg = str(info.value)
    assert "unsupported attribute(s) foo" in msg and "must be a constant" in msg


def test_a_4d_convolution_is_unsupported():
    m = model([node("Conv", ["x", "w"], ["y"])], {"x": (1, 2, 3, 3, 3, 3)}, ["y"], {"w": rand((2, 2, 1, 1, 1, 1))})
    with pytest.raises(UnsupportedModelError, match="only 1-D, 2-D and 3-D windows"):
        import_onnx(m)


def test_dynamic_batch_needs_a_shape():
    m = model([node("Relu", ["x"], ["y"])], {"x": ("N", 3, 4, 4)}, ["y"])
    with pytest.raises(InputShapeError, match=r"input 'x' dim 0 'N'\. .*--shape N=1"):
        import_onnx(m)
    g = import_onnx(m, shapes={"x": (2, 3, 4, 4)})
    assert g.values["y"].shape == (2, 3, 4, 4)
    with pytest.raises(InputShapeError, match="does not match"):
        import_onnx(m, shapes={"x": (2, 5, 4, 4)})
    with pytest.raises(InputShapeError, match="neither an input of the model nor one of its symbolic dimensions"):
        import_onnx(m, shapes={"data": (2, 3, 4, 4)})


def test_one_error_names_every_unknown_dimension_and_sizes_by_name_fill_them():
    """Token ids and a mask share ``batch`` and ``sequence``; a third input has an unnamed dimension: one error
    names all five unknown dimensions; sizes given per symbolic dimension (``--shape batch=2 sequence=5``) bind
    every input that uses them."""
    m = model([node("Cast", ["ids"], ["f"], to=1), node("Add", ["f", "mask"], ["y"]), node("Relu", ["q"], ["r"])],
              {"ids": ("batch", "sequence"), "mask": ("batch", "sequence"), "q": ("?", 3)}, ["y", "r"],
              dtypes={"ids": "int64"})
    with pytest.raises(InputShapeError) as info:
        import_onnx(m)
    msg = str(info.value)
    for part in ("input 'ids' dim 0 'batch'", "input 'ids' dim 1 'sequence'", "input 'mask' dim 0 'batch'",
                 "input 'mask' dim 1 'sequence'", "input 'q' dim 0 '?'", "--shape batch=1 sequence=1 q=1,3"):
        assert part in msg, msg
    g = import_onnx(m, shapes={"batch": 2, "sequence": (5,), "q": (7, 3)})
    assert g.values["ids"].shape == g.values["mask"].shape == (2, 5) and g.values["r"].shape == (7, 3)
    with pytest.raises(InputShapeError, match="input 'q' dim 0"):
        import_onnx(m, shapes={"batch": 2, "sequence": 5})
    with pytest.raises(InputShapeError, match="'batch' needs one positive size"):
        import_onnx(m, shapes={"batch": (2, 3), "sequence": 5, "q": (7, 3)})


def test_not_onnx_and_truncated(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_text("hello, this is not a model\n" * 10)
    with pytest.raises(ModelError, match="not an ONNX model"):
        import_onnx(bad)
    m, _ = dict((c.id, c) for c in CASES)["conv3x3_pad1"].build()
    data = m.SerializeToString()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError):
        import_onnx(cut)
    with pytest.raises(ModelError, match="no such file"):
        import_onnx(tmp_path / "missing.onnx")


def test_opset_out_of_range():
    m = model([node("Relu", ["x"], ["y"])], {"x": (1, 2)}, ["y"], opset=6)
    with pytest.raises(ModelError, match="opset 6"):
        import_onnx(m)


def test_shape_subgraph_stays_for_the_passes():
    m, _ = dict((c.id, c) for c in CASES)["shape_gather_concat_reshape"].build()
    g = import_onnx(m)
    kinds = [n.op.kind for n in g.nodes]
    assert "Gather" in kinds and kinds[-1] == "Reshape"
    assert g.nodes[-1].op == Reshape((1, 8 * 9 * 9))


def test_graph_rejects_bad_structure():
    m, _ = dict((c.id, c) for c in CASES)["identity"].build()
    g = import_onnx(m)
    from tensortune.graph import Graph

    with pytest.raises(GraphError, match="not defined before"):
        Graph(g.name, g.inputs, g.outputs, tuple(reversed(g.nodes)), g.values, g.constants)
    m, _ = dict((c.id, c) for c in CASES)["conv3x3_pad1"].build()
    g = import_onnx(m)
    bad = g.nodes[0]
    with pytest.raises(GraphError, match="makes"):
        Graph(g.name, g.inputs, g.outputs, (type(bad)(Conv(strides=(2, 2), has_bias=True), bad.inputs, bad.outputs,
                                                       bad.name),), g.values, g.constants)
    assert not g.constants["w"].flags.writeable


def test_newest_opset_models_compile_and_match():
    """A model at the newest opset tensortune reads (28), made of operators whose definitions changed after opset 21
    (Conv, pooling, Dropout 22; Cast, Pad, Reshape, Transpose 23-25; TopK 24; DepthToSpace, Einsum,
    ReduceLogSumExp 28), interpreted and compiled, equals onnxruntime."""
    import tensortune.network as nw
    from tensortune.frontend.onnx import MAX_OPSET

    assert MAX_OPSET == 28
    rng = np.random.default_rng(0)
    nodes = [node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             node("Sigmoid", ["c"], ["s"]),
             node("MaxPool", ["s"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             node("Dropout", ["p"], ["d", "mask"]),
             node("DepthToSpace", ["d"], ["ds"], blocksize=2, mode="CRD"),
             node("Pad", ["ds", "pads"], ["pd"], mode="reflect"),
             node("Cast", ["pd"], ["cd"], to=helper.np_dtype_to_tensor_dtype(np.dtype("float64"))),
             node("Cast", ["cd"], ["cf"], to=1, round_mode="up"),
             node("Einsum", ["cf", "m"], ["e"], equation="nchw,wk->nchk"),
             node("ReduceLogSumExp", ["e", "axes"], ["r"], keepdims=0),
             node("Reshape", ["r", "shape"], ["rs"]),
             node("Transpose", ["rs"], ["t"], perm=[1, 0]),
             node("TopK", ["t", "k"], ["y", "idx"], axis=0)]
    m = model(nodes, {"x": (1, 3, 8, 8)}, ["y", "idx"],
              {"w": rand((8, 3, 3, 3), 1), "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
               "m": rand((10, 5), 2), "axes": np.array([2], np.int64), "shape": np.array([2, -1], np.int64),
               "k": np.array([3], np.int64)}, opset=28, dtypes={"idx": "int64"})
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)}
    expected = ort_run(m, feeds)
    got = interpret(import_onnx(m), feeds)
    for actual, exp in zip(got.values(), expected):
        assert_close(actual, exp)
    compiled = nw.compile(m).run(feeds)
    for actual, exp in zip(compiled.values(), expected):
        assert_close(actual, exp)

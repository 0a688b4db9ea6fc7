"""Indexing and data movement at run time (``operators/indexing.py``, ``repeat.py``, ``space_depth.py``,
``trilu.py``, ``cumsum.py``, ``scatter.py``, ``topk.py``): Gather (the embedding lookup of language models),
GatherElements, Expand, Tile, DepthToSpace, SpaceToDepth, Trilu, CumSum, ScatterND and TopK imported over the
opsets where they changed, interpreted and compiled equal to onnxruntime for random shapes, axes and indices; Range
folded at import; a Dropout whose mask nothing reads; the fusion of the element-by-element ones with their
neighbours; and what each refuses, with the reason."""
from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from hypothesis import example, given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.frontend import import_onnx
from tensortune.graph import UnsupportedModelError, interpret
from tensortune.network import optimized_graph
from tensortune.operators.cumsum import CumSum
from tensortune.operators.indexing import Gather, GatherElements
from tensortune.operators.layer_norm import LayerNorm
from tensortune.operators.repeat import Expand, Tile
from tensortune.operators.space_depth import DepthToSpace, SpaceToDepth
from tensortune.operators.trilu import Trilu
from tensortune.target import Target

EXAMPLES = settings(max_examples=8, deadline=None)
shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3)


def check(m, feeds, kinds=None) -> nw.NetworkModule:
    """The model interpreted and compiled equals onnxruntime; ``kinds``: its compiled kernels' kinds."""
    expected = ort_run(m, feeds)
    g = import_onnx(m)
    interpreted = interpret(g, feeds)
    module = nw.compile(m)
    compiled = module.run(feeds)
    for name, want in zip(g.outputs, expected):
        assert_close(interpreted[name], want, f"interpreted {name}")
        assert_close(compiled[name], want, f"compiled {name}")
    if kinds is not None:
        assert [k.kind for k in module.manifest.kernels] == kinds
    return module


def indices(shape, n, seed, dtype="int64", negative=True):
    return np.random.default_rng(seed).integers(-n if negative else 0, n, shape).astype(dtype)


def one_node(op_type, inputs, inits=None, opset=13, dtypes=None, **attrs):
    names = list(inputs) + list(inits or {})
    return model([node(op_type, names, ["y"], **attrs)], inputs, ["y"], inits, opset=opset, dtypes=dtypes)


# ------------------------------------------------------------------------------------------- Gather

@EXAMPLES
@given(data_shape=shapes, idx_shape=st.lists(st.integers(1, 4), max_size=2), data=st.data(),
       dtype=st.sampled_from(["int32", "int64"]), opset=st.sampled_from([7, 11, 13]))
def test_gather_of_run_time_data_and_indices(data_shape, idx_shape, data, dtype, opset):
    """Any axis (negative too), indices of rank 0 to 2, negative indices (opset 11 on), int32 or int64."""
    rank = len(data_shape)
    ax = data.draw(st.integers(-rank, rank - 1))
    m = one_node("Gather", {"x": data_shape, "i": idx_shape}, opset=opset, dtypes={"i": dtype}, axis=ax)
    i = indices(idx_shape, data_shape[ax], 2, dtype, negative=opset >= 11)
    check(m, {"x": rand(data_shape, 1), "i": i})
    assert [type(n.op) for n in import_onnx(m).nodes] == [Gather]


def embedding(vocab=100, hidden=32, tokens=(2, 9)):
    inits = {"table": rand((vocab, hidden), 1), "scale": rand((hidden,), 2, 0.5, 1.5), "bias": rand((hidden,), 3)}
    return model([node("Gather", ["table", "ids"], ["e"]), node("LayerNormalization", ["e", "scale", "bias"], ["y"])],
                 {"ids": tokens}, ["y"], inits, opset=17, dtypes={"ids": "int64"})


def test_an_embedding_lookup_then_layer_norm_compiles_and_matches():
    """A constant table [vocab, hidden] gathered by int64 token ids from a graph input, one row a vector load."""
    m = embedding()
    assert [type(n.op) for n in import_onnx(m).nodes] == [Gather, LayerNorm]
    module = check(m, {"ids": indices((2, 9), 100, 4)}, kinds=["gather", "layer_norm"])
    assert "in1[" in module.source  # the token id read at run time inside the table's index


def test_a_position_embedding_added_to_the_lookup_is_one_kernel():
    m = model([node("Gather", ["table", "ids"], ["e"]), node("Add", ["e", "pos"], ["y"])], {"ids": (1, 6)}, ["y"],
              {"table": rand((40, 16), 1), "pos": rand((1, 6, 16), 2)}, dtypes={"ids": "int64"})
    check(m, {"ids": indices((1, 6), 40, 3)}, kinds=["gather_add"])


def test_a_producer_of_the_data_joins_a_gather_no_larger_than_its_output():
    """A gather may read one element many times, but computes a fused producer once per output element: no more
    often than on its own where the output is no larger (3 rows of 6), more often where it is (8 rows of 6)."""
    for rows, kinds in ((3, ["relu_gather"]), (8, ["relu", "gather"])):
        m = model([node("Relu", ["x"], ["r"]), node("Gather", ["r", "i"], ["y"])], {"x": (6, 4), "i": (rows,)},
                  ["y"], dtypes={"i": "int64"})
        check(m, {"x": rand((6, 4), 1), "i": indices((rows,), 6, 2)}, kinds=kinds)


def test_indices_out_of_range_are_clamped_where_onnxruntime_raises():
    """The kernel never reads outside the table: an index past either end reads the first or last row."""
    m = embedding(vocab=10, hidden=8, tokens=(1, 4))
    ids = np.array([[-11, 3, 10, 1000]], np.int64)
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.InvalidArgument):
        ort_run(m, {"ids": ids})
    clamped = np.array([[0, 3, 9, 9]], np.int64)
    expected = ort_run(m, {"ids": clamped})[0]
    assert_close(interpret(import_onnx(m), {"ids": ids})["y"], expected)
    assert_close(nw.compile(m)(ids), expected)


def test_a_gather_of_constants_is_folded_at_compile_time():
    m = model([node("Gather", ["table", "i"], ["e"], axis=1), node("Add", ["x", "e"], ["y"])], {"x": (3, 2)}, ["y"],
              {"table": rand((3, 5), 1), "i": np.array([4, -1], np.int64)})
    assert not any(isinstance(n.op, Gather) for n in optimized_graph(m, Target.host()).nodes)
    check(m, {"x": rand((3, 2), 2)}, kinds=["add"])


def test_a_scalar_picked_at_run_time():
    m = model([node("Gather", ["x", "i"], ["s"]), node("Mul", ["x", "s"], ["y"])], {"x": (5,), "i": ()}, ["y"],
              dtypes={"i": "int32"})
    check(m, {"x": rand((5,), 1), "i": np.array(-2, np.int32)})


# ------------------------------------------------------------------------------------------- GatherElements

@EXAMPLES
@given(data_shape=shapes, data=st.data(), dtype=st.sampled_from(["int32", "int64"]), opset=st.sampled_from([11, 13]))
def test_gather_elements(data_shape, data, dtype, opset):
    """Indices of the data's rank, no larger on the other axes, any length along the axis."""
    rank = len(data_shape)
    ax = data.draw(st.integers(-rank, rank - 1))
    idx_shape = [data.draw(st.integers(1, 4)) if d == ax % rank else data.draw(st.integers(1, n))
                 for d, n in enumerate(data_shape)]
    m = one_node("GatherElements", {"x": data_shape, "i": idx_shape}, opset=opset, dtypes={"i": dtype}, axis=ax)
    check(m, {"x": rand(data_shape, 1), "i": indices(idx_shape, data_shape[ax], 3, dtype)})
    assert [type(n.op) for n in import_onnx(m).nodes] == [GatherElements]


# ------------------------------------------------------------------------------------------- Expand and Tile

@EXAMPLES
@given(shape=shapes, data=st.data(), opset=st.sampled_from([8, 13]))
def test_expand(shape, data, opset):
    """Bidirectional broadcasting: the given shape may have more axes, and 1 where the input has more."""
    lead = data.draw(st.lists(st.integers(1, 3), max_size=2))
    to = lead + [data.draw(st.sampled_from([1, d] if d > 1 else [1, 2, 3])) for d in shape]
    m = one_node("Expand", {"x": shape}, {"s": np.array(to, np.int64)}, opset=opset)
    check(m, {"x": rand(shape, 1)})


@EXAMPLES
@given(shape=shapes, data=st.data(), opset=st.sampled_from([7, 13]))
def test_tile(shape, data, opset):
    repeats = [data.draw(st.integers(1, 3)) for _ in shape]
    m = one_node("Tile", {"x": shape}, {"r": np.array(repeats, np.int64)}, opset=opset)
    check(m, {"x": rand(shape, 1)})


def test_expand_and_tile_join_their_reader_but_not_their_producer():
    """They read input elements more than once: a producer stays a kernel of its own (it would be computed again
    for every copy), while an elementwise reader computes on their elements in the same kernel."""
    for op_type in ("Expand", "Tile"):
        m = model([node("Relu", ["x"], ["r"]), node(op_type, ["r", "s"], ["e"]), node("Sigmoid", ["e"], ["y"])],
                  {"x": (2, 1, 4)}, ["y"], {"s": np.array([1, 3, 1], np.int64)})
        check(m, {"x": rand((2, 1, 4), 1)}, kinds=["relu", f"{op_type.lower()}_sigmoid"])


def test_an_expand_to_its_own_shape_is_an_identity():
    m = one_node("Expand", {"x": (2, 3)}, {"s": np.array([1, 3], np.int64)})
    assert not any(isinstance(n.op, (Expand, Tile)) for n in import_onnx(m).nodes)
    check(m, {"x": rand((2, 3), 1)})


# ------------------------------------------------------------------------------------------- DepthToSpace

@EXAMPLES
@given(n=st.integers(1, 2), c=st.integers(1, 3), h=st.integers(1, 4), w=st.integers(1, 4), block=st.integers(1, 3),
       mode_opset=st.sampled_from([(None, 7), ("DCR", 11), ("CRD", 11), ("CRD", 13)]))
def test_depth_to_space(n, c, h, w, block, mode_opset):
    mode, opset = mode_opset
    attrs = {} if mode is None else {"mode": mode}
    m = one_node("DepthToSpace", {"x": (n, c * block * block, h, w)}, opset=opset, blocksize=block, **attrs)
    check(m, {"x": rand((n, c * block * block, h, w), 1)})


@EXAMPLES
@given(n=st.integers(1, 2), c=st.integers(1, 3), h=st.integers(1, 3), w=st.integers(1, 3), block=st.integers(1, 3),
       opset=st.sampled_from([7, 13]))
def test_space_to_depth(n, c, h, w, block, opset):
    m = one_node("SpaceToDepth", {"x": (n, c, h * block, w * block)}, opset=opset, blocksize=block)
    check(m, {"x": rand((n, c, h * block, w * block), 1)})


def test_depth_to_space_and_back_fuse_with_their_neighbours():
    """Each element read once, like a transpose: one kernel for the chain."""
    m = model([node("Relu", ["x"], ["r"]), node("DepthToSpace", ["r"], ["d"], blocksize=2, mode="CRD"),
               node("SpaceToDepth", ["d"], ["s"], blocksize=2), node("Sigmoid", ["s"], ["y"])],
              {"x": (1, 8, 3, 3)}, ["y"])
    g = optimized_graph(m, Target.host())
    assert len(g.nodes) == 1 and [type(op) for op, _ in g.nodes[0].op.steps][1:3] == [DepthToSpace, SpaceToDepth]
    check(m, {"x": rand((1, 8, 3, 3), 1)})


# ------------------------------------------------------------------------------------------- Trilu

@EXAMPLES
@given(shape=st.lists(st.integers(1, 6), min_size=2, max_size=3), k=st.one_of(st.none(), st.integers(-4, 4)),
       upper=st.sampled_from([0, 1]))
@example(shape=[3, 4], k=2**40, upper=0).via("a k beyond int32")
@example(shape=[3, 4], k=-2**40, upper=1).via("a k beyond int32")
def test_trilu(shape, k, upper):
    inits = {} if k is None else {"k": np.array(k, np.int64)}
    m = one_node("Trilu", {"x": shape}, inits, opset=14, upper=upper)
    check(m, {"x": rand(shape, 1)})
    assert import_onnx(m).nodes[0].op == Trilu(bool(upper), k or 0)


def test_a_causal_mask_from_trilu_joins_the_addition():
    m = model([node("Trilu", ["ones"], ["t"], upper=0), node("Add", ["x", "t"], ["y"])], {"x": (2, 5, 5)}, ["y"],
              {"ones": np.ones((5, 5), np.float32)}, opset=14)
    check(m, {"x": rand((2, 5, 5), 1)})


def test_trilu_of_a_run_time_tensor_joins_its_neighbours():
    m = model([node("Relu", ["x"], ["r"]), node("Trilu", ["r"], ["t"]), node("Sigmoid", ["t"], ["y"])],
              {"x": (3, 4, 6)}, ["y"], opset=14)
    check(m, {"x": rand((3, 4, 6), 1)}, kinds=["relu_trilu_sigmoid"])


# ------------------------------------------------------------------------------------------- CumSum

@EXAMPLES
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), data=st.data(), exclusive=st.booleans(),
       reverse=st.booleans(), dtype=st.sampled_from(["float32", "int32", "int64", "float16"]),
       opset=st.sampled_from([11, 14]))
def test_cumsum(shape, data, exclusive, reverse, dtype, opset):
    """float16 from opset 14, summed in float32 as onnxruntime does (equal to the bit)."""
    dtype = "float32" if opset < 14 and dtype == "float16" else dtype
    rank = len(shape)
    ax = data.draw(st.integers(-rank, rank - 1))
    m = one_node("CumSum", {"x": shape}, {"a": np.array(ax, np.int32)}, opset=opset, dtypes={"x": dtype, "y": dtype},
                 exclusive=int(exclusive), reverse=int(reverse))
    x = rand(shape, 1, -30, 30).astype(dtype) if "float" in dtype else indices(shape, 50, 1, dtype)
    check(m, {"x": x})
    assert import_onnx(m).nodes[0].op == CumSum(ax % rank, exclusive, reverse)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_cumsum_of_many_lines_runs_them_in_parallel_and_in_order_along_the_axis(axis):
    """A scan: one pass, the lines in parallel (vectors of them where they lie next to each other in memory)."""
    shape = (24, 40, 32)
    m = one_node("CumSum", {"x": shape}, {"a": np.array(axis, np.int64)}, opset=14)
    module = check(m, {"x": rand(shape, 1)}, kinds=["cumsum"])
    assert "#pragma omp parallel for" in module.source


def test_position_ids_from_an_attention_mask():
    """``cumsum(mask, axis=1) * mask - 1``, as exported language models compute position ids."""
    m = model([node("CumSum", ["mask", "one"], ["c"]), node("Mul", ["c", "mask"], ["p"]),
               node("Sub", ["p", "i1"], ["y"])], {"mask": (2, 7)}, ["y"],
              {"one": np.array(1, np.int64), "i1": np.array(1, np.int64)}, opset=14, dtypes={"mask": "int64",
                                                                                             "y": "int64"})
    mask = np.array([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1]], np.int64)
    check(m, {"mask": mask})


# ------------------------------------------------------------------------------------------- Range and Dropout

@pytest.mark.parametrize("start, limit, delta", [(1.0, 3.3, 0.5), (10, -2, -3), (0, 7, 1), (0.1, 1.0, 0.1)])
def test_range_of_constants_is_folded(start, limit, delta):
    dt = np.float32 if isinstance(start, float) else np.int64
    n = len(np.arange(start, limit, delta))
    m = model([node("Range", ["a", "b", "c"], ["r"]), node("Add", ["x", "r"], ["y"])], {"x": (n,)}, ["y"],
              {"a": dt(start), "b": dt(limit), "c": dt(delta)}, opset=11, dtypes={"x": dt, "y": dt})
    assert not any(n.op.kind == "Range" for n in optimized_graph(m, Target.host()).nodes)
    check(m, {"x": np.zeros(n, dt)})


@pytest.mark.parametrize("opset", [7, 10, 12, 13])
def test_a_dropout_mask_that_nothing_reads_is_accepted(opset):
    """The opset-9 zoo models (AlexNet, SqueezeNet, Inception-v1) declare a mask output that nothing reads."""
    m = model([node("Dropout", ["x"], ["d", "mask"]), node("Relu", ["d"], ["y"])], {"x": (2, 5)}, ["y"], opset=opset)
    check(m, {"x": rand((2, 5), 1)}, kinds=["relu"])


@pytest.mark.parametrize("read_by", ["a node", "the model"])
def test_a_dropout_mask_that_is_read_is_refused(read_by):
    nodes = [node("Dropout", ["x"], ["y", "mask"])]
    outputs = ["y", "mask"]
    if read_by == "a node":
        nodes.append(node("Cast", ["mask"], ["m"], to=1))
        outputs = ["y", "m"]
    m = model(nodes, {"x": (2, 5)}, outputs, opset=13, dtypes={"mask": "bool"})
    with pytest.raises(UnsupportedModelError, match="its mask output 'mask' is read"):
        import_onnx(m)


# ------------------------------------------------------------------------------------------- ScatterND and TopK

@EXAMPLES
@given(shape=shapes, data=st.data(), opset=st.sampled_from([11, 13, 16, 18]))
def test_scatter_nd(shape, data, opset):
    """Updates of slices of any depth at distinct positions (negative ones too)."""
    k = data.draw(st.integers(1, len(shape)))
    head = shape[:k]
    every = [np.unravel_index(p, head) for p in range(int(np.prod(head)))]
    chosen = data.draw(st.lists(st.sampled_from(range(len(every))), min_size=1, max_size=4, unique=True))
    idx = np.array([[c - n * data.draw(st.booleans()) for c, n in zip(every[p], head)] for p in chosen], np.int64)
    upd_shape = (len(chosen),) + tuple(shape[k:])
    m = one_node("ScatterND", {"x": shape, "i": idx.shape, "u": upd_shape}, opset=opset, dtypes={"i": "int64"})
    check(m, {"x": rand(shape, 1), "i": idx, "u": rand(upd_shape, 2)}, kinds=["scatter_nd"])


def test_a_key_value_cache_update_at_a_run_time_position():
    """``cache[:, :, pos] = new``, as exporters write it: indices [1, heads, 1, 3] computed at run time."""
    heads, length, dim = 4, 16, 8
    m = one_node("ScatterND", {"cache": (1, heads, length, dim), "i": (1, heads, 1, 3), "new": (1, heads, 1, dim)},
                 opset=16, dtypes={"i": "int64"})
    idx = np.array([[[[0, h, 5]] for h in range(heads)]], np.int64)
    check(m, {"cache": rand((1, heads, length, dim), 1), "i": idx, "new": rand((1, heads, 1, dim), 2)})


def test_scatter_nd_writes_the_last_of_equal_indices_and_drops_those_out_of_range():
    m = one_node("ScatterND", {"x": (4, 3), "i": (4, 1), "u": (4, 3)}, opset=16, dtypes={"i": "int64"})
    feeds = {"x": rand((4, 3), 1), "i": np.array([[1], [-3], [7], [2]], np.int64), "u": rand((4, 3), 2)}
    expected = feeds["x"].copy()
    expected[1], expected[2] = feeds["u"][1], feeds["u"][3]
    assert_close(interpret(import_onnx(m), feeds)["y"], expected)
    assert_close(nw.compile(m).run(feeds)["y"], expected)


@EXAMPLES
@given(shape=shapes, data=st.data(), largest=st.booleans(), opset=st.sampled_from([7, 10, 11]),
       dtype=st.sampled_from(["float32", "int64"]))
def test_topk(shape, data, largest, opset, dtype):
    """Values and positions of the k largest (or smallest) along any axis, equal elements (many: a few distinct
    values) in the order of their positions as onnxruntime gives them."""
    rank = len(shape)
    ax = data.draw(st.integers(-rank, rank - 1))
    k = data.draw(st.integers(1, shape[ax]))
    largest = largest or opset < 11
    dtype = dtype if opset >= 11 else "float32"  # integers from opset 11
    attrs = {"axis": ax, **({"k": k} if opset < 10 else {}), **({"largest": int(largest)} if opset >= 11 else {})}
    inits = {"k": np.array([k], np.int64)} if opset >= 10 else {}
    m = model([node("TopK", ["x", *inits], ["v", "i"], **attrs)], {"x": shape}, ["v", "i"], inits, opset=opset,
              dtypes={"x": dtype, "v": dtype, "i": "int64"})
    check(m, {"x": np.round(rand(shape, 1) * 2).astype(dtype)})


# ------------------------------------------------------------------------------------------- rejections

I64 = {"i": "int64"}


@pytest.mark.parametrize("m, reason", [
    (model([node("Range", ["a", "b", "c"], ["y"])], {"b": ()}, ["y"], {"a": np.float32(0), "c": np.float32(1)},
           opset=11), "Range of run-time start, limit or delta"),
    (model([node("Range", ["a", "b", "c"], ["y"])], {}, ["y"], {"a": np.float32(3), "b": np.float32(0),
                                                                "c": np.float32(1)}, opset=11), "is empty"),
    (one_node("Expand", {"x": (2, 3), "s": (2,)}, dtypes={"s": "int64"}), "shape .* must be a constant"),
    (one_node("Expand", {"x": (2, 3)}, {"s": np.array([4, 3], np.int64)}), r"\[2, 3\] does not broadcast"),
    (one_node("Tile", {"x": (2, 3)}, {"r": np.array([2, 0], np.int64)}), "repeats .* must be positive"),
    (one_node("Tile", {"x": (2, 3)}, {"r": np.array([2], np.int64)}), "one entry per axis"),
    (one_node("DepthToSpace", {"x": (1, 8, 2, 2)}, blocksize=2, mode="XYZ"), "mode 'XYZ' is not supported"),
    (one_node("DepthToSpace", {"x": (1, 6, 2, 2)}, blocksize=2), "6 channels do not divide"),
    (one_node("SpaceToDepth", {"x": (1, 2, 3, 4)}, blocksize=2), "3x4 pixels do not divide"),
    (one_node("SpaceToDepth", {"x": (2, 3, 4)}, blocksize=2), "NCHW image"),
    (one_node("Trilu", {"x": (3, 3), "k": ()}, opset=14, dtypes={"k": "int64"}), "k .* must be a constant"),
    (one_node("Trilu", {"x": (3,)}, opset=14), "at least two axes"),
    (one_node("CumSum", {"x": (3, 3), "a": ()}, opset=14, dtypes={"a": "int64"}), "axis .* must be a constant"),
    (one_node("CumSum", {"x": (3, 3)}, {"a": np.array(2, np.int64)}, opset=14), "axis 2 is out of range"),
    (one_node("GatherElements", {"x": (3, 3), "i": (3, 4)}, dtypes=I64), "no larger axes but axis 0"),
    (one_node("Gather", {"x": (3, 3), "i": (2,)}, dtypes=I64, axis=2), "axis 2 is out of range"),
    (one_node("Gather", {"x": (3, 3), "i": (2,)}, opset=7, dtypes=I64, axis=-3), "axis -3 is out of range"),
    (one_node("ScatterND", {"x": (3, 3), "i": (2, 1), "u": (2, 3)}, opset=16, dtypes=I64, reduction="add"),
     "reduction 'add' is not supported"),
    (one_node("ScatterND", {"x": (3, 3), "i": (2, 1), "u": (2, 2)}, opset=16, dtypes=I64), r"updates must be"),
    (model([node("TopK", ["x", "k"], ["v", "i"])], {"x": (3, 4), "k": (1,)}, ["v", "i"], opset=11,
           dtypes={"k": "int64", "i": "int64"}), "k .* must be a constant"),
    (model([node("TopK", ["x", "k"], ["v", "i"])], {"x": (3, 4)}, ["v", "i"], {"k": np.array([5], np.int64)},
           opset=11, dtypes={"i": "int64"}), "k=5 must be 1 to the length 4"),
])
def test_what_is_refused_names_the_reason(m, reason):
    with pytest.raises(UnsupportedModelError, match=reason):
        import_onnx(m)

"""Windows of every rank ONNX exporters write: 3-D convolutions (NCDHW, any groups, depthwise included) and 3-D
max, average and Lp pooling, Lp pooling in 1-D and 2-D too, and global pooling of 3-D data. Any geometry equals
onnxruntime, interpreted and compiled, at each opset where the operator's definition changed; the 3-D convolution
compiles with its default kernel and takes a folded BatchNorm and a fused activation."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from elementwise_checks import agree, check, opsets
from onnx_models import model, node, ort_run, rand
from tensortune.network.tasks import Search
from tensortune.frontend import import_onnx
from tensortune.graph import GraphError, TensorType, UnsupportedModelError, interpret
from tensortune.network.tasks import extract_tasks
from tensortune.operators import Pool, PoolKind
from tensortune.operators.conv import Conv3d
from tensortune.operators.conv3d_kernels import row_tile
from tensortune.target import Target

#: what each window attribute needs before onnxruntime takes it (the opset it came in, where it came later than 7)
ATTRIBUTE_SINCE = {("AveragePool", "dilations"): 19, ("AveragePool", "ceil_mode"): 10, ("MaxPool", "dilations"): 10,
                   ("MaxPool", "ceil_mode"): 10, ("LpPool", "dilations"): 18, ("LpPool", "ceil_mode"): 18}


def _spatial(draw, kernel: list[int], dilations: list[int], low: int = 0) -> list[int]:
    return [draw(st.integers(max(low, d * (k - 1) + 1), d * (k - 1) + 4)) for k, d in zip(kernel, dilations)]


def _padding(draw, sizes: list[int], kernel: list[int], strides: list[int], dilations: list[int]) -> dict:
    """``pads`` (each smaller than its kernel), or an ``auto_pad``: SAME only without dilation and where it pads
    (onnxruntime computes no SAME padding with dilation, and fails where a stride skips more than the padding)."""
    same = all(d == 1 and (-(-n // s) - 1) * s + k >= n for n, k, s, d in zip(sizes, kernel, strides, dilations))
    auto = draw(st.sampled_from(["NOTSET", "NOTSET", "VALID"] + (["SAME_UPPER", "SAME_LOWER"] if same else [])))
    if auto != "NOTSET":
        return {"auto_pad": auto}
    return {"pads": [draw(st.integers(0, k - 1)) for k in kernel * 2]}


@st.composite
def conv3d_cases(draw):
    """A 3-D convolution (grouped, depthwise or not; bias or not) and a Relu after it, at an opset of Conv."""
    groups = draw(st.sampled_from([1, 1, 2, "depthwise"]))
    if groups == "depthwise":
        groups = c = o = draw(st.integers(2, 4))
    else:
        c, o = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(3)]
    strides = [draw(st.integers(1, 2)) for _ in range(3)]
    dilations = [draw(st.integers(1, 2)) for _ in range(3)]
    sizes = _spatial(draw, kernel, dilations)
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dilations, "group": groups,
             **_padding(draw, sizes, kernel, strides, dilations)}
    shape = (draw(st.integers(1, 2)), c, *sizes)
    bias = draw(st.booleans())
    inits = {"w": rand((o, c // groups, *kernel), 1)} | ({"b": rand((o,), 2)} if bias else {})
    m = model([node("Conv", ["x", "w"] + (["b"] if bias else []), ["c"], **attrs), node("Relu", ["c"], ["y"])],
              {"x": shape}, ["y"], inits, opset=draw(st.sampled_from(opsets("Conv"))))
    return m, {"x": rand(shape, 3)}


@settings(max_examples=20, deadline=None)
@given(conv3d_cases())
def test_a_3d_convolution_equals_onnxruntime(case):
    check(*case)


@st.composite
def pool_cases(draw):
    """Max, average or Lp pooling of 3-D windows, or Lp pooling of 1-D or 2-D ones, with the attributes its opset
    has."""
    kind = draw(st.sampled_from(["MaxPool", "AveragePool", "LpPool"]))
    rank = draw(st.integers(1, 3)) if kind == "LpPool" else 3
    opset = draw(st.sampled_from(opsets(kind)))
    has = {a for a in ("dilations", "ceil_mode") if opset >= ATTRIBUTE_SINCE[kind, a]}
    kernel = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [draw(st.integers(1, 2)) for _ in range(rank)] if "dilations" in has else [1] * rank
    strides = [draw(st.integers(1, 3)) for _ in range(rank)]
    sizes = _spatial(draw, kernel, dilations, low=2)
    attrs = {"kernel_shape": kernel, "strides": strides, **_padding(draw, sizes, kernel, strides, dilations)}
    if "dilations" in has:
        attrs["dilations"] = dilations
    if "ceil_mode" in has and "auto_pad" not in attrs:
        attrs["ceil_mode"] = draw(st.integers(0, 1))
    if kind == "AveragePool":
        attrs["count_include_pad"] = draw(st.integers(0, 1))
    if kind == "LpPool":
        attrs["p"] = draw(st.integers(1, 4))
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), *sizes)
    m = model([node(kind, ["x"], ["y"], **attrs)], {"x": shape}, ["y"], opset=opset)
    return m, {"x": rand(shape, 4, -2, 2)}


@settings(max_examples=30, deadline=None)
@given(pool_cases())
def test_a_pooling_equals_onnxruntime(case):
    check(*case)


@pytest.mark.parametrize("kind", ["GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 7), (1, 4, 5, 6), (2, 3, 3, 4, 5)], ids=["1d", "2d", "3d"])
def test_global_pooling_of_any_rank_equals_onnxruntime(kind, shape):
    attrs = {"p": 3} if kind == "GlobalLpPool" else {}
    for opset in opsets(kind):
        m = model([node(kind, ["x"], ["y"], **attrs)], {"x": shape}, ["y"], opset=opset)
        feeds = {"x": rand(shape, 5, -2, 2)}
        if opset < 22 or kind != "GlobalLpPool":
            check(m, feeds)
            continue
        # onnxruntime has no GlobalLpPool-22 (which only adds bfloat16): its meaning at 21
        (want,) = ort_run(model([node(kind, ["x"], ["y"], **attrs)], {"x": shape}, ["y"], opset=21), feeds)
        agree(interpret(import_onnx(m), feeds)["y"], want, "interpreted")
        agree(nw.compile(m).run(feeds)["y"], want, "compiled")


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pooling_of_blocked_images_takes_its_epilogue(p):
    """After a convolution the images are channel-blocked; the Lp pooling reads them so and computes the scale after
    it in its epilogue, then a global Lp pooling reduces them."""
    m = model([node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
               node("LpPool", ["c"], ["l"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], p=p),
               node("Mul", ["l", "k"], ["s"]), node("GlobalLpPool", ["s"], ["y"], p=p)],
              {"x": (1, 3, 9, 9)}, ["y", "s"], {"w": rand((16, 3, 3, 3), 1), "k": np.float32(0.5)}, opset=18)
    g = nw.optimized_graph(m, Target.host())
    (lp,) = [n for n in g.nodes if isinstance(n.op, Pool) and n.op.kernel_shape == (3, 3)]
    assert lp.op.mode is PoolKind.LP and lp.op.p == p and [str(s.op) for s in lp.op.epilogue] == ["Mul"]
    assert g.values[lp.inputs[0]].layout.blocked
    check(m, {"x": rand((1, 3, 9, 9), 2)})


def test_a_3d_convolution_takes_its_batchnorm_and_relu_into_one_kernel():
    m = model([node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3, 3], pads=[1] * 6, strides=[1, 2, 2]),
               node("BatchNormalization", ["c", "s", "sh", "m", "v"], ["bn"]), node("Relu", ["bn"], ["y"])],
              {"x": (1, 3, 4, 9, 10)}, ["y"],
              {"w": rand((8, 3, 3, 3, 3), 1), "s": rand((8,), 2), "sh": rand((8,), 3), "m": rand((8,), 4),
               "v": rand((8,), 5, 0.5, 1.5)})
    g = nw.optimized_graph(m, Target.host())
    (conv,) = g.nodes
    assert isinstance(conv.op, Conv3d) and conv.op.has_bias and [str(s.op) for s in conv.op.epilogue] == ["Relu"]
    check(m, {"x": rand((1, 3, 4, 9, 10), 6)})


def test_register_tiles_of_a_3d_convolution():
    assert row_tile(8, 16, 16, 30) == (8, 16)  # one vector per channel: 8 channels' rows in registers
    assert row_tile(6, 40, 16, 30) == (6, 40)
    assert row_tile(7, 40, 16, 10) == (1, 40)  # 3 vectors a row: a second channel's would not fit
    assert row_tile(8, 130, 8, 14) == (1, 65)  # 17 vectors a row: half a row (9 vectors) at a time
    assert row_tile(4, 127, 8, 14) == (1, 127)  # no divisor: the whole row, accumulated in memory


def test_a_3d_convolution_of_long_rows_is_computed_in_parts_of_rows():
    """On AVX2 (14 accumulators of 8 lanes) a row of 130 outputs is computed in two parts of 65."""
    m = model([node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[1, 2, 3], pads=[0, 1, 1, 0, 0, 1])],
              {"x": (1, 2, 2, 3, 130)}, ["y"], {"w": rand((3, 2, 1, 2, 3), 1), "b": rand((3,), 2)})
    x = rand((1, 2, 2, 3, 130), 3)
    agree(nw.compile(m, "c -isa=avx2").run({"x": x})["y"], ort_run(m, {"x": x})[0], "compiled")


def test_a_small_video_network_compiles_and_matches():
    """A C3D-like stack: 3-D convolutions (one depthwise), a 3-D max pooling with a Relu fused after it, then a global
    average pooling over time and space; its 3-D convolutions are tunable layers that no template computes."""
    m = model([node("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3, 3], pads=[1] * 6),
               node("Relu", ["c0"], ["r0"]),
               node("MaxPool", ["r0"], ["p0"], kernel_shape=[1, 2, 2], strides=[1, 2, 2]), node("Relu", ["p0"], ["q0"]),
               node("Conv", ["q0", "w1"], ["c1"], kernel_shape=[3, 3, 3], pads=[1] * 6, group=8),
               node("Conv", ["c1", "w2", "b2"], ["c2"], kernel_shape=[1, 1, 1]),
               node("GlobalAveragePool", ["c2"], ["y"])],
              {"x": (1, 3, 4, 16, 16)}, ["y"],
              {"w0": rand((8, 3, 3, 3, 3), 1), "b0": rand((8,), 2), "w1": rand((8, 1, 3, 3, 3), 3),
               "w2": rand((16, 8, 1, 1, 1), 4), "b2": rand((16,), 5)})
    check(m, {"x": rand((1, 3, 4, 16, 16), 6)})
    g = nw.optimized_graph(m, Target.host())
    pool = next(n for n in g.nodes if isinstance(n.op, Pool) and n.op.rank == 3 and n.op.mode is PoolKind.MAX)
    assert [str(s.op) for s in pool.op.epilogue] == ["Relu"]
    tasks = extract_tasks(g, Target.host(), search=Search.TEMPLATES)
    assert [(t.kind, t.task) for t in tasks] == [("conv3d", None)] * 3
    assert tasks[1].workload == "[1,8,4,8,8]->8 k3x3x3 s1x1x1 p1,1,1,1,1,1 d1x1x1 g8"
    assert tasks[0].flops == 2 * 8 * 4 * 16 * 16 * 3 * 27


# ------------------------------------------------------------------------------------------- what is rejected

@pytest.mark.parametrize("nodes, inputs, inits, opset, message", [
    ([node("Conv", ["x", "w"], ["y"])], {"x": (1, 2, 3, 3, 3, 3)}, {"w": rand((2, 2, 1, 1, 1, 1))}, 13,
     "only 1-D, 2-D and 3-D windows"),
    ([node("MaxPool", ["x"], ["y"], kernel_shape=[1, 1, 1, 1])], {"x": (1, 2, 3, 3, 3, 3)}, {}, 13,
     "only 1-D, 2-D and 3-D windows"),
    ([node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], {"x": (1, 2, 3, 3, 3)}, {"w": rand((2, 2, 1, 1, 1))}, 13,
     r"pads \[1, 1, 1, 1\] must have 6 entries for a 3-D window"),
    ([node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2, 2], strides=[1, 1])], {"x": (1, 2, 3, 3, 3)}, {}, 13,
     "strides and dilations need 3 entries"),
    ([node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2, 2])], {"x": (1, 2, 3, 3, 3)}, {}, 13,
     r"optional output\(s\) \(indices\)"),
    ([node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2], pads=[2, 0, 0, 0, 0, 0])], {"x": (1, 2, 3, 3, 3)}, {},
     13, "must be smaller than the kernel"),
    ([node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=0)], {"x": (1, 2, 3, 3)}, {}, 18,
     "p=0: only integer exponents >= 1 are supported"),
    ([node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])], {"x": (1, 2, 5, 5)}, {}, 17,
     "unsupported attribute", ),
    ([node("GlobalLpPool", ["x"], ["y"], p=-1)], {"x": (1, 2, 3, 3)}, {}, 13, "p=-1: only integer exponents"),
    ([node("GlobalMaxPool", ["x"], ["y"])], {"x": (1, 2, 3, 3, 3, 3)}, {}, 13,
     "only NCW, NCHW and NCDHW inputs are supported"),
], ids=["conv4d", "pool4d", "conv3d_pads", "pool3d_strides", "indices", "pads_not_below_kernel", "lp_p0",
        "lp_dilations_before_18", "global_lp_negative_p", "global_pool4d"])
def test_windows_that_are_not_supported_are_rejected(nodes, inputs, inits, opset, message):
    with pytest.raises(UnsupportedModelError, match=message):
        import_onnx(model(nodes, inputs, ["y"], inits, opset=opset))


def test_bad_3d_windows_are_graph_errors():
    with pytest.raises(GraphError, match="windows of 2 or 3 spatial axes"):
        Pool(PoolKind.MAX, (2, 2, 2, 2), (1,) * 4, (0,) * 8, (1,) * 4)
    with pytest.raises(GraphError, match="strides must be 3 integers"):
        Pool(PoolKind.AVG, (2, 2, 2))
    with pytest.raises(GraphError, match="p must be 1 integers >= 1"):
        Pool(PoolKind.LP, (2, 2), p=0)
    with pytest.raises(GraphError, match="pads must be 6 integers"):
        Conv3d(pads=(1, 1, 1, 1))
    with pytest.raises(GraphError, match=r"need weights \[O, 2, KD, KH, KW\]"):
        Conv3d(groups=2).infer([TensorType((1, 4, 3, 3, 3), "float32"), TensorType((4, 4, 1, 1, 1), "float32")])
    with pytest.raises(GraphError, match="the data must have rank 5"):
        Pool(PoolKind.LP, (2, 2, 2), (1,) * 3, (0,) * 6, (1,) * 3).infer([TensorType((1, 4, 3, 3), "float32")])

"""1-D convolutions and poolings (NCW data: audio encoders such as Whisper's and wav2vec2's) imported as 2-D windows
of one row: any geometry equals onnxruntime, interpreted and compiled."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.frontend import import_onnx
from tensortune.graph import interpret
from tensortune.target import Target


def _check(m, feeds):
    expected = ort_run(m, feeds)
    got = interpret(import_onnx(m), feeds)
    compiled = nw.compile(m).run(feeds)
    for out, want in zip(m.graph.output, expected):
        assert_close(got[out.name], want, "interpreted")
        assert_close(compiled[out.name], want, "compiled")


@st.composite
def conv1d_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 4]))
    c, o = groups * draw(st.integers(1, 4)), groups * draw(st.integers(1, 4))
    k, stride, dilation = draw(st.integers(1, 5)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    length = draw(st.integers(dilation * (k - 1) + 1, 24))
    attrs = {"kernel_shape": [k], "strides": [stride], "dilations": [dilation], "group": groups}
    # onnxruntime computes no SAME padding with dilation
    same = ["SAME_UPPER", "SAME_LOWER"] if dilation == 1 else []
    auto = draw(st.sampled_from(["NOTSET", "NOTSET", "VALID"] + same))
    if auto == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, k - 1)), draw(st.integers(0, k - 1))]
    else:
        attrs["auto_pad"] = auto
    bias = draw(st.booleans())
    inits = {"w": rand((o, c // groups, k), 1)} | ({"b": rand((o,), 2)} if bias else {})
    m = model([node("Conv", ["x", "w"] + (["b"] if bias else []), ["c"], **attrs), node("Relu", ["c"], ["y"])],
              {"x": (draw(st.integers(1, 2)), c, length)}, ["y"], inits)
    return m, {"x": rand((m.graph.input[0].type.tensor_type.shape.dim[0].dim_value, c, length), 3)}


@settings(max_examples=30, deadline=None)
@given(conv1d_cases())
def test_a_1d_convolution_equals_onnxruntime(case):
    _check(*case)


@settings(max_examples=20, deadline=None)
@given(kind=st.sampled_from(["MaxPool", "AveragePool"]), k=st.integers(1, 4), stride=st.integers(1, 3),
       pad=st.integers(0, 3), ceil=st.integers(0, 1), length=st.integers(5, 20))
def test_a_1d_pooling_equals_onnxruntime(kind, k, stride, pad, ceil, length):
    pad = min(pad, k - 1)
    m = model([node(kind, ["x"], ["y"], kernel_shape=[k], strides=[stride], pads=[pad, pad], ceil_mode=ceil)],
              {"x": (1, 3, length)}, ["y"])
    _check(m, {"x": rand((1, 3, length), 4, -2, 2)})


@pytest.mark.parametrize("kind", ["GlobalAveragePool", "GlobalMaxPool"])
def test_a_1d_global_pooling_equals_onnxruntime(kind):
    m = model([node(kind, ["x"], ["y"])], {"x": (2, 5, 11)}, ["y"])
    _check(m, {"x": rand((2, 5, 11), 5)})


def test_an_audio_feature_encoder_of_1d_convolutions_compiles_and_matches():
    """wav2vec2's feature extractor in small: raw audio [1, 1, 400] through strided 1-D convolutions (kernel 10
    stride 5, then kernel 3 stride 2), ReLUs, then a pooling over time."""
    m = model([node("Conv", ["x", "w0"], ["c0"], kernel_shape=[10], strides=[5]), node("Relu", ["c0"], ["r0"]),
               node("Conv", ["r0", "w1", "b1"], ["c1"], kernel_shape=[3], strides=[2]), node("Relu", ["c1"], ["r1"]),
               node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3], pads=[1, 1]),
               node("GlobalAveragePool", ["c2"], ["y"])],
              {"x": (1, 1, 400)}, ["y"],
              {"w0": rand((32, 1, 10), 1), "w1": rand((32, 32, 3), 2), "b1": rand((32,), 3),
               "w2": rand((16, 32, 3), 4), "b2": rand((16,), 5)})
    _check(m, {"x": rand((1, 1, 400), 6)})


def test_the_weight_of_a_1d_convolution_is_folded_into_a_constant():
    m = model([node("Conv", ["x", "w"], ["y"], kernel_shape=[3])], {"x": (1, 2, 9)}, ["y"], {"w": rand((4, 2, 3), 1)})
    g = nw.optimized_graph(m, Target.host())
    conv = next(n for n in g.nodes if type(n.op).__name__ == "Conv")
    assert g.is_constant(conv.inputs[1]) and g.values[conv.inputs[1]].shape == (4, 2, 1, 3)
    assert np.isfinite(nw.compile(m)(rand((1, 2, 9), 2))).all()

"""ConvTranspose (``operators/conv_transpose.py``): the phase convolution and its interleave equal onnxruntime for any
1-D, 2-D and 3-D geometry (strides, dilations, groups, pads, output_padding, output_shape, auto_pad), interpreted and
compiled; the convolution it becomes is the tunable ``Conv``, and no zero-inserted input is made."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import helper

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.frontend import import_onnx
from tensortune.graph import UnsupportedModelError, interpret
from tensortune.operators import Conv
from tensortune.operators.conv_transpose import PhasesToSpace


def convt_model(x_shape, c_out, kernel, groups=1, bias=True, opset=17, epilogue=False, **attrs):
    c = x_shape[1]
    inits = {"w": rand((c, c_out // groups, *kernel), 1)} | ({"b": rand((c_out,), 2)} if bias else {})
    nodes = [node("ConvTranspose", ["x", "w"] + (["b"] if bias else []), ["t" if epilogue else "y"],
                  kernel_shape=list(kernel), group=groups, **attrs)]
    if epilogue:
        nodes.append(node("Relu", ["t"], ["y"]))
    return model(nodes, {"x": x_shape}, ["y"], inits, opset=opset)


def check(m, compiled=True):
    x_shape = tuple(d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim)
    what = f"x {x_shape}, w {tuple(m.graph.initializer[0].dims)}: {helper.printable_node(m.graph.node[0])}"
    feeds = {"x": rand(x_shape, 3)}
    (expected,) = ort_run(m, feeds)
    assert_close(interpret(import_onnx(m), feeds)["y"], expected, f"interpreted {what}")
    if compiled:
        assert_close(nw.compile(m).run(feeds)["y"], expected, f"compiled {what}")


@st.composite
def geometries(draw, rank):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    c, o = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 5)) for _ in range(rank)]
    strides = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [draw(st.sampled_from([1, 1, 2])) for _ in range(rank)]
    sizes = [draw(st.integers(1, 7)) for _ in range(rank)]
    attrs = {"strides": strides, "dilations": dilations}
    how = draw(st.sampled_from(["pads", "pads", "output_shape", "SAME_UPPER", "SAME_LOWER"]))
    full = [s * (n - 1) + (k - 1) * d + 1 for s, n, k, d in zip(strides, sizes, kernel, dilations)]
    if how == "pads":
        pads = [draw(st.integers(0, k - 1)) for k in kernel for _ in range(2)]
        attrs["pads"] = pads[0::2] + pads[1::2]
        attrs["output_padding"] = [draw(st.integers(0, s - 1)) for s in strides]  # onnxruntime: below the stride
        if any(f - pads[2 * a] - pads[2 * a + 1] + op < 1 for a, (f, op) in enumerate(zip(full, attrs["output_padding"]))):
            attrs["pads"] = [0] * (2 * rank)
    elif how == "output_shape":
        # onnxruntime takes up to stride - 1 outputs beyond the natural extent
        attrs["output_shape"] = [max(1, f + draw(st.integers(-2, s - 1))) for f, s in zip(full, strides)]
    else:
        attrs["auto_pad"] = how
    return convt_model((draw(st.integers(1, 2)), c, *sizes), o, kernel, groups, draw(st.booleans()), **attrs)


@settings(max_examples=60, deadline=None)
@given(m=geometries(2))
def test_a_2d_transposed_convolution_equals_onnxruntime_interpreted(m):
    check(m, compiled=False)


@settings(max_examples=40, deadline=None)
@given(m=geometries(1))
def test_a_1d_transposed_convolution_equals_onnxruntime_interpreted(m):
    check(m, compiled=False)


@settings(max_examples=25, deadline=None)
@given(m=geometries(3))
def test_a_3d_transposed_convolution_equals_onnxruntime_interpreted(m):
    check(m, compiled=False)


@settings(max_examples=8, deadline=None)
@given(m=st.one_of(geometries(1), geometries(2), geometries(3)))
def test_a_transposed_convolution_compiles_to_onnxruntime_values(m):
    check(m)


@pytest.mark.parametrize("kernel, stride, pad, out_pad", [((4, 4), 2, 1, 0), ((3, 3), 2, 1, 1), ((2, 2), 2, 0, 0),
                                                          ((5, 5), 1, 2, 0), ((1, 1), 1, 0, 0), ((3, 3), 3, 0, 2)])
def test_generator_and_decoder_layers(kernel, stride, pad, out_pad):
    """The layers of DCGAN generators (k4 s2 p1), U-Net decoders (k2 s2; k3 s2 p1 op1) and a fused ReLU."""
    m = convt_model((1, 16, 5, 6), 8, kernel, strides=[stride] * 2, pads=[pad] * 4,
                    output_padding=[out_pad] * 2, epilogue=True)
    check(m)


def test_the_phases_are_one_tunable_convolution_without_zero_insertion():
    """k4 s2 p1 (DCGAN): one stride-1 2x2 ``Conv`` with 4 phases per output channel, read by the interleave; no
    tensor as large as the zero-inserted input (2H-1 x 2W-1) exists."""
    m = convt_model((1, 16, 5, 6), 8, (4, 4), strides=[2, 2], pads=[1, 1, 1, 1])
    g = import_onnx(m)
    convs = [n for n in g.nodes if isinstance(n.op, Conv)]
    assert len(convs) == 1
    conv = convs[0]
    assert conv.op.strides == (1, 1) and g.values[conv.inputs[1]].shape == (8 * 4, 16, 2, 2)
    assert isinstance(g.nodes[-1].op, PhasesToSpace) and g.nodes[-1].op.strides == (2, 2)
    assert g.values["y"].shape == (1, 8, 10, 12)
    assert all(v.shape[-2:] != (9, 11) for v in g.values.values())


def test_stride_one_keeps_the_dilation_in_the_convolution():
    m = convt_model((1, 4, 6, 6), 4, (3, 3), dilations=[2, 2])
    g = import_onnx(m)
    (conv,) = [n for n in g.nodes if isinstance(n.op, Conv)]
    assert conv.op.dilations == (2, 2) and g.values[conv.inputs[1]].shape == (4, 4, 3, 3)
    check(m)


@pytest.mark.parametrize("opset", [7, 11, 22, 28])
def test_every_opset(opset):
    check(convt_model((1, 4, 3, 3), 6, (3, 3), strides=[2, 2], opset=opset))


@pytest.mark.parametrize("build, reason", [
    (lambda: convt_model((1, 2, 3, 3, 3, 3), 2, (2, 2, 2, 2)), "only 1-D, 2-D and 3-D transposed convolutions"),
    (lambda: model([node("ConvTranspose", ["x", "w"], ["y"])], {"x": (1, 2, 4, 4), "w": (2, 2, 3, 3)}, ["y"]),
     "its weight must be a constant"),
    (lambda: convt_model((1, 2, 3, 3), 2, (3, 3), output_shape=[40, 40]), "larger than the input can give"),
    (lambda: convt_model((1, 2, 3, 3), 2, (3, 3), auto_pad="FOO"), "auto_pad 'FOO'"),
])
def test_rejections_name_the_node_and_why(build, reason):
    with pytest.raises(UnsupportedModelError, match=reason) as info:
        import_onnx(build())
    assert [n.op_type for n in info.value.nodes] == ["ConvTranspose"]


def test_phases_to_space_reference_matches_its_kernel_on_random_geometry():
    """The interleave alone (offsets, strides per axis): reference and compiled kernel agree element for element."""
    from tensortune.graph.ir import GraphBuilder, TensorType, Value

    rng = np.random.default_rng(0)
    for strides, offsets, sizes in [((2, 3), (1, 0), (7, 8)), ((1, 2), (0, 1), (4, 5)), ((3, 1), (2, 0), (4, 3))]:
        blocks = [(o + s - 1) // st + 1 for o, s, st in zip(offsets, sizes, strides)]
        x = rng.standard_normal((2, 3 * strides[0] * strides[1], *blocks)).astype(np.float32)
        op = PhasesToSpace(strides, offsets, sizes)
        want = op.reference(x)
        for n, c, i, j in [(1, 2, sizes[0] - 1, sizes[1] - 1), (0, 0, 0, 0), (1, 1, 2, 2)]:
            u, v = i + offsets[0], j + offsets[1]
            phase = (u % strides[0]) * strides[1] + v % strides[1]
            assert want[n, c, i, j] == x[n, c * strides[0] * strides[1] + phase, u // strides[0], v // strides[1]]
        b = GraphBuilder("p2s")
        b.inputs, b.values["x"] = ["x"], Value("x", TensorType(x.shape, "float32"))
        b.add(op, ["x"], "p2s", ["y"])
        b.outputs = ["y"]
        compiled = nw.compile(b.build(), trace=lambda *_: None)  # a graph, not a model: no cache key
        np.testing.assert_array_equal(compiled.run({"x": x})["y"], want)

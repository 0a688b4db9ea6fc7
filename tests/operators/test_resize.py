"""Resize (opsets 10 to 19) and Upsample (7 to 9), one operator (``operators/resize.py``): imported, interpreted and
compiled equal to onnxruntime for every mode, coordinate transformation and nearest mode it accepts, scales up and
down (non-integer too) and sizes, axes and keep_aspect_ratio_policy; nearest picks onnxruntime's neighbour at every
tie; a U-Net-like decoder (upsampling, concatenation with the skip connection) compiles in blocked layouts and
matches; what it cannot take is refused with the reason."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.frontend import import_onnx
from tensortune.graph import UnsupportedModelError, interpret
from tensortune.network import optimized_graph
from tensortune.operators import Fused
from tensortune.operators.resize import (AxisResize, Coordinates, Interpolation, Resize, ResizeMode, Rounding,
                                         axis_table)
from tensortune.target import Target

AVX2 = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
COORDINATES = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn",
               "tf_crop_and_resize", "half_pixel_symmetric"]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def resize_model(shape, opset=13, scales=None, sizes=None, roi=None, dtype="float32", **attrs):
    """A Resize node of input ``x``: its roi, scales and sizes constants where given (empty ones where opset 11 and
    12 need the input)."""
    inits, inputs = {}, ["x", "", "", ""]
    for k, (name, value, dt) in enumerate((("roi", roi, np.float32), ("scales", scales, np.float32),
                                           ("sizes", sizes, np.int64)), start=1):
        if value is not None or (opset < 13 and k < 3):
            inits[name] = np.asarray([] if value is None else value, dt)
            inputs[k] = name
    while not inputs[-1]:
        inputs.pop()
    return model([node("Resize", inputs, ["y"], **attrs)], {"x": shape}, ["y"], inits, opset=opset,
                 dtypes={"x": dtype, "y": dtype})


def check(m, x):
    """The model interpreted and compiled equals onnxruntime (exactly for integers)."""
    expected = ort_run(m, {"x": x})[0]
    g = import_onnx(m)
    for got in (interpret(g, {"x": x})["y"], nw.compile(m)(x)):
        if x.dtype.kind == "f":
            assert_close(got, expected)
        else:
            np.testing.assert_array_equal(got, expected)
    return g


SCALES = st.sampled_from([0.4, 0.5, 0.6, 0.75, 1.0, 1.3, 1.5, 1.7, 2.0, 2.5, 3.0])


@settings(max_examples=40, deadline=None)
@given(data=st.data(), opset=st.sampled_from([11, 13, 18, 19]), mode=st.sampled_from(["nearest", "linear", "cubic"]),
       shape=st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 9), st.integers(1, 9)))
def test_resize_equals_onnxruntime(data, opset, mode, shape):
    """Rank-4 images, height and width resized by scales or to sizes, any mode, coordinate transformation (with a
    region of interest and extrapolation for tf_crop_and_resize) and nearest mode of the opset."""
    coordinates = data.draw(st.sampled_from(COORDINATES[:6] + COORDINATES[6:] * (opset >= 19)))
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinates}
    if mode == "nearest":
        attrs["nearest_mode"] = data.draw(st.sampled_from(NEAREST_MODES))
    if mode == "cubic":
        attrs.update(cubic_coeff_a=data.draw(st.sampled_from([-0.75, -0.5])),
                     exclude_outside=data.draw(st.sampled_from([0, 1])))
    roi = None
    if coordinates == "tf_crop_and_resize":
        starts = data.draw(st.lists(st.sampled_from([-0.2, 0.0, 0.1, 0.3]), min_size=2, max_size=2))
        ends = data.draw(st.lists(st.sampled_from([0.6, 0.9, 1.0, 1.2]), min_size=2, max_size=2))
        roi = [0, 0, *starts, 1, 1, *ends]
        attrs["extrapolation_value"] = data.draw(st.sampled_from([0.0, -7.5]))
    if data.draw(st.booleans(), "scales"):
        hw = data.draw(st.tuples(SCALES, SCALES).filter(lambda s: all(int(f * n) for f, n in zip(s, shape[2:]))))
        m = resize_model(shape, opset, scales=[1, 1, *hw], roi=roi, **attrs)
    else:
        hw = data.draw(st.tuples(st.integers(1, 14), st.integers(1, 14)))
        m = resize_model(shape, opset, sizes=[*shape[:2], *hw], roi=roi, **attrs)
    check(m, rand(shape, 1, -3, 3))


@pytest.mark.parametrize("coordinates", COORDINATES)
def test_every_mode_and_nearest_mode_of_each_coordinate_transformation(coordinates):
    """Every combination, up and down in one image (7 -> 17 rows: scale 17/7, 10 -> 4 columns) by sizes and by
    non-integer scales; nearest ties (sizes 7 -> 8, 10 -> 12 put coordinates a rounding error away from halves)."""
    roi = [0, 0, 0.1, -0.1, 1, 1, 0.8, 1.1] if coordinates == "tf_crop_and_resize" else None
    x = rand((1, 2, 7, 10), 2, -3, 3)
    variants = [{"mode": "nearest", "nearest_mode": n} for n in NEAREST_MODES] + [{"mode": "linear"}] + [
        {"mode": "cubic", "exclude_outside": e} for e in (0, 1)]
    for attrs in variants:
        for sizes, scales in (([1, 2, 17, 4], None), ([1, 2, 8, 12], None), (None, [1, 1, 1.7, 0.45])):
            check(resize_model(x.shape, 19, scales=scales, sizes=sizes, roi=roi, extrapolation_value=2.5,
                               coordinate_transformation_mode=coordinates, **attrs), x)


@pytest.mark.parametrize("rounding, coordinates", [(r, c) for r in NEAREST_MODES for c in COORDINATES])
def test_nearest_tables_pick_onnxruntimes_neighbour_for_every_size(rounding, coordinates):
    """Every resize of 1 to 20 elements to 1 to 20 (sizes): the input each output reads, extrapolated outputs (-1)
    included, is onnxruntime's, ties a rounding error away from a half included."""
    how = Interpolation(ResizeMode.NEAREST, Coordinates(coordinates), Rounding(rounding))
    roi = [0.1, 0.8] if coordinates == "tf_crop_and_resize" else None
    for n_in in range(1, 21):
        x = np.arange(n_in, dtype=np.float32)
        for n_out in set(range(1, 21)) - {n_in}:
            m = resize_model((n_in,), 19, sizes=[n_out], roi=roi, mode="nearest", nearest_mode=rounding,
                             coordinate_transformation_mode=coordinates, extrapolation_value=-1.0)
            index, _ = axis_table(AxisResize(n_in, n_out, float(np.float32(n_out) / np.float32(n_in)),
                                             tuple(roi or (0.0, 1.0))), how)
            np.testing.assert_array_equal(index[:, 0], ort_run(m, {"x": x})[0], err_msg=f"{n_in} -> {n_out}")


@pytest.mark.parametrize("opset, mode", [(7, "nearest"), (7, "linear"), (9, "nearest"), (9, "linear"),
                                         (10, "nearest"), (10, "linear")])
def test_upsample_and_resize_10(opset, mode):
    """Asymmetric coordinates, nearest truncating (the ceiling downsampling): Upsample's scales an attribute (7),
    then an input (9); Resize-10 downsamples too."""
    x = rand((2, 3, 4, 5), 3, -3, 3)
    if opset == 7:
        m = model([node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 1.5])], {"x": x.shape}, ["y"],
                  opset=7)
    else:
        scales = [1, 1, 2.5, 1.7] if opset == 9 else [1, 1, 0.6, 1.7]
        m = model([node("Upsample" if opset == 9 else "Resize", ["x", "s"], ["y"], mode=mode)], {"x": x.shape}, ["y"],
                  {"s": np.asarray(scales, np.float32)}, opset=opset)
    check(m, x)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_axes_and_keep_aspect_ratio_policy(policy, mode):
    """Opset 18: sizes of the given axes only, scaled by one scale under a policy; scales and roi per axis."""
    x = rand((2, 3, 4, 5), 4, -3, 3)
    check(resize_model(x.shape, 18, sizes=[7, 3], axes=[2, 3], mode=mode, keep_aspect_ratio_policy=policy), x)
    check(resize_model(x.shape, 18, scales=[1.5, 2.0], axes=[3, -2], mode=mode), x)
    check(resize_model(x.shape, 18, scales=[1.5, 0.5], axes=[2, 3], roi=[0.1, 0.2, 0.7, 1.1], mode=mode,
                       coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=3.0), x)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coordinates", COORDINATES[:4] + COORDINATES[6:])
def test_antialias(mode, coordinates):
    """Opset 18's antialiasing filters, with and without exclude_outside, downsampling (a window of up to 29 taps at
    scale 0.15) and upsampling; one Resize node per axis. 3-D images for linear."""
    cases = [((1, 2, 9, 13), [1, 1, 0.5, 0.3]), ((2, 1, 7, 6), [1, 1, 1.6, 0.7]), ((1, 1, 20, 5), [1, 1, 0.15, 2.0])]
    cases += [((1, 2, 4, 5, 6), [1, 1, 0.5, 2, 0.6])] * (mode == "linear")
    for shape, scales in cases:
        for exclude in (0, 1):
            m = resize_model(shape, 19, scales=scales, mode=mode, coordinate_transformation_mode=coordinates,
                             exclude_outside=exclude, cubic_coeff_a=-0.5, antialias=1)
            g = check(m, rand(shape, 3, -3, 3))
            assert [type(n.op) for n in g.nodes] == [Resize] * (len(shape) - 2)


def test_antialias_leaves_nearest_as_it_is():
    """The specification's antialias applies to linear and cubic modes only (onnxruntime refuses it with nearest)."""
    x = rand((1, 2, 9, 13), 4)
    plain = resize_model(x.shape, 18, scales=[1, 1, 0.5, 0.3], mode="nearest")
    filtered = resize_model(x.shape, 18, scales=[1, 1, 0.5, 0.3], mode="nearest", antialias=1)
    assert_close(nw.compile(filtered)(x), ort_run(plain, {"x": x})[0])


@pytest.mark.parametrize("shape, scales, modes", [
    ((4, 5), [2, 1.5], ["nearest", "linear", "cubic"]),  # 2-D
    ((2, 3, 9), [1, 1, 1.7], ["nearest", "linear"]),  # a 1-D image
    ((3, 4, 5), [1.5, 2, 0.7], ["nearest", "linear"]),  # trilinear
    ((1, 2, 3, 4, 5), [1, 1, 2, 1.5, 0.6], ["nearest", "linear"]),  # a 3-D image
    ((2, 4, 5, 3), [1, 1.5, 0.6, 1], ["nearest", "linear"]),  # NHWC
    ((7,), [1.6], ["nearest"]),
])
def test_other_ranks_and_axes(shape, scales, modes):
    x = rand(shape, 5, -3, 3)
    for mode in modes:
        check(resize_model(shape, 13, scales=scales, mode=mode), x)


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint8", "float16"])
def test_other_dtypes(dtype):
    """Nearest copies integers exactly; float16 is interpolated in float32."""
    x = (np.arange(2 * 3 * 4 * 5) % 100).reshape(2, 3, 4, 5).astype(dtype)
    for mode in ["nearest"] + ["linear"] * (dtype == "float16"):
        check(resize_model(x.shape, 13, scales=[1, 1, 2, 1.5], mode=mode, dtype=dtype), x)


def test_a_resize_to_the_same_shape_is_an_identity():
    """onnxruntime copies the input when no axis changes length (scales 1.1 of 4 and 5 elements)."""
    x = rand((2, 3, 4, 5), 6)
    g = check(resize_model(x.shape, 13, scales=[1, 1, 1.1, 1.1], mode="linear"), x)
    assert [n.op.kind for n in g.nodes] == ["Identity"]


def test_sizes_computed_from_shapes_are_folded_at_compile_time():
    """What exporters write: the sizes from the input's shape (Shape, Slice, Concat) are constants once shapes are
    static."""
    nodes = [node("Shape", ["x"], ["s"]), node("Slice", ["s", "zero", "two"], ["nc"]),
             node("Concat", ["nc", "hw"], ["sizes"], axis=0),
             node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")]
    m = model(nodes, {"x": (1, 3, 4, 5)}, ["y"], {"zero": np.array([0], np.int64), "two": np.array([2], np.int64),
                                                   "hw": np.array([8, 7], np.int64)})
    check(m, rand((1, 3, 4, 5), 7))
    assert [type(n.op) for n in optimized_graph(m, Target.host()).nodes] == [Resize]


def test_a_nearest_upsample_joins_the_elementwise_operator_that_reads_it():
    """A MapOp: Resize then Add (a residual of the upsampled size) is one kernel; its producer is not computed
    again per copy (``reads_once`` is False), so the ReLU before it stays a kernel of its own."""
    m = model([node("Relu", ["x"], ["r"]), node("Resize", ["r", "", "s"], ["u"], mode="nearest"),
               node("Add", ["u", "z"], ["y"])], {"x": (1, 4, 3, 5), "z": (1, 4, 6, 10)}, ["y"],
              {"s": np.array([1, 1, 2, 2], np.float32)})
    g = optimized_graph(m, Target.host())
    assert [n.op.kind for n in g.nodes] == ["Relu", "Fused"]
    assert [type(op) for op, _ in g.nodes[1].op.steps][0] is Resize
    feeds = {"x": rand((1, 4, 3, 5), 8, -2, 2), "z": rand((1, 4, 6, 10), 9)}
    assert_close(nw.compile(m).run(feeds)["y"], ort_run(m, feeds)[0])
    assert isinstance(g.nodes[1].op, Fused)


def unet(linear_coordinates: str, opset: int = 13):
    """Two encoder levels, a bottleneck, and a decoder that upsamples by nearest (PyTorch's asymmetric/floor) and
    by linear interpolation, each concatenated with its skip connection before a convolution."""
    def conv(name, inp, cin, cout, seed, k=3):
        inits[f"{name}_w"] = rand((cout, cin, k, k), seed, -0.3, 0.3)
        inits[f"{name}_b"] = rand((cout,), seed + 50, -0.1, 0.1)
        return [node("Conv", [inp, f"{name}_w", f"{name}_b"], [f"{name}_c"], kernel_shape=[k, k],
                     pads=[k // 2] * 4), node("Relu", [f"{name}_c"], [name])]

    inits = {"up": np.array([1, 1, 2, 2], np.float32), "roi": np.array([], np.float32)}  # roi: opset 11 needs it
    nodes = conv("e1", "x", 3, 16, 1) + [node("MaxPool", ["e1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2])]
    nodes += conv("e2", "p1", 16, 16, 2) + [node("MaxPool", ["e2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2])]
    nodes += conv("b", "p2", 16, 32, 3)
    nodes += [node("Resize", ["b", "roi", "up"], ["u2"], mode="nearest", coordinate_transformation_mode="asymmetric",
                   nearest_mode="floor"), node("Concat", ["u2", "e2"], ["c2"], axis=1)]
    nodes += conv("d2", "c2", 48, 16, 4)
    nodes += [node("Resize", ["d2", "roi", "up"], ["u1"], mode="linear",
                   coordinate_transformation_mode=linear_coordinates), node("Concat", ["u1", "e1"], ["c1"], axis=1)]
    nodes += conv("d1", "c1", 32, 8, 5) + [node("Conv", ["d1", "head_w"], ["y"], kernel_shape=[1, 1])]
    inits["head_w"] = rand((2, 8, 1, 1), 6)
    return model(nodes, {"x": (1, 3, 16, 12)}, ["y"], inits, opset=opset)


@pytest.mark.parametrize("linear_coordinates, opset", [("half_pixel", 13), ("align_corners", 11),
                                                       ("pytorch_half_pixel", 19)])
def test_a_unet_decoder_compiles_blocked_and_matches(linear_coordinates, opset):
    """The upsampled images keep the convolutions' blocked layout (the channels are not resized): each Resize reads
    and writes NCHW8c and the concatenation joins blocked tensors; interpreted and compiled equal onnxruntime."""
    m = unet(linear_coordinates, opset)
    x = rand((1, 3, 16, 12), 7)
    expected = ort_run(m, {"x": x})[0]
    assert_close(interpret(import_onnx(m), {"x": x})["y"], expected)
    g = optimized_graph(m, AVX2)
    resizes = [n for n in g.nodes if isinstance(n.op, Resize)]
    assert len(resizes) == 2
    for n in resizes:
        assert g.values[n.inputs[0]].layout.block == 8 and g.values[n.outputs[0]].layout.block == 8
    module = nw.compile(m, AVX2)
    assert [k.kind for k in module.manifest.kernels].count("resize") == 2
    assert_close(module(x), expected)


def test_the_op_checks_its_tables():
    from tensortune.graph import GraphError, TensorType

    x = TensorType((1, 2, 3), "float32")
    with pytest.raises(GraphError, match="int32 indices and float32 weights of one shape"):
        Resize((2,), ResizeMode.LINEAR).infer([x, TensorType((6, 2), "int32"), TensorType((6, 4), "float32")])
    with pytest.raises(GraphError, match="a float tensor"):
        Resize((2,), ResizeMode.CUBIC).infer([TensorType((1, 3), "int32"), TensorType((6, 4), "int32"),
                                               TensorType((6, 4), "float32")])


@pytest.mark.parametrize("build, reason", [
    (lambda: resize_model((1, 2, 4, 4), 18, scales=[1, 1, 0.5, 2], roi=[0, 0, 0.1, 0.1, 1, 1, 0.9, 0.9],
                          mode="linear", antialias=1, coordinate_transformation_mode="tf_crop_and_resize"),
     "antialias=1 with tf_crop_and_resize is not supported"),
    (lambda: resize_model((1, 2, 4, 4), 18, scales=[1, 1, 2, 2], mode="linear",
                          coordinate_transformation_mode="half_pixel_symmetric"),
     "coordinate_transformation_mode 'half_pixel_symmetric' is not supported"),
    (lambda: resize_model((1, 2, 4, 4), 13, scales=[1, 1, 2, 2], sizes=[1, 2, 8, 8]),
     "exactly one of scales and sizes must be given, both are"),
    (lambda: resize_model((1, 2, 4, 4), 13), "neither is"),
    (lambda: resize_model((1, 2, 4, 4), 13, scales=[1, 1, 0.1, 2]), "has an empty axis"),
    (lambda: resize_model((1, 2, 4, 4), 13, scales=[1, 1, 2]), r"need one entry per resized axis \(4\)"),
    (lambda: resize_model((1, 2, 4, 4), 13, scales=[1, 1, 2, 2], mode="bicubic"), "mode 'bicubic' is not supported"),
    (lambda: resize_model((1, 2, 4, 4), 18, sizes=[8, 8], axes=[2, 3], keep_aspect_ratio_policy="fit"),
     "keep_aspect_ratio_policy 'fit' is not supported"),
    (lambda: resize_model((1, 2, 4, 4), 13, scales=[1, 1, 2, 2], mode="linear", dtype="int32"),
     "must be a float tensor"),
    (lambda: model([node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 0.5, 2.0])], {"x": (1, 2, 4, 4)}, ["y"],
                   opset=7), "scale 0.5 of axis 2 must be at least 1"),
    (lambda: model([node("Upsample", ["x", "s"], ["y"])], {"x": (1, 2, 4, 4)}, ["y"],
                   {"s": np.array([1, 1, 2, 2], np.float32)}, opset=10), "supported at opsets 7 to 8, 9 to 9, not 10"),
    (lambda: model([node("Resize", ["x", "", "", "sizes"], ["y"])], {"x": (1, 2, 4, 4), "sizes": (4,)}, ["y"],
                   dtypes={"sizes": "int64"}),
     r"its sizes \(input 3, 'sizes'\) must be a constant, but it is computed at"),
    (lambda: model([node("Resize", ["x", "roi", "s"], ["y"], coordinate_transformation_mode="tf_crop_and_resize")],
                   {"x": (1, 2, 4, 4), "roi": (8,)}, ["y"], {"s": np.array([1, 1, 2, 2], np.float32)}),
     r"its roi \(input 1, 'roi'\) must be a constant"),
])
def test_what_it_cannot_take_is_refused_with_the_reason(build, reason):
    with pytest.raises(UnsupportedModelError, match=reason):
        import_onnx(build())

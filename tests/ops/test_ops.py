"""Operators: default schedules against numpy, on the reference workloads and on awkward shapes.

Every ResNet-18 conv2d (C1-C12) and MobileNet depthwise conv2d (D1-D9) runs at its full shape
(batch 1): each builds in well under a second and the references take about 0.1 s, so no shape is
scaled down. Each result is compared twice: with the operator's own ``reference`` and with a
float64 reference written here as an explicit sum over kernel taps, which shares no code with it.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensortune as tt
from tensortune import ops, workloads
from tensortune.errors import ShapeError
from tensortune.target import ISA, Target

RESNET18 = workloads.load("resnet18")
MOBILENET = workloads.load("mobilenet")


# --------------------------------------------------------------------------- independent references

def conv2d_taps(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """float64 NCHW conv2d: for each kernel tap (r, q), add the strided input window times w[:, :, r, q]."""
    n, c, h, wd = x.shape
    o, c2, kh, kw = w.shape
    assert c == c2
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad))
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    out = np.zeros((n, o, oh, ow))
    for r in range(kh):
        for q in range(kw):
            window = xp[:, :, r:r + stride * (oh - 1) + 1:stride, q:q + stride * (ow - 1) + 1:stride]
            out += np.tensordot(w[:, :, r, q].astype(np.float64), window, axes=([1], [1])).transpose(1, 0, 2, 3)
    return out


def depthwise_taps(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """float64 depthwise conv2d (channel multiplier 1), again as a sum over kernel taps."""
    n, c, h, wd = x.shape
    _, one, kh, kw = w.shape
    assert one == 1
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    xp = np.zeros((n, c, h + 2 * pad, wd + 2 * pad))
    xp[:, :, pad:pad + h, pad:pad + wd] = x
    out = np.zeros((n, c, oh, ow))
    for r in range(kh):
        for q in range(kw):
            window = xp[:, :, r:r + stride * (oh - 1) + 1:stride, q:q + stride * (ow - 1) + 1:stride]
            out += window * w[None, :, 0, r, q, None, None].astype(np.float64)
    return out


def tol(reduction_length: int) -> dict:
    """float32 sums of ``reduction_length`` products of values in [-1, 1] (errors grow like its root)."""
    return dict(rtol=1e-4, atol=2e-5 * np.sqrt(reduction_length) + 1e-6)


def run_default(op: ops.Operator, seed: int = 0, target: Target | None = None):
    """Build the default schedule (IR verified after every pass), run it; return (inputs, output)."""
    sch = op.default_schedule(target)
    tt.lower(sch, op.args, verify=True)
    m = tt.build(sch, op.args, target=target)
    ins = op.random_inputs(seed)
    out = np.full(op.output.shape, np.nan, op.output.dtype.numpy)  # NaN: unwritten elements show up
    m(*ins, out)
    assert out.dtype == ins[0].dtype
    return ins, out


# --------------------------------------------------------------------------- reference self-checks

def test_tap_references_agree_with_a_direct_loop_on_a_tiny_case() -> None:
    """The tap-sum references themselves, against the definition written as six nested loops."""
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (2, 3, 5, 4))
    w = rng.uniform(-1, 1, (2, 3, 3, 2))
    stride, pad = 2, 1
    out = np.zeros((2, 2, 3, 3))
    for n in range(2):
        for o in range(2):
            for y in range(3):
                for xx in range(3):
                    for c in range(3):
                        for r in range(3):
                            for q in range(2):
                                iy, ix = y * stride + r - pad, xx * stride + q - pad
                                if 0 <= iy < 5 and 0 <= ix < 4:
                                    out[n, o, y, xx] += x[n, c, iy, ix] * w[o, c, r, q]
    np.testing.assert_allclose(conv2d_taps(x, w, stride, pad), out, rtol=1e-12, atol=1e-12)
    dw = rng.uniform(-1, 1, (3, 1, 3, 2))
    expected = np.stack([conv2d_taps(x[:, c:c + 1], dw[c:c + 1], stride, pad)[:, 0] for c in range(3)], axis=1)
    np.testing.assert_allclose(depthwise_taps(x, dw, stride, pad), expected, rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- workload tables

def test_workload_tables_have_every_row() -> None:
    assert list(RESNET18) == [f"C{i}" for i in range(1, 13)]
    assert list(MOBILENET) == [f"D{i}" for i in range(1, 10)]


@pytest.mark.parametrize("name", list(RESNET18))
def test_resnet18_row_is_consistent_and_flops_match(name: str) -> None:
    w = RESNET18[name]
    assert w["oh"] == (w["h"] + 2 * w["pad"] - w["k"]) // w["stride"] + 1
    assert w["ow"] == (w["w"] + 2 * w["pad"] - w["k"]) // w["stride"] + 1
    assert w["flops"] == 2 * w["oh"] * w["ow"] * w["oc"] * w["ic"] * w["k"] * w["k"]  # the formula in the CSV
    op = ops.conv2d_nchw(1, w["ic"], w["h"], w["w"], w["oc"], w["k"], stride=w["stride"], pad=w["pad"])
    assert op.output.shape == (1, w["oc"], w["oh"], w["ow"])
    assert op.flops == w["flops"]


@pytest.mark.parametrize("name", list(MOBILENET))
def test_mobilenet_row_is_consistent_and_flops_match(name: str) -> None:
    w = MOBILENET[name]
    assert w["oh"] == (w["h"] + 2 * w["pad"] - w["k"]) // w["stride"] + 1
    assert w["ow"] == (w["w"] + 2 * w["pad"] - w["k"]) // w["stride"] + 1
    assert w["flops"] == 2 * w["oh"] * w["ow"] * w["c"] * w["k"] * w["k"]  # the formula in the CSV
    op = ops.depthwise_conv2d_nchw(1, w["c"], w["h"], w["w"], w["k"], stride=w["stride"], pad=w["pad"])
    assert op.output.shape == (1, w["c"], w["oh"], w["ow"])
    assert op.flops == w["flops"]


@pytest.mark.parametrize("name", list(RESNET18))
def test_resnet18_conv2d_default_schedule(name: str) -> None:
    w = RESNET18[name]
    op = ops.conv2d_nchw(1, w["ic"], w["h"], w["w"], w["oc"], w["k"], stride=w["stride"], pad=w["pad"])
    ins, out = run_default(op)
    t = tol(w["ic"] * w["k"] ** 2)
    np.testing.assert_allclose(out, conv2d_taps(*ins, w["stride"], w["pad"]), **t)
    np.testing.assert_allclose(out, op.reference(*ins), **t)


@pytest.mark.parametrize("name", list(MOBILENET))
def test_mobilenet_depthwise_default_schedule(name: str) -> None:
    w = MOBILENET[name]
    op = ops.depthwise_conv2d_nchw(1, w["c"], w["h"], w["w"], w["k"], stride=w["stride"], pad=w["pad"])
    ins, out = run_default(op)
    t = tol(w["k"] ** 2)
    np.testing.assert_allclose(out, depthwise_taps(*ins, w["stride"], w["pad"]), **t)
    np.testing.assert_allclose(out, op.reference(*ins), **t)


@pytest.mark.parametrize("layout", ["nchwc", "spatial_pack", "packed_io"])
@pytest.mark.parametrize("name", list(RESNET18))
def test_resnet18_packed_conv2d_default_schedule(name: str, layout: str) -> None:
    """Channel-blocked convolutions: canonical inputs -> ``prepare`` (weight packing) -> kernel."""
    w = RESNET18[name]
    shape = (1, w["ic"], w["h"], w["w"], w["oc"], w["k"])
    if layout == "nchwc":
        op = ops.conv2d_nchwc(*shape, stride=w["stride"], pad=w["pad"], icb=4 if w["ic"] % 4 == 0 else 1, ocb=16)
    elif layout == "spatial_pack":
        op = ops.conv2d_spatial_pack(*shape, stride=w["stride"], pad=w["pad"], ocb=16)
    else:
        op = ops.conv2d_nchwc_packed(*shape, stride=w["stride"], pad=w["pad"])  # one vector of this machine
    assert op.flops == w["flops"]
    canonical = op.random_inputs(0)
    assert [a.shape for a in canonical] == [(1, w["ic"], w["h"], w["w"]), (w["oc"], w["ic"], w["k"], w["k"])]
    m = tt.build(op.default_schedule(), op.args)
    out = np.full(op.output.shape, np.nan, np.float32)
    m(*op.prepare(*canonical), out)
    t = tol(w["ic"] * w["k"] ** 2)
    np.testing.assert_allclose(out, op.reference(*canonical), **t)
    expected = conv2d_taps(*canonical, w["stride"], w["pad"])
    if layout == "packed_io":  # [N, O/ob, OH, OW, ob] back to NCHW
        out = out.transpose(0, 1, 4, 2, 3).reshape(expected.shape)
    np.testing.assert_allclose(out, expected, **t)


@pytest.mark.parametrize("name", list(MOBILENET))
def test_mobilenet_packed_depthwise_default_schedule(name: str) -> None:
    w = MOBILENET[name]
    op = ops.depthwise_conv2d_nchwc(1, w["c"], w["h"], w["w"], w["k"], stride=w["stride"], pad=w["pad"], cb=16)
    assert op.flops == w["flops"]
    canonical = op.random_inputs(0)
    assert canonical[1].shape == (w["c"], 1, w["k"], w["k"])
    m = tt.build(op.default_schedule(), op.args)
    out = np.full(op.output.shape, np.nan, np.float32)
    m(*op.prepare(*canonical), out)
    np.testing.assert_allclose(out, depthwise_taps(*canonical, w["stride"], w["pad"]), **tol(w["k"] ** 2))


@pytest.mark.parametrize("make", [
    lambda: ops.conv2d_nchwc(1, 6, 8, 8, 16, 3, icb=4, ocb=16),        # icb does not divide C
    lambda: ops.conv2d_nchwc(1, 8, 8, 8, 24, 3, icb=4, ocb=16),        # ocb does not divide O
    lambda: ops.conv2d_spatial_pack(1, 8, 8, 8, 20, 3, ocb=8),
    lambda: ops.conv2d_nchwc_packed(1, 8, 8, 8, 16, 3, icb=16, ocb=16),  # icb does not divide C
    lambda: ops.depthwise_conv2d_nchwc(1, 24, 8, 8, 3, cb=16),
    lambda: ops.conv2d_spatial_pack(1, 8, 2, 2, 16, 5, ocb=16),        # kernel larger than the input
    lambda: ops.depthwise_conv2d_nchwc(1, 16, 8, 8, 3, stride=0, cb=16),
])
def test_packed_conv_bad_shapes_raise_shape_error(make) -> None:
    with pytest.raises(ShapeError):
        make()


# --------------------------------------------------------------------------- conv2d variants

@pytest.mark.parametrize("bias,relu", [(True, False), (False, True), (True, True)])
def test_conv2d_bias_relu_epilogue(bias: bool, relu: bool) -> None:
    op = ops.conv2d_nchw(2, 5, 9, 11, 6, 3, stride=1, pad=1, bias=bias, relu=relu)
    ins, out = run_default(op, seed=3)
    ref = conv2d_taps(ins[0], ins[1], 1, 1)
    if bias:
        ref = ref + ins[2][None, :, None, None]
    if relu:
        ref = np.maximum(ref, 0)
        assert (out == 0).any() and (out > 0).any()  # the ReLU really clips something here
    np.testing.assert_allclose(out, ref, **tol(45))
    np.testing.assert_allclose(out, op.reference(*ins), **tol(45))


@pytest.mark.parametrize("bias,relu", [(True, False), (True, True)])
def test_depthwise_bias_relu_epilogue(bias: bool, relu: bool) -> None:
    op = ops.depthwise_conv2d_nchw(1, 7, 10, 9, 3, stride=2, pad=1, bias=bias, relu=relu)
    ins, out = run_default(op, seed=4)
    ref = depthwise_taps(ins[0], ins[1], 2, 1) + ins[2][None, :, None, None]
    if relu:
        ref = np.maximum(ref, 0)
    np.testing.assert_allclose(out, ref, **tol(9))
    np.testing.assert_allclose(out, op.reference(*ins), **tol(9))


@pytest.mark.parametrize("shape", [
    # N, C, H, W, O, KH, KW, stride, pad
    (1, 3, 7, 7, 5, 1, 1, 1, 0),     # 1x1, output width 7: no vector-width divisor
    (2, 4, 13, 10, 7, 3, 2, 2, 1),   # batch 2, non-square kernel, odd sizes, prime channel count
    (1, 2, 5, 5, 3, 5, 5, 1, 2),     # kernel as large as the input
    (1, 1, 1, 1, 1, 3, 3, 1, 1),     # one pixel, all taps but the centre read padding
    (1, 3, 11, 11, 4, 3, 3, 3, 0),   # stride larger than the padding, windows do not overlap
])
def test_conv2d_odd_shapes(shape) -> None:
    N, C, H, W, O, KH, KW, stride, pad = shape
    op = ops.conv2d_nchw(N, C, H, W, O, KH, KW, stride=stride, pad=pad)
    ins, out = run_default(op, seed=5)
    np.testing.assert_allclose(out, conv2d_taps(*ins, stride, pad), **tol(C * KH * KW))
    assert op.flops == 2 * N * O * out.shape[2] * out.shape[3] * C * KH * KW


def test_depthwise_odd_shape_non_square_kernel() -> None:
    op = ops.depthwise_conv2d_nchw(2, 5, 9, 6, 3, 1, stride=2, pad=2)
    ins, out = run_default(op, seed=6)
    np.testing.assert_allclose(out, depthwise_taps(*ins, 2, 2), **tol(3))


def test_conv2d_float64() -> None:
    op = ops.conv2d_nchw(1, 8, 12, 12, 6, 3, stride=1, pad=1, dtype="float64")
    ins, out = run_default(op, seed=7)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, conv2d_taps(*ins, 1, 1), rtol=1e-12, atol=1e-12)


def test_depthwise_float64() -> None:
    op = ops.depthwise_conv2d_nchw(1, 6, 10, 10, 3, stride=2, pad=1, dtype="float64")
    ins, out = run_default(op, seed=8)
    np.testing.assert_allclose(out, depthwise_taps(*ins, 2, 1), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- matmul and dense

@pytest.mark.parametrize("M,N,K", [(64, 64, 64), (37, 53, 29), (1, 1, 1), (1, 100, 7), (50, 3, 200)])
def test_matmul_default_schedule(M: int, N: int, K: int) -> None:
    op = ops.matmul(M, N, K)
    (a, b), out = run_default(op, seed=M + N + K)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, **tol(K))
    np.testing.assert_allclose(out, op.reference(a, b), **tol(K))
    assert op.flops == 2 * M * N * K


@pytest.mark.parametrize("bias,relu", [(True, False), (False, True), (True, True)])
def test_matmul_bias_relu(bias: bool, relu: bool) -> None:
    op = ops.matmul(37, 53, 29, bias=bias, relu=relu)
    ins, out = run_default(op, seed=9)
    ref = ins[0].astype(np.float64) @ ins[1]
    if bias:
        assert ins[2].shape == (53,)
        ref = ref + ins[2]
    if relu:
        ref = np.maximum(ref, 0)
        assert (out == 0).any() and (out > 0).any()
    np.testing.assert_allclose(out, ref, **tol(29))


def test_matmul_transpose_b() -> None:
    op = ops.matmul(20, 24, 17, transpose_b=True)
    (a, b), out = run_default(op, seed=10)
    assert b.shape == (24, 17)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b.T, **tol(17))


@pytest.mark.parametrize("bias,relu", [(True, False), (False, False), (True, True)])
@pytest.mark.parametrize("batch,inp,outp", [(1, 512, 1000), (5, 33, 19)])
def test_dense(batch: int, inp: int, outp: int, bias: bool, relu: bool) -> None:
    op = ops.dense(batch, inp, outp, bias=bias, relu=relu)
    ins, out = run_default(op, seed=11)
    data, weight = ins[:2]
    assert weight.shape == (outp, inp)
    ref = data.astype(np.float64) @ weight.T
    if bias:
        ref = ref + ins[2]
    if relu:
        ref = np.maximum(ref, 0)
    np.testing.assert_allclose(out, ref, **tol(inp))
    assert op.flops == 2 * batch * inp * outp


@pytest.mark.parametrize("M,N,K", [(37, 53, 29), (16, 16, 16)])
def test_matmul_float64(M: int, N: int, K: int) -> None:
    op = ops.matmul(M, N, K, dtype="float64", bias=True, relu=True)
    ins, out = run_default(op, seed=12)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, np.maximum(ins[0] @ ins[1] + ins[2], 0), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- other targets

def _other_targets() -> list[Target]:
    """Targets this machine can also run: the scalar one, and AVX2 on an AVX-512 host."""
    host = Target.host()
    out = [Target(ISA.SCALAR, host.num_cores, host.arch)]
    if host.isa is ISA.AVX512:
        out.append(Target(ISA.AVX2, host.num_cores, host.arch))
    return out


@pytest.mark.parametrize("target", _other_targets(), ids=str)
def test_default_schedules_for_other_targets(target: Target) -> None:
    """Default schedules depend on the target's vector width; each must stay correct."""
    mm = ops.matmul(37, 53, 29, bias=True, relu=True, target=target)
    ins, out = run_default(mm, seed=13, target=target)
    np.testing.assert_allclose(out, np.maximum(ins[0].astype(np.float64) @ ins[1] + ins[2], 0), **tol(29))
    conv = ops.conv2d_nchw(1, 6, 14, 14, 10, 3, stride=1, pad=1)
    ins, out = run_default(conv, seed=14, target=target)
    np.testing.assert_allclose(out, conv2d_taps(*ins, 1, 1), **tol(54))
    dw = ops.depthwise_conv2d_nchw(1, 6, 14, 14, 3, stride=2, pad=1)
    ins, out = run_default(dw, seed=15, target=target)
    np.testing.assert_allclose(out, depthwise_taps(*ins, 2, 1), **tol(9))


# --------------------------------------------------------------------------- operator plumbing

def test_random_inputs_are_seeded_and_shaped() -> None:
    op = ops.conv2d_nchw(1, 3, 8, 8, 4, 3, pad=1, bias=True)
    a, b = op.random_inputs(0), op.random_inputs(0)
    assert [x.shape for x in a] == [(1, 3, 8, 8), (4, 3, 3, 3), (4,)]
    assert all(x.dtype == np.float32 for x in a)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], op.random_inputs(1)[0])
    assert op.empty_output().shape == (1, 4, 8, 8)
    assert [t.name for t in op.args][-1] == op.output.name


PARTS = [  # operator, {role: stage name}, epilogue stage names
    (lambda: ops.matmul(8, 16, 4), {"PACKED_WEIGHT": "B_packed", "ACCUMULATOR": "matmul"}, []),
    (lambda: ops.dense(2, 8, 16, relu=True), {"PACKED_WEIGHT": "B_packed", "ACCUMULATOR": "dense_acc"},
     ["dense_bias"]),
    (lambda: ops.conv2d_nchw(1, 3, 8, 8, 4, 3, pad=1, relu=True), {"PADDED_INPUT": "data_pad",
                                                                     "ACCUMULATOR": "conv2d_acc"}, []),
    (lambda: ops.depthwise_conv2d_nchw(1, 4, 8, 8, 3, bias=True), {"ACCUMULATOR": "depthwise_conv2d_acc"}, []),
    (lambda: ops.conv2d_nchwc(1, 4, 8, 8, 8, 3, pad=1, icb=2, ocb=4), {"PACKED_INPUT": "data_pack",
                                                                      "ACCUMULATOR": "conv"}, []),
    (lambda: ops.conv2d_nchwc_packed(1, 4, 8, 8, 8, 3, pad=1, icb=4, ocb=4), {"PADDED_INPUT": "data_pad",
                                                                             "ACCUMULATOR": "conv2d"}, []),
    (lambda: ops.conv2d_spatial_pack(1, 4, 8, 8, 8, 1, ocb=4), {"ACCUMULATOR": "conv"}, []),
    (lambda: ops.depthwise_conv2d_nchwc(1, 8, 8, 8, 3, pad=1, cb=4), {"PACKED_INPUT": "data_pack",
                                                                      "ACCUMULATOR": "conv"}, []),
]


@pytest.mark.parametrize("make,parts,epilogue", PARTS)
def test_operators_name_their_parts(make, parts, epilogue) -> None:
    """Schedules find stages by role; the stages keep the names the generated code has always had."""
    op = make()
    assert {role.name: t.name for role, t in op.parts.items()} == parts
    assert [t.name for t in op.epilogue] == epilogue
    stages = tt.create_schedule(op.output).stages
    assert all(t.name in stages for t in (*op.parts.values(), *op.epilogue))


def test_a_missing_part_is_an_operator_error_naming_the_parts() -> None:
    op = ops.conv2d_nchw(1, 3, 8, 8, 4, 3, pad=0)
    with pytest.raises(ops.OperatorError, match="'conv2d' has no padded input \\(its parts: accumulator\\)"):
        op.part(ops.Part.PADDED_INPUT)
    with pytest.raises(ops.OperatorError, match="parts map a Part"):
        ops.Operator("bad", op.inputs, op.output, 1, op.reference, op._schedule, parts={"conv": op.output})
    with pytest.raises(TypeError):
        op.parts[ops.Part.PADDED_INPUT] = op.output  # the mapping is read-only


def test_default_schedule_can_be_lowered_twice_to_the_same_ir() -> None:
    op = ops.matmul(37, 53, 29, bias=True, relu=True)
    sch = op.default_schedule()
    assert str(tt.lower(sch, op.args)) == str(tt.lower(sch, op.args))


# --------------------------------------------------------------------------- bad shapes

@pytest.mark.parametrize("kwargs", [
    dict(H=3, W=3, KH=7, pad=1),           # 7-wide kernel, 5-wide padded input
    dict(H=3, W=8, KH=5, pad=0),           # too tall only
    dict(H=8, W=3, KH=3, KW=5, pad=0),     # too wide only
    dict(H=8, W=8, KH=3, stride=0),        # stride 0
    dict(H=8, W=8, KH=3, stride=-1),
    dict(H=8, W=8, KH=3, pad=-1),
    dict(H=8, W=8, KH=0),                  # empty kernel
])
def test_conv2d_bad_shapes_raise_shape_error(kwargs) -> None:
    args = dict(N=1, C=2, O=3, stride=1, pad=0) | kwargs
    with pytest.raises(ShapeError):
        ops.conv2d_nchw(**args)


@pytest.mark.parametrize("kwargs", [
    dict(H=2, W=2, KH=5, pad=1),
    dict(H=8, W=8, KH=3, stride=0),
    dict(H=8, W=8, KH=3, pad=-2),
])
def test_depthwise_bad_shapes_raise_shape_error(kwargs) -> None:
    args = dict(N=1, C=2, stride=1, pad=0) | kwargs
    with pytest.raises(ShapeError):
        ops.depthwise_conv2d_nchw(**args)


def test_conv2d_kernel_exactly_fitting_the_padded_input_is_accepted() -> None:
    op = ops.conv2d_nchw(1, 1, 3, 3, 1, 5, pad=1)  # 5-wide kernel, 5-wide padded input: one output
    assert op.output.shape == (1, 1, 1, 1)


@pytest.mark.parametrize("M,N,K", [(0, 4, 4), (4, 0, 4), (4, 4, 0)])
def test_matmul_empty_dimension_raises_shape_error(M: int, N: int, K: int) -> None:
    with pytest.raises(ShapeError):
        ops.matmul(M, N, K)

"""Winograd convolution: the transforms, the operator's default schedule and random template configs on
every ResNet-18 3x3 stride-1 layer, against numpy, with a rounding-error tolerance derived below.

Tolerance. Against an exact (float64) reference, every float32 operation of the kernel rounds with a
relative error of at most u = 2^-24, relative to magnitudes that the same computation run on absolute
values bounds: ``y_abs = |A^T| [(|G| |g| |G^T|) * (|B^T| |d| |B|)] |A|`` summed over the input channels.
An output passes through k = C + 4 alpha roundings (the sum over C input channels in the product, at
most alpha terms in each of the four one-dimensional transforms), so ``|error| <= k u y_abs`` in the
worst case; rounding errors of independent signs add like a random walk, which gives the tolerance
used here, ``sqrt(k) u y_abs`` (Higham & Mary, "A new approach to probabilistic rounding error
analysis", 2019). It grows with the input channels and, through y_abs, with the transforms' entries
(F(4x4) has larger ones than F(2x2)); measured errors stay below 0.3 u y_abs.
"""
from __future__ import annotations

import random
import zlib
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import sliding_window_view

import tensortune as tt
from tensortune import te, workloads
from tensortune.autotvm.catalog import create_task, task_from_workload
from tensortune.autotvm.templates.winograd import TILE_SIZES
from tensortune.errors import ScheduleError, ShapeError
from tensortune.ops import conv2d_nchw, conv2d_nchwc_packed, conv2d_winograd_nchw, conv2d_winograd_nchwc
from tensortune.ops.winograd import WinogradPlan, schedule_winograd, winograd_tiles, winograd_weight
from tensortune.ops.winograd_transforms import winograd_matrices

from strategies import random_schedule

TEMPLATE = "conv2d_winograd_nchwc_packed"
NCHW_TEMPLATE = "conv2d_winograd_nchw"  # the same stages with NCHW input and output
#: the ResNet-18 layers Winograd computes: every 3x3, stride-1 convolution of the table
LAYERS = [name for name, r in workloads.load("resnet18").items() if r["k"] == 3 and r["stride"] == 1]


def test_the_resnet18_layers_are_the_four_3x3_stride_1_convolutions():
    assert LAYERS == ["C2", "C6", "C9", "C12"]


# ------------------------------------------------------------------------------------ numpy model


def winograd_numpy(x: np.ndarray, w: np.ndarray, m: int, pad: int, absolute: bool = False) -> np.ndarray:
    """NCHW Winograd F(m x m, 3 x 3) in float64 numpy; with ``absolute``, of |x| and |w| through the
    matrices' absolute values (``y_abs``, the bound of every intermediate magnitude)."""
    mats = winograd_matrices(m)
    f = np.abs if absolute else (lambda a: a)
    AT, G, BT = (f(mats.array(name)) for name in ("AT", "G", "BT"))
    a, (n, c, h, wd), o = m + 2, x.shape, w.shape[0]
    oh, ow, rows, cols = winograd_tiles(h, wd, pad, m)
    xp = np.zeros((n, c, rows * m + 2, cols * m + 2))
    xp[:, :, pad:pad + h, pad:pad + wd] = f(x)
    tiles = sliding_window_view(xp, (a, a), axis=(2, 3))[:, :, ::m, ::m]  # [N, C, rows, cols, a, a]
    v = np.einsum("ik,nchwkl,jl->nchwij", BT, tiles, BT, optimize=True)
    u = np.einsum("ik,ockl,jl->ocij", G, f(w).astype(np.float64), G, optimize=True)
    y = np.einsum("ik,nohwkl,jl->nohwij", AT, np.einsum("nchwij,ocij->nohwij", v, u, optimize=True), AT,
                  optimize=True)
    return y.transpose(0, 1, 2, 4, 3, 5).reshape(n, o, rows * m, cols * m)[:, :, :oh, :ow]


def blocked(a: np.ndarray, cb: int) -> np.ndarray:
    n, c, h, w = a.shape
    return a.reshape(n, c // cb, cb, h, w).transpose(0, 1, 3, 4, 2)


def check_against_numpy(out: np.ndarray, canonical: list[np.ndarray], m: int, pad: int, what: str) -> None:
    """``out`` (blocked, or NCHW) equals the float64 convolution within ``sqrt(k) u y_abs`` (see the module
    docstring)."""
    x, w = (a.astype(np.float64) for a in canonical)
    layout = (lambda a: a) if out.ndim == 4 else (lambda a: blocked(a, out.shape[-1]))
    exact = layout(conv2d_nchw(*x.shape, w.shape[0], 3, pad=pad, dtype="float64").reference(x, w))
    k = x.shape[1] + 4 * (m + 2)
    tol = np.sqrt(k) * 2.0 ** -24 * layout(winograd_numpy(x, w, m, pad, absolute=True))
    err = np.abs(out.astype(np.float64) - exact)
    assert not np.isnan(out).any(), f"{what}: the kernel left elements unwritten"
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert (err <= tol).all(), f"{what}: error {err[worst]:.3g} > tolerance {tol[worst]:.3g} at {worst}"


def run(sch, op, canonical: list[np.ndarray]) -> np.ndarray:
    out = np.full(op.output.shape, np.nan, op.output.dtype.numpy)
    tt.build(sch, op.args)(*op.prepare(*canonical), out)
    return out


# ------------------------------------------------------------------------------------ transforms


@pytest.mark.parametrize("m", [2, 4, 6])
def test_transforms_compute_the_correlation_exactly(m):
    """``AT [(G g) * (BT d)]`` is the correlation of d with g, in exact fractions."""
    mats = winograd_matrices(m)
    rng = random.Random(m)
    for _ in range(3):
        d = [Fraction(rng.randint(-9, 9)) for _ in range(mats.alpha)]
        g = [Fraction(rng.randint(-9, 9)) for _ in range(3)]
        gg = [sum(row[k] * g[k] for k in range(3)) for row in mats.G]
        bd = [sum(row[k] * d[k] for k in range(mats.alpha)) for row in mats.BT]
        y = [sum(row[j] * gg[j] * bd[j] for j in range(mats.alpha)) for row in mats.AT]
        assert y == [sum(d[i + k] * g[k] for k in range(3)) for i in range(m)]


@pytest.mark.parametrize("m", [2, 4, 6])
def test_numpy_model_is_the_convolution(m):
    rng = np.random.default_rng(m)
    x, w = rng.uniform(-1, 1, (2, 3, 9, 11)), rng.uniform(-1, 1, (4, 3, 3, 3))
    for pad in (0, 1):
        ref = conv2d_nchw(2, 3, 9, 11, 4, 3, pad=pad, dtype="float64").reference(x, w)
        np.testing.assert_allclose(winograd_numpy(x, w, m, pad), ref, rtol=1e-12, atol=1e-12)


def test_unrolled_transforms_hold_only_their_non_zero_terms():
    """The selects over transform rows fold: no select, no constant table and no multiplication by 0 or
    1 is left in the C, and the transforms and the padding are explicit vector code."""
    op = conv2d_winograd_nchwc(1, 16, 13, 13, 16, tile=4, target=tt.Target.host())
    src = tt.build(op.default_schedule(), op.args).source
    body = src[src.index("static void"):src.index("int32_t kernel(")]
    assert body.count("?") == 1  # the zero padding of the input tiles, one ternary on whole vectors
    for waste in ("0.0f *", "* 0.0f", "1.0f *", "* 1.0f", "== 0"):
        assert waste not in body, waste
    assert "#pragma omp simd" not in body
    assert "4.0f * " in body and "8.0f * " in body  # literal coefficients of F(4x4, 3x3)


# ------------------------------------------------------------------------------------ against numpy


@pytest.mark.slow
@pytest.mark.parametrize("declare", [conv2d_winograd_nchwc, conv2d_winograd_nchw])
@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("layer", LAYERS)
def test_default_schedule_matches_numpy_on_resnet18(layer, m, declare):
    r = workloads.get(f"resnet18:{layer}")
    op = declare(1, r["ic"], r["h"], r["w"], r["oc"], 3, 1, r["pad"], tile=m)
    canonical = op.random_inputs(zlib.crc32(layer.encode()))
    check_against_numpy(run(op.default_schedule(), op, canonical), canonical, m, r["pad"], f"{layer} m={m}")


@pytest.mark.slow
@pytest.mark.parametrize("template", [TEMPLATE, NCHW_TEMPLATE])
@pytest.mark.parametrize("layer", LAYERS)
def test_random_template_configs_match_numpy_on_resnet18(layer, template):
    """Two random configs per layer, and one of a tile size taken in turn, so that the layers cover all."""
    task = task_from_workload(f"resnet18:{layer}", template)
    canonical = task.make_inputs(1)
    rng = random.Random(zlib.crc32(layer.encode()))
    size = TILE_SIZES[LAYERS.index(layer) % len(TILE_SIZES)]
    of_size = next(i for i in task.space.sample(60, rng) if task.config(i)["tile_size"] == size)
    picked = task.space.sample(2, rng, exclude={of_size}) + [of_size]
    for index in picked:
        sch, op = task.instantiate(index)
        out = np.full(op.output.shape, np.nan, np.float32)
        tt.build(sch, op.args)(*task.kernel_inputs(index, canonical), out)
        check_against_numpy(out, canonical, task.config(index)["tile_size"], task.args[-1],
                            f"{layer} {task.config(index)}")


@pytest.mark.slow
@settings(max_examples=10, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LAYERS), st.sampled_from([TEMPLATE, NCHW_TEMPLATE]), st.integers(0, 2 ** 62))
def test_hypothesis_template_configs_match_numpy_on_resnet18_geometries(layer, template, draw):
    """Configs of either template drawn by hypothesis (any point of the space) on each ResNet-18 layer's image size,
    padding and tiles, with a quarter of its channels (still several channel blocks; the full layers are above)."""
    r = workloads.get(f"resnet18:{layer}")
    task = create_task("conv2d", {"IC": r["ic"] // 4, "OC": r["oc"] // 4, "H": r["h"], "W": r["w"], "K": 3,
                                  "pad": r["pad"]}, template=template)
    index = draw % len(task.space)
    canonical = task.make_inputs(1)
    sch, op = task.instantiate(index)
    out = np.full(op.output.shape, np.nan, np.float32)
    tt.build(sch, op.args)(*task.kernel_inputs(index, canonical), out)
    check_against_numpy(out, canonical, task.config(index)["tile_size"], task.args[-1],
                        f"{layer}/4 {task.config(index)}")


@st.composite
def winograd_cases(draw) -> tuple[tuple[int, int], object, object]:
    """A small Winograd operator (any tile size, blocks, padding, register tile) under a random schedule of
    ``strategies.random_schedule``: transform loops left rolled keep their selects, and must still be right."""
    m, pad = draw(st.sampled_from([2, 4, 6])), draw(st.integers(0, 2))
    h, w = draw(st.integers(3 - min(pad, 1), 9)), draw(st.integers(3 - min(pad, 1), 9))
    icb, ocb = draw(st.sampled_from([1, 2, 4])), draw(st.sampled_from([1, 2, 4]))
    shape = (draw(st.integers(1, 2)), icb * draw(st.integers(1, 2)), h, w, ocb * draw(st.integers(1, 2)))
    declare = draw(st.sampled_from([conv2d_winograd_nchwc, conv2d_winograd_nchw]))
    op = declare(*shape, 3, 1, pad, tile=m, icb=icb, ocb=ocb, p_tile=draw(st.integers(1, 3)))
    return (m, pad), op, random_schedule(draw, op.output)


@pytest.mark.slow
@settings(max_examples=16, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(winograd_cases())
def test_random_schedules_match_numpy(case):
    (m, pad), op, sch = case
    canonical = op.random_inputs(0)
    check_against_numpy(run(sch, op, canonical), canonical, m, pad, f"{op.output.shape} m={m} steps {sch}")


EDGES = [  # (N, C, H, W, O, pad, m): partial tiles, blocks of all channels, batches, no padding
    (1, 16, 13, 13, 24, 1, 4),  # 13x13: m divides neither side
    (1, 16, 7, 7, 16, 1, 2),  # 7x7: one partial tile per row and column
    (2, 3, 13, 11, 12, 1, 4),  # C and O not multiples of a vector: one block of all channels; batch 2
    (1, 8, 9, 12, 8, 0, 4),  # no padding: 7x10 output
    (1, 16, 2, 2, 8, 1, 4),  # a single partial tile
    (1, 8, 14, 14, 16, 1, 6),  # F(6x6, 3x3): 14 = 2 tiles of 6 and a partial one
]


@pytest.mark.slow
@pytest.mark.parametrize("declare", [conv2d_winograd_nchwc, conv2d_winograd_nchw])
@pytest.mark.parametrize("N, C, H, W, O, pad, m", EDGES)
def test_edge_shapes_match_numpy(N, C, H, W, O, pad, m, declare):
    op = declare(N, C, H, W, O, 3, 1, pad, tile=m)
    canonical = op.random_inputs(3)
    check_against_numpy(run(op.default_schedule(), op, canonical), canonical, m, pad, f"{(N, C, H, W, O, pad, m)}")
    np.testing.assert_allclose(run(op.default_schedule(), op, canonical), op.reference(*canonical), rtol=1e-4,
                               atol=1e-4)  # the operator's own reference is the direct convolution, in its layout


def test_operator_is_a_drop_in_for_the_direct_convolution():
    """Same layouts, canonical inputs, reference and FLOPs as ``conv2d_nchwc_packed``."""
    wino, direct = conv2d_winograd_nchwc(1, 32, 14, 14, 48, 3, 1, 1), conv2d_nchwc_packed(1, 32, 14, 14, 48, 3, 1, 1)
    assert wino.inputs[0].shape == direct.inputs[0].shape and wino.output.shape == direct.output.shape
    assert wino.flops == direct.flops == 2 * 48 * 14 * 14 * 32 * 9
    x, w = wino.random_inputs(0)
    np.testing.assert_array_equal(wino.prepare(x, w)[0], direct.prepare(x, w)[0])
    np.testing.assert_array_equal(wino.reference(x, w), direct.reference(x, w))


def test_nchw_operator_takes_and_gives_what_the_nchw_direct_convolutions_do():
    """NCHW data in (read in place: no packed or padded copy of it), NCHW out, the weights transformed by
    ``prepare``; reference and FLOPs those of the direct convolution."""
    wino, direct = conv2d_winograd_nchw(1, 32, 14, 14, 48, 3, 1, 1), conv2d_nchw(1, 32, 14, 14, 48, 3, stride=1, pad=1)
    assert [t.shape for t in wino.inputs][0] == (1, 32, 14, 14) and wino.output.shape == (1, 48, 14, 14)
    assert wino.flops == direct.flops
    x, w = wino.random_inputs(0)
    data, u = wino.prepare(x, w)
    assert data is x
    *_, icb, ocb = wino.inputs[1].shape
    assert icb == ocb == tt.Target.host().lanes("float32")  # blocks of one vector inside the kernel
    np.testing.assert_array_equal(u, winograd_weight(w, 4, icb, ocb))
    np.testing.assert_array_equal(wino.reference(x, w), direct.reference(x, w))
    workspaces = {b.name for b in tt.lower(wino.default_schedule(), wino.args).workspaces}
    assert "input_tile" not in workspaces and not any("pad" in n or "pack" in n for n in workspaces), workspaces


def test_tasks_compute_conv2d_with_the_direct_flops():
    task = create_task("conv2d", {"IC": 128, "OC": 128, "H": 28, "W": 28, "K": 3, "pad": 1}, template=TEMPLATE)
    assert task == task_from_workload("resnet18:C6", TEMPLATE)
    assert task.flops == task_from_workload("resnet18:C6", "conv2d_nchwc_packed").flops
    sizes = {task.config(i)["tile_size"] for i in task.space.sample(50, random.Random(0))}
    assert sizes == set(TILE_SIZES) == {2, 4, 6}
    budget = tt.Target.host().max_accumulators
    for i in task.space.sample(50, random.Random(1)):  # register tiles fit the target's registers
        c = task.config(i)
        vectors = c["tile_oc"].size[-1]
        assert c["tile_p"] * vectors <= budget(vectors)


# ------------------------------------------------------------------------------------ a caller's epilogue


def fused_winograd(N, C, H, W, O, K, stride, pad, tile, icb, ocb, dtype="float32", **options):
    """``conv2d_winograd_nchwc`` with its caller's placeholders (data, transformed weight, bias, residual) and the
    epilogue ``relu(conv + bias + residual)``, as a network declares a fused convolution; called like it."""
    oh, ow, _, _ = winograd_tiles(H, W, pad, tile)
    x = te.placeholder((N, C // icb, H, W, icb), dtype, "x")
    u = te.placeholder(((tile + 2) ** 2, O // ocb, C // icb, icb, ocb), dtype, "u")
    bias, res = te.placeholder((O,), dtype, "bias"), te.placeholder((N, O // ocb, oh, ow, ocb), dtype, "residual")

    def epilogue(y):
        plus = te.compute(y.shape, lambda n, o, i, j, c: y[n, o, i, j, c] + bias[o * ocb + c] + res[n, o, i, j, c],
                          "plus")
        return [plus, te.compute(y.shape, lambda *i: te.maximum(plus[i], te.const(0, dtype)), "relu")]

    return conv2d_winograd_nchwc(N, C, H, W, O, K, stride, pad, tile, icb, ocb, dtype,
                                 inputs=lambda: (x, u, [bias, res]), epilogue=epilogue, **options)


def check_fused(sch, op, m: int, pad: int, seed: int, what: str) -> None:
    """The fused kernel equals ``relu(conv + bias + residual)`` in float64 within the convolution's tolerance
    (module docstring) plus a rounding of each addition; its epilogue is inlined (no buffer of its own)."""
    (n, cb, h, w, icb), (_, ob, oh, ow, ocb) = op.inputs[0].shape, op.output.shape
    rng = np.random.default_rng(seed)
    x, wt = rng.uniform(-1, 1, (n, cb * icb, h, w)), rng.uniform(-1, 1, (ob * ocb, cb * icb, 3, 3))
    bias, res = rng.uniform(-1, 1, ob * ocb), rng.uniform(-1, 1, (n, ob * ocb, oh, ow))
    conv = conv2d_nchw(n, cb * icb, h, w, ob * ocb, 3, pad=pad, dtype="float64").reference(x, wt)
    expected = blocked(np.maximum(conv + bias[:, None, None] + res, 0), ocb)
    assert {b.name for b in tt.lower(sch, op.args).workspaces}.isdisjoint({"conv2d", "plus", "relu"})
    f32 = [a.astype(np.float32) for a in (x, wt, bias, res)]
    out = np.full(op.output.shape, np.nan, np.float32)
    tt.build(sch, op.args)(*map(np.ascontiguousarray, (blocked(f32[0], icb), winograd_weight(f32[1], m, icb, ocb),
                                                       f32[2], blocked(f32[3], ocb))), out)
    y_abs = blocked(winograd_numpy(x, wt, m, pad, absolute=True), ocb)
    tol = np.sqrt(x.shape[1] + 4 * (m + 2)) * 2.0 ** -24 * y_abs + 2 * 2.0 ** -24 * (
        np.abs(blocked(conv, ocb)) + 2 + np.abs(expected))
    err = np.abs(out.astype(np.float64) - expected)
    assert (err <= tol).all(), f"{what}: error {err.max():.3g}"


@pytest.mark.parametrize("m", TILE_SIZES)
def test_a_callers_placeholders_and_epilogue_with_the_default_schedule(m):
    op = fused_winograd(1, 8, 9, 11, 16, 3, 1, 1, m, 4, 8)
    assert [t.name for t in op.inputs] == ["x", "u", "bias", "residual"] and op.output.name == "relu"
    assert [t.name for t in op.epilogue] == ["conv2d", "plus"]  # the output transform, then the stages between
    check_fused(op.default_schedule(), op, m, 1, m, f"default schedule m={m}")


@pytest.mark.slow
def test_template_configs_schedule_the_operator_of_their_declare_hook():
    task = create_task("conv2d", {"IC": 32, "OC": 32, "H": 10, "W": 10, "K": 3, "pad": 1}, template=TEMPLATE)
    rng = random.Random(7)
    for index in [next(i for i in task.space.sample(60, rng) if task.config(i)["tile_size"] == m) for m in TILE_SIZES]:
        sch, op = task.template.fn(task.config(index), *task.args, declare=fused_winograd)
        assert op.output.name == "relu"
        check_fused(sch, op, task.config(index)["tile_size"], 1, index, f"config {task.config(index)}")


def test_a_callers_placeholder_of_the_wrong_shape_is_a_shape_error():
    x, u = te.placeholder((1, 2, 9, 9, 8), "float32", "x"), te.placeholder((36, 2, 2, 8, 8), "float32", "u")
    with pytest.raises(ShapeError, match=r"transformed weight placeholder .* must have shape \(16, 2, 2, 8, 8\)"):
        conv2d_winograd_nchwc(1, 16, 9, 9, 16, 3, 1, 1, 2, 8, 8, inputs=lambda: (x, u, []))


# ------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize("declare, template", [(conv2d_winograd_nchwc, TEMPLATE),
                                               (conv2d_winograd_nchw, NCHW_TEMPLATE)])
@pytest.mark.parametrize("K, stride", [(3, 2), (1, 1), (5, 1)])
def test_other_convolutions_are_shape_errors_naming_the_rule(K, stride, declare, template):
    with pytest.raises(ShapeError, match="3x3 kernels with stride 1"):
        declare(1, 16, 14, 14, 16, K, stride, 1)
    with pytest.raises(ShapeError, match=f"got a {K}x{K} kernel with stride {stride}; use a direct convolution"):
        create_task("conv2d", {"IC": 16, "OC": 16, "H": 14, "W": 14, "K": K, "stride": stride, "pad": 1},
                    template=template).space


@pytest.mark.parametrize("declare", [conv2d_winograd_nchwc, conv2d_winograd_nchw])
def test_unknown_tile_sizes_and_blocks_are_shape_errors(declare):
    with pytest.raises(ShapeError, match="m=3 is not supported; use one of"):
        declare(1, 16, 14, 14, 16, tile=3)
    with pytest.raises(ShapeError, match="block 12 must divide 16"):
        declare(1, 16, 14, 14, 16, icb=12)


def test_register_tile_that_does_not_divide_the_padded_tiles_is_a_schedule_error():
    op = conv2d_winograd_nchwc(1, 16, 14, 14, 16, tile=4, p_tile=4)  # 16 tiles
    with pytest.raises(ScheduleError, match="register tile of 3 tiles x 1 channel blocks does not divide 16"):
        schedule_winograd(op, WinogradPlan(p_tile=3, oc_vectors=1))

"""The code generation that whole networks rely on: several kernels in one translation unit, floor division of
non-negative values as C's own, and a selection whose condition is the same for all lanes as vector code."""
from __future__ import annotations

import numpy as np

import tensortune as tt
from tensortune import te
from tensortune.arith import Analyzer
from tensortune.codegen import codegen_c_unit


def _kernel(name: str, n: int = 4):
    x = te.placeholder((n, 8), "float32", "x")
    y = te.compute((n, 8), lambda i, j: x[i, j] * te.const(2.0, "float32"), "y")
    s = tt.create_schedule(y)
    s[y].vectorize(s[y].axis[1])
    return tt.lower(s, [x, y], name)


def test_several_kernels_share_one_unit():
    src = codegen_c_unit([(_kernel("first"), Analyzer()), (_kernel("second", 6), Analyzer())], tt.Target.host(),
                         main="int32_t entry(void) { return 0; }", comment="two kernels")
    assert "static void first(" in src and "static void second(" in src and src.count("#include <math.h>") == 1
    assert src.count("typedef float tt_f32x8 ") <= 1 and src.rstrip().endswith("return 0; }")


def test_lane_invariant_select_is_vector_code():
    x = te.placeholder((6, 8), "float32", "x")
    y = te.compute((6, 8), lambda i, j: te.select(i >= 1, x[i - 1, j], te.const(0.0, "float32")), "y")
    s = tt.create_schedule(y)
    s[y].vectorize(s[y].axis[1])
    module = tt.build(s, [x, y])
    lanes = tt.Target.host().lanes(tt.dtype.DType.float32)
    if lanes > 1:
        assert " ? " in module.source and "omp simd" not in module.source
    a = np.random.default_rng(0).random((6, 8), dtype=np.float32)
    out = np.full((6, 8), 7, np.float32)
    module(a, out)
    np.testing.assert_array_equal(out, np.concatenate([np.zeros((1, 8), np.float32), a[:-1]]))


def test_floor_division_of_loop_indices_is_plain_c():
    x = te.placeholder((64,), "float32", "x")
    y = te.compute((8, 8), lambda i, j: x[i * 8 + j], "y")
    s = tt.create_schedule(y)
    s[y].fuse(*s[y].axis)
    source = tt.build(s, [x, y]).source
    assert "tt_floordiv" not in source and "tt_floormod" not in source and " / 8" in source

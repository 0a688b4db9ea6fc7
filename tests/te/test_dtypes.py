"""Every tensor dtype through the compiler: sizes, C types, kernels that compute in it, casts (bfloat16 by bits),
boolean tensors stored as bytes, and the tolerance each dtype is checked with."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune as tt
from tensortune import te
from tensortune.dtype import DType
from tensortune.errors import DTypeError

ARITHMETIC = [d for d in DType if d not in (DType.bool, DType.bfloat16)]


def _run(args, out_tensor, arrays):
    s = tt.create_schedule(out_tensor)
    mod = tt.build(s, [*args, out_tensor])
    out = np.zeros(out_tensor.shape, DType.of(out_tensor.dtype).numpy)
    mod(*arrays, out)
    return out


def _values(dt: DType, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dt.is_float:
        return rng.uniform(-4, 4, n).astype(dt.numpy)
    if dt is DType.bool:
        return rng.integers(0, 2, n).astype(bool)
    info = np.iinfo(dt.numpy)
    return rng.integers(max(info.min, -100), min(info.max, 100), n).astype(dt.numpy)


def test_every_dtype_has_a_size_a_c_type_and_a_numpy_type():
    for dt in DType:
        assert dt.numpy.itemsize == dt.bytes
        assert DType.of(dt.numpy) is dt and DType.of(dt.value) is dt
    assert DType.of(ml_dtypes.bfloat16) is DType.bfloat16
    assert DType.bool.c_type == "uint8_t" and DType.bfloat16.c_type == "uint16_t"
    host = tt.Target.host()
    assert host.lanes(DType.bfloat16) == host.lanes(DType.float16) == 2 * host.lanes(DType.float32)
    assert host.lanes(DType.int8) == 4 * host.lanes(DType.int32)


@pytest.mark.parametrize("dtype", [d.value for d in ARITHMETIC])
def test_a_kernel_computes_in_each_arithmetic_dtype(dtype):
    dt = DType.of(dtype)
    n = 37
    A = te.placeholder((n,), dtype, "A")
    B = te.placeholder((n,), dtype, "B")
    C = te.compute((n,), lambda i: te.maximum(A[i] * B[i], A[i] - B[i]) + A[i], "C")
    a, b = _values(dt, n, 1), _values(dt, n, 2)
    out = _run([A, B], C, [a, b])
    expected = np.maximum(a * b, a - b) + a  # numpy wraps small integers as C stores them
    ok, _ = dt.tolerance.check(out, expected)
    assert ok, (out, expected)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=40))
def test_float32_to_bfloat16_and_back_rounds_to_nearest_even_like_ml_dtypes(values):
    x = np.asarray(values, np.float32)
    n = len(x)
    A = te.placeholder((n,), "float32", "A")
    H = te.compute((n,), lambda i: A[i].astype("bfloat16"), "H")
    half = _run([A], H, [x])
    assert half.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(half.view(np.uint16), x.astype(ml_dtypes.bfloat16).view(np.uint16))
    Hin = te.placeholder((n,), "bfloat16", "Hin")
    F = te.compute((n,), lambda i: Hin[i].astype("float32") * 2.0, "F")
    np.testing.assert_array_equal(_run([Hin], F, [half]), half.astype(np.float32) * 2)


def test_bfloat16_is_stored_not_computed_in():
    A = te.placeholder((4,), "bfloat16", "A")
    with pytest.raises(DTypeError, match="compute in float32"):
        te.compute((4,), lambda i: A[i] + A[i], "C")
    with pytest.raises(DTypeError, match="compute in float32"):
        te.compute((4,), lambda i: te.exp(A[i]), "C")
    # moving bits needs no arithmetic: a copy and a select with a constant are fine
    C = te.compute((4,), lambda i: te.select(i < 2, A[i], te.const(1.5, "bfloat16")), "C")
    a = np.asarray([1, 2, 3, 4], ml_dtypes.bfloat16)
    np.testing.assert_array_equal(_run([A], C, [a]).astype(np.float32), [1, 2, 1.5, 1.5])


def test_boolean_tensors_are_bytes_of_zero_or_one():
    n = 29
    A = te.placeholder((n,), "float32", "A")
    M = te.compute((n,), lambda i: A[i] > 0.5, "M")
    a = np.random.default_rng(0).uniform(-1, 1, n).astype(np.float32)
    mask = _run([A], M, [a])
    assert mask.dtype == np.bool_
    np.testing.assert_array_equal(mask, a > 0.5)
    Min = te.placeholder((n,), "bool", "Min")
    Y = te.compute((n,), lambda i: te.select(Min[i], A[i], te.const(0.0, "float32")), "Y")
    np.testing.assert_array_equal(_run([Min, A], Y, [mask, a]), np.where(mask, a, 0))
    Z = te.compute((n,), lambda i: A[i].astype("bool"), "Z")
    a[::3] = 0.0
    a[1] = 0.25  # nonzero below one is true
    np.testing.assert_array_equal(_run([A], Z, [a]), a != 0)


def test_each_dtype_is_checked_with_its_own_tolerance():
    expected = np.asarray([1.0, 100.0], np.float32)
    assert DType.float32.tolerance.check(expected * (1 + 5e-4), expected)[0]
    assert not DType.float32.tolerance.check(expected * (1 + 5e-3), expected)[0]
    assert DType.bfloat16.tolerance.check(expected * (1 + 5e-3), expected)[0]
    assert not DType.int32.tolerance.check(np.asarray([1, 101]), np.asarray([1, 100]))[0]
    assert not DType.float32.tolerance.check(np.asarray([np.nan, 100.0]), expected)[0]

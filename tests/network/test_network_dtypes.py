"""Networks with integer and boolean inputs and outputs (token ids, masks), and casts between dtypes at run time,
compile and equal onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run
from tensortune.frontend import import_onnx
from tensortune.graph import UnsupportedModelError


def _ids(shape, high, dtype, seed=0):
    return np.random.default_rng(seed).integers(-high, high, shape).astype(dtype)


@pytest.mark.parametrize("dtype", ["int64", "int32", "int8", "uint8"])
def test_integer_inputs_and_outputs(dtype):
    """Integer arithmetic end to end: the output keeps the input's dtype and equals onnxruntime exactly."""
    m = model([node("Add", ["a", "b"], ["s"]), node("Mul", ["s", "a"], ["y"])], {"a": (3, 7), "b": (3, 7)}, ["y"],
              dtypes={"a": dtype, "b": dtype, "y": dtype}, opset=14)
    feeds = {"a": _ids((3, 7), 9, dtype, 1) % 9, "b": _ids((3, 7), 9, dtype, 2) % 9}
    module = nw.compile(m)
    assert [s.dtype.value for s in module.inputs] == [dtype, dtype]
    got = module.run(feeds)["y"]
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, ort_run(m, feeds)[0])


def test_token_ids_cast_to_float_at_run_time():
    m = model([node("Cast", ["ids"], ["f"], to=1), node("Mul", ["f", "k"], ["y"])], {"ids": (2, 16)}, ["y"],
              {"k": np.float32(0.5)}, dtypes={"ids": "int64"})
    ids = _ids((2, 16), 30000, "int64")
    assert_close(nw.compile(m)(ids), ort_run(m, {"ids": ids})[0])


def test_a_boolean_mask_in_and_a_boolean_out():
    """A mask (bool) cast to float and applied, and a comparison-like bool output (a cast of floats: nonzero is
    true), as bytes of 0 and 1."""
    m = model([node("Cast", ["mask"], ["m"], to=1), node("Mul", ["x", "m"], ["y"]), node("Cast", ["y"], ["nz"], to=9)],
              {"x": (4, 6), "mask": (4, 6)}, ["y", "nz"], dtypes={"mask": "bool", "nz": "bool"})
    rng = np.random.default_rng(0)
    feeds = {"x": rng.uniform(-1, 1, (4, 6)).astype(np.float32), "mask": rng.integers(0, 2, (4, 6)).astype(bool)}
    feeds["x"][0, :3] = 0.0
    y, nz = nw.compile(m).run(feeds).values()
    want_y, want_nz = ort_run(m, feeds)
    assert_close(y, want_y)
    assert nz.dtype == np.bool_
    np.testing.assert_array_equal(nz, want_nz)


def test_float_to_integer_casts_truncate_toward_zero_like_onnxruntime():
    m = model([node("Cast", ["x"], ["i"], to=6)], {"x": (13,)}, ["i"], dtypes={"i": "int32"})
    x = np.linspace(-3.75, 3.75, 13).astype(np.float32)
    np.testing.assert_array_equal(nw.compile(m)(x), ort_run(m, {"x": x})[0])


def test_an_input_of_a_dtype_no_kernel_computes_is_refused_with_the_dtypes_that_are():
    m = model([node("Identity", ["x"], ["y"])], {"x": (3,)}, ["y"], dtypes={"x": "complex64", "y": "complex64"})
    with pytest.raises(UnsupportedModelError, match="inputs must be tensors of float16, bfloat16, float32"):
        import_onnx(m)

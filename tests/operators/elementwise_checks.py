"""What the tests of the elementwise operators share: the opsets at which an ONNX operator changed, models of any
element types, and the one check that the imported graph interpreted and the compiled network both equal
onnxruntime, dtype included."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
import onnx.defs
from hypothesis import strategies as st

import tensortune.network as nw
from onnx_models import ATOL, RTOL, model, node, ort_run
from tensortune.dtype import DType
from tensortune.frontend import import_onnx
from tensortune.frontend.onnx import MAX_OPSET
from tensortune.graph import interpret



def opsets(op_type: str, first: int = 7) -> list[int]:
    """The opsets from ``first`` to ``MAX_OPSET`` at which ``op_type``'s definition changed (its first version at or
    after ``first`` included): one model per definition covers them all."""
    found = set()
    for v in range(first, MAX_OPSET + 1):
        try:
            found.add(max(first, onnx.defs.get_schema(op_type, max_inclusive_version=v).since_version))
        except onnx.defs.SchemaError:
            pass
    return sorted(found)


def one_node(op_type: str, inputs: Mapping[str, Sequence[int]], dtypes: Mapping[str, str], out_dtype: str,
             opset: int, initializers: Mapping[str, np.ndarray] | None = None, **attrs) -> onnx.ModelProto:
    """A model of one ``op_type`` node reading ``inputs`` (then ``initializers``) and writing ``y`` of ``out_dtype``."""
    names = list(inputs) + list(initializers or {})
    return model([node(op_type, names, ["y"], **attrs)], inputs, ["y"], initializers, opset=opset,
                 dtypes={**dtypes, "y": out_dtype})


def check(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray], tolerance: float | None = None) -> list[np.ndarray]:
    """The model interpreted and compiled equals onnxruntime on ``feeds`` (``agree``); the expected outputs."""
    expected = ort_run(m, feeds)
    with np.errstate(all="ignore"):  # the reference computes NaN and infinities as kernels do, silently
        interpreted = interpret(import_onnx(m), dict(feeds))
    compiled = nw.compile(m).run(dict(feeds))
    for name, want in zip((o.name for o in m.graph.output), expected):
        agree(interpreted[name], want, f"{name} interpreted", tolerance)
        agree(compiled[name], want, f"{name} compiled", tolerance)
    return expected


def agree(got: np.ndarray, want: np.ndarray, what: str, tolerance: float | None = None) -> None:
    """``got`` has ``want``'s dtype and shape, and its elements: integers and bools exactly, floats within
    ``tolerance`` (default: their dtype's, float32's that of ``onnx_models``) relative to the largest finite
    value, infinities and NaNs where ``want`` has them."""
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{list(got.shape)}, expected " \
                                                                f"{want.dtype}{list(want.shape)}"
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    f32 = want.dtype == np.float32
    rtol = tolerance or (RTOL if f32 else DType.of(want.dtype).tolerance.rtol)
    atol = ATOL if tolerance is None and f32 else rtol
    got, want = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite], err_msg=what)
    scale = max(1.0, float(np.max(np.abs(want[finite]), initial=0.0)))
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=atol * scale, err_msg=what)


def values(rng: np.random.Generator, shape: Sequence[int], dtype: str, low: float = -4.0,
           high: float = 4.0) -> np.ndarray:
    """Random elements of ``dtype`` in ``[low, high)`` (integers rounded; bools half true)."""
    if dtype == "bool":
        return np.asarray(rng.integers(0, 2, shape), bool)
    x = rng.uniform(low, high, shape)
    return np.asarray(np.round(x) if np.dtype(dtype).kind in "iu" else x, dtype)


@st.composite
def broadcast_shapes(draw, n: int, same: bool = False) -> list[tuple[int, ...]]:
    """``n`` shapes that broadcast together by numpy's rules (trailing axes align, 1 stretches, scalars among them);
    with ``same``, one shape ``n`` times (ONNX operators before multidirectional broadcasting)."""
    full = draw(st.lists(st.integers(1, 6), min_size=0, max_size=4))
    if same:
        return [tuple(full)] * n
    shapes = []
    for _ in range(n):
        rank = draw(st.integers(0, len(full)))
        shapes.append(tuple(d if draw(st.booleans()) else 1 for d in full[len(full) - rank:]))
    return shapes

"""Cast between every dtype kernels compute, at run time (``operators/constants.py``), bit for bit equal to
onnxruntime interpreted and compiled, at every opset where Cast changed: floats to integers truncate toward zero
(within the integer's range; NaN and infinities go only to floats and bools), to bool nonzero is true, between
floats to nearest even with NaN and infinities kept. A Cast after a convolution is no step of its epilogue."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from elementwise_checks import opsets
from onnx_models import model, node, ort_run, rand
from tensortune.dtype import DType
from tensortune.frontend import import_onnx
from tensortune.graph import interpret
from tensortune.network import compile as compile_network, optimized_graph
from tensortune.operators import Cast, Conv
from tensortune.target import Target

DTYPES = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "int64", "bool")


def _onnx(dtype: str) -> int:
    return helper.np_dtype_to_tensor_dtype(DType.of(dtype).numpy)


def _is_int(dtype: str) -> bool:
    return DType.of(dtype).is_int


def _values(src: str, dst: str, rng: np.random.Generator) -> np.ndarray:
    """Elements of ``src`` whose cast to ``dst`` is defined: within ``dst``'s range after truncation where it is an
    integer type, with ties, negative fractions, large integers and (between floats and to bool) NaN and
    infinities."""
    if src == "bool":
        return rng.integers(0, 2, 16).astype(bool)
    x = np.concatenate([rng.uniform(-300, 300, 40), rng.uniform(-3, 3, 20),
                        [0, -0.0, 0.5, -0.5, 1.5, -1.7, 2.5, 127.9, -128.9, 255.9, 2049, 1e5 + 3,
                         2.0**31 - 1, -2.0**31, 2.0**40 + 12345, 1e30]])
    if _is_int(src):
        info = np.iinfo(src)
        x = np.trunc(x[(x >= info.min) & (x <= info.max)])
    elif not _is_int(dst):
        x = np.concatenate([x, [np.nan, np.inf, -np.inf]])
    with np.errstate(over="ignore"):  # large values are infinite in float16
        if _is_int(dst):
            info = np.iinfo(dst)
            t = np.trunc(np.asarray(x, DType.of(src).numpy).astype(np.float64))  # the value src holds
            x = x[np.isfinite(t) & (t >= info.min) & (t <= info.max)]
        return np.asarray(x, DType.of(src).numpy)


def _reference(src: str, dst: str, x: np.ndarray, opset: int) -> np.ndarray:
    """onnxruntime's Cast of ``x``; bfloat16 crosses its Python binding as float32 (exactly), through Casts."""
    nodes, name, out = [], "x", "y"
    if src == "bfloat16":
        nodes.append(node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16))
        name = "xb"
    nodes.append(node("Cast", [name], ["y"], to=_onnx(dst)))
    if dst == "bfloat16":
        nodes.append(node("Cast", ["y"], ["yf"], to=TensorProto.FLOAT))
        out = "yf"
    outer = {"x": "float32" if src == "bfloat16" else src, out: "float32" if dst == "bfloat16" else dst}
    m = model(nodes, {"x": x.shape}, [out], opset=opset, dtypes=outer)
    return ort_run(m, {"x": x.astype(outer["x"])})[0]


@pytest.mark.parametrize("src, opset", [(s, v) for s in DTYPES for v in opsets("Cast") if v >= 13 or s != "bfloat16"])
def test_cast_to_every_dtype_equals_onnxruntime(src, opset):
    """One model per source type: a Cast to each other type (bfloat16 from opset 13, where ONNX Cast has it)."""
    rng = np.random.default_rng(DTYPES.index(src))
    dsts = [d for d in DTYPES if d != src and (opset >= 13 or d != "bfloat16")]
    feeds = {f"x_{d}": _values(src, d, rng) for d in dsts}
    m = model([node("Cast", [f"x_{d}"], [f"y_{d}"], to=_onnx(d)) for d in dsts],
              {f"x_{d}": feeds[f"x_{d}"].shape for d in dsts}, [f"y_{d}" for d in dsts], opset=opset,
              dtypes={**{f"x_{d}": src for d in dsts}, **{f"y_{d}": d for d in dsts}})
    with np.errstate(all="ignore"):
        interpreted = interpret(import_onnx(m), feeds)
    compiled = compile_network(m).run(feeds)
    for d in dsts:
        want = _reference(src, d, feeds[f"x_{d}"], opset)
        for what, got in (("interpreted", interpreted[f"y_{d}"]), ("compiled", compiled[f"y_{d}"])):
            assert got.dtype == DType.of(d).numpy, (what, d, got.dtype)
            np.testing.assert_array_equal(got.astype(want.dtype), want, err_msg=f"{src} to {d}, {what}")


def test_a_cast_after_a_convolution_is_not_its_epilogue():
    """A convolution's epilogue keeps its dtype: the Cast to float16 after it is a kernel of its own."""
    m = model([node("Conv", ["x", "w"], ["c"], kernel_shape=[1, 1]), node("Cast", ["c"], ["y"], to=TensorProto.FLOAT16)],
              {"x": (1, 8, 5, 5)}, ["y"], {"w": rand((8, 8, 1, 1), 1)}, dtypes={"y": "float16"})
    g = optimized_graph(m, Target.parse("c -isa=avx2 -cores=2 -arch=x86_64"))
    conv = next(n for n in g.nodes if isinstance(n.op, Conv))
    assert conv.op.epilogue == () and any(isinstance(n.op, Cast) for n in g.nodes)
    x = rand((1, 8, 5, 5), 2)
    want = ort_run(m, {"x": x})[0]
    got = compile_network(m)(x)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)

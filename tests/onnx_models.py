"""Helpers of the ONNX tests: one-node models built with ``onnx.helper``, onnxruntime as the reference, and the
comparison rule (rtol 1e-4, atol 1e-5 scaled by the largest |expected|)."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

RTOL, ATOL = 1e-4, 1e-5


def model(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, Sequence[int | str]], outputs: Sequence[str],
          initializers: Mapping[str, np.ndarray] | None = None, opset: int = 13, ir_version: int | None = None,
          initializers_as_inputs: bool = False, name: str = "test",
          dtypes: Mapping[str, str] | None = None) -> onnx.ModelProto:
    """A model of ``nodes`` with ``inputs`` (name -> shape; a string is a dynamic dimension) of float32 or of the
    numpy dtype ``dtypes`` names for them (inputs or outputs by name)."""
    def elem(name: str) -> int:
        return helper.np_dtype_to_tensor_dtype(np.dtype((dtypes or {}).get(name, "float32")))

    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()]
    graph_inputs = [helper.make_tensor_value_info(n, elem(n), list(s)) for n, s in inputs.items()]
    if initializers_as_inputs:  # what exporters of IR version 3 wrote
        graph_inputs += [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in inits]
    graph_outputs = [helper.make_tensor_value_info(o, elem(o), None) for o in outputs]
    g = helper.make_graph(list(nodes), name, graph_inputs, graph_outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version if ir_version is not None else min(m.ir_version, _ir_for_opset(opset))
    return m


def _ir_for_opset(opset: int) -> int:
    """The IR version that came with ``opset`` (onnxruntime rejects old opsets with much newer IR versions
    in a few cases; this keeps test models plausible)."""
    for ir, first_opset in ((3, 1), (4, 9), (5, 10), (6, 11), (7, 12), (8, 14), (9, 19), (10, 21), (11, 23), (12, 24), (13, 25), (14, 28)):
        if opset >= first_opset:
            version = ir
    return version


def ort_run(m: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, dict(feeds))


def assert_close(actual: np.ndarray, expected: np.ndarray, what: str = "output") -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL * scale, err_msg=what)


def rand(shape: Sequence[int], seed: int = 0, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


def node(op_type: str, inputs: Sequence[str], outputs: Sequence[str], **attrs) -> onnx.NodeProto:
    return helper.make_node(op_type, list(inputs), list(outputs), name=f"{op_type}_{outputs[0]}", **attrs)


def default_blocks(task, index: int) -> int:
    """``index`` with the channel-block knobs of the packed templates at their defaults (one vector), the layout a
    compiled network keeps where its log chooses no other blocks."""
    choices = list(task.space.index_to_choices(index))
    for k, name in enumerate(task.space.knobs):
        if name.startswith("block"):
            choices[k] = 0
    return task.space.choices_to_index(choices)

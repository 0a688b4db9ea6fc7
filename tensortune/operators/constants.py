"""Constants and what is computed from shapes and constants: ONNX Constant, ConstantOfShape, Shape and Range become
constants at import; ``Cast`` converts between the dtypes kernels compute (and is folded where its input is a
constant)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..dtype import DType
from ..errors import DTypeError
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node, TensorType
from ..graph.op import Pattern, check_count, numpy_dtype
from ..target import Target
from .kernel import KernelDef, lanes_of
from .map_op import MapOp
from .onnx_convert import ImportContext, OnnxNode, Reject, converter, ints
from .reshape import Identity, copy_kernel


@dataclass(frozen=True, slots=True)
class Cast(MapOp):
    """Convert elements to ``to`` (float to integer truncates toward zero; to bool, nonzero is true)."""

    pattern = Pattern.ELEMWISE
    name = "cast"
    to: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "to", TensorType((), self.to).dtype)

    def infer(self, inputs):
        check_count(self, inputs, 1)
        return (TensorType(inputs[0].shape, self.to),)

    def reference(self, x: np.ndarray) -> np.ndarray:
        return x.astype(numpy_dtype(self.to))

    def is_alias(self, g: Graph, node: Node) -> bool:
        src, dst = g.values[node.inputs[0]], g.values[node.outputs[0]]
        return self.to == src.dtype and not src.layout.blocked and not dst.layout.blocked

    def element(self, xs, idx):
        x = xs[0].broadcast(idx)
        return x if xs[0].dtype == self.to else x.astype(self.to)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        lanes_of(target, g.values[node.inputs[0]].dtype, node)  # the input's dtype must be one kernels read
        if self.to == g.values[node.inputs[0]].dtype:
            return copy_kernel(g, node, target)
        return MapOp.kernel(self, g, node, target)


@converter("Constant", attrs=("value", "value_float", "value_floats", "value_int", "value_ints"))
def _constant(ctx: ImportContext, node: OnnxNode) -> None:
    from onnx import numpy_helper

    if len(node.attrs) != 1:
        raise Reject("a Constant needs exactly one value attribute (value, value_float(s) or value_int(s))")
    key, v = next(iter(node.attrs.items()))
    if key == "value":
        array = numpy_helper.to_array(v)
    elif key.startswith("value_float"):
        array = np.asarray(v, np.float32)
    else:
        array = np.asarray(v, np.int64)
    ctx.constant(array, node.name, node.outputs[0])


@converter("ConstantOfShape", attrs=("value",))
def _constant_of_shape(ctx: ImportContext, node: OnnxNode) -> None:
    from onnx import numpy_helper

    shape = ints(ctx.need_static(node, 0, "shape"))
    value = numpy_helper.to_array(node.attr("value")) if "value" in node.attrs else np.zeros(1, np.float32)
    if value.size != 1:
        raise Reject("value must hold exactly one element")
    ctx.constant(np.full(shape, value.reshape(-1)[0], value.dtype), node.name, node.outputs[0])


@converter("Shape", attrs=("start", "end"))
def _shape(ctx: ImportContext, node: OnnxNode) -> None:
    shape = list(ctx.shape(node.input(0)))
    start, end = node.attr("start", 0), node.attr("end", len(shape))
    ctx.constant(np.asarray(shape[slice(start, end)], np.int64), node.name, node.outputs[0])


@converter("Range", attrs=("stash_type",), since=11)
def _range(ctx: ImportContext, node: OnnxNode) -> None:
    """Folded at import: a run-time Range would make a tensor whose shape depends on data. ``stash_type`` (opset 27)
    1 accumulates float16/bfloat16 ranges in float32."""
    start, limit, delta = (ctx.static(node.input(k)) for k in range(3))
    if start is None or limit is None or delta is None:
        raise Reject("a Range of run-time start, limit or delta (its length would depend on data) is not supported; "
                     "only a Range of constants, folded at compile time")
    dtype = np.asarray(start).dtype
    if int(node.attr("stash_type", 1)) == 1 and dtype.itemsize == 2 and dtype.kind != "i":
        start, limit, delta = (np.asarray(v, np.float32) for v in (start, limit, delta))
    ctx.constant(range_values(start, limit, delta).astype(dtype), node.name, node.outputs[0])


def range_values(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """ONNX Range as onnxruntime computes it: ``ceil((limit - start) / delta)`` elements (in float64), each the one
    before plus ``delta`` in the inputs' dtype."""
    start, limit, delta = (np.asarray(v).reshape(()) for v in (start, limit, delta))
    if delta == 0:
        raise Reject("Range with delta 0")
    n = int(np.ceil(np.float64(limit - start) / np.float64(delta)))
    if n <= 0:
        raise Reject(f"Range({start}, {limit}, {delta}) is empty (tensors without elements are not supported)")
    steps = np.full(n, delta, start.dtype)
    steps[0] = start
    return np.cumsum(steps, dtype=start.dtype)


@converter("Cast", attrs=("to", "saturate", "round_mode"))  # both only matter for float8 targets
def _cast(ctx: ImportContext, node: OnnxNode) -> None:
    from onnx import helper

    try:
        to = TensorType((), helper.tensor_dtype_to_np_dtype(int(node.attr("to")))).dtype
    except (KeyError, TypeError, ValueError, GraphError):
        raise Reject(f"cast to ONNX type {node.attr('to')} is not supported") from None
    x = node.input(0)
    if ctx.static(x) is None and to == ctx.type(x).dtype:
        ctx.emit(Identity(), [x], node.outputs, node.name)
        return
    if ctx.static(x) is None:
        for dt in (ctx.type(x).dtype, to):
            try:
                DType.of(dt)
            except DTypeError:
                raise Reject(f"casting a run-time tensor from {ctx.type(x).dtype} to {to}: kernels do not compute "
                             f"{dt}") from None
    ctx.emit(Cast(to), [x], node.outputs, node.name)

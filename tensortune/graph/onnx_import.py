"""ONNX -> graph IR: static shapes, typed operators, initializers as constants.

Supported: opsets 7 to 21 of the default domain and IR version 3 or later. Initializers listed among the
graph inputs (older exporters) are weights, not user inputs. A dynamic input dimension needs a static
shape from ``shapes``. Every unsupported node (operator, attribute or a non-constant input where a
constant is needed) is collected, and one ``UnsupportedModelError`` lists them all before anything
is compiled.

Nodes whose attributes depend on tensors (``Reshape``'s shape, ``Clip``'s bounds, ``Slice``'s starts)
read those tensors as constants: computed on demand with the reference interpreter when they come from
constant subgraphs (``Shape`` -> ``Gather`` -> ``Concat``). Such subgraphs stay in the imported graph;
the constant folding and dead-node passes remove them.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from .errors import GraphError, InputShapeError, ModelError, Unsupported, UnsupportedModelError
from .interpret import evaluate
from .ir import Graph, GraphBuilder, Node, Value
from .ops import (BatchNorm, Binary, BinaryFn, Cast, Concat, Conv, Gather, Identity, LRN, MatMul, Op, Pad, PadMode,
                  Pool, PoolKind, Reshape, Slice, Softmax, TensorType, Transpose, Unary, UnaryFn)

MIN_OPSET, MAX_OPSET = 7, 21
MIN_IR_VERSION = 3

class _Reject(Exception):
    """A node cannot be imported; the message says why."""


def load_model(model) -> "onnx.ModelProto":  # noqa: F821 - onnx is imported lazily
    """An ``onnx.ModelProto`` from a path, bytes or a ``ModelProto``; ``ModelError`` for anything else."""
    import onnx
    from google.protobuf.message import DecodeError

    if isinstance(model, onnx.ModelProto):
        return model
    where = "the given bytes"
    try:
        if isinstance(model, (bytes, bytearray)):
            proto = onnx.load_model_from_string(bytes(model))
        else:
            where = os.fspath(model)
            if os.path.isdir(where):
                raise ModelError(f"{where} is a directory, not an ONNX file")
            proto = onnx.load_model(where)
    except FileNotFoundError:
        raise ModelError(f"no such file: {where}") from None
    except (DecodeError, ValueError, RuntimeError, UnicodeDecodeError) as e:
        raise ModelError(f"{where} is not an ONNX model, or it is truncated ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else 'cannot parse'})") from None
    if proto.ir_version == 0 and not proto.graph.node and not proto.opset_import:
        raise ModelError(f"{where} is not an ONNX model (no IR version, opset or nodes)")
    return proto


def import_onnx(model, shapes: Mapping[str, Sequence[int]] | None = None, name: str | None = None) -> Graph:
    """The graph IR of an ONNX model (a path, bytes or ``ModelProto``).

    ``shapes`` gives static shapes of inputs (by name), required where the model's input has a dynamic
    dimension (``batch``, ``?``) and optional elsewhere.
    """
    proto = load_model(model)
    if proto.ir_version < MIN_IR_VERSION:
        raise ModelError(f"ONNX IR version {proto.ir_version} is too old; tensortune reads IR version "
                         f"{MIN_IR_VERSION} or later (re-export the model with a newer exporter)")
    opset = _default_opset(proto)
    return _Importer(proto, opset, dict(shapes or {}), name).run()


def _default_opset(proto) -> int:
    versions = {o.domain: o.version for o in proto.opset_import}
    opset = versions.get("", versions.get("ai.onnx"))
    if opset is None:
        raise ModelError("the model imports no opset of the default ONNX domain")
    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ModelError(f"the model uses opset {opset}; tensortune supports opsets {MIN_OPSET} to {MAX_OPSET} "
                         f"(convert it with onnx.version_converter.convert_version(model, {MAX_OPSET}))")
    return opset


# ------------------------------------------------------------------------------------------- the importer

@dataclass(frozen=True)
class _Converter:
    fn: Callable[["_Importer", "_OnnxNode"], None]
    attrs: frozenset[str]


_CONVERTERS: dict[str, _Converter] = {}


def _converts(*op_types: str, attrs: Sequence[str] = ()):
    def wrap(fn):
        for t in op_types:
            _CONVERTERS[t] = _Converter(fn, frozenset(attrs))
        return fn
    return wrap


@dataclass
class _OnnxNode:
    """One ONNX node as the converters see it: decoded attributes, inputs ("" for an omitted optional one)."""

    op_type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict
    opset: int

    def attr(self, key: str, default=None):
        return self.attrs.get(key, default)

    def input(self, k: int) -> str | None:
        return self.inputs[k] if k < len(self.inputs) and self.inputs[k] else None


class _Importer:
    def __init__(self, proto, opset: int, shapes: dict[str, Sequence[int]], name: str | None):
        self.proto = proto
        self.opset = opset
        self.shapes = shapes
        graph = proto.graph
        self.b = GraphBuilder(name or graph.name or "model")
        self.folded: dict[str, np.ndarray] = {}
        self.producer: dict[str, Node] = {}
        self.poisoned: set[str] = set()  # outputs of unsupported nodes (their readers are not reported again)

    # ------------------------------------------------------------------ whole model
    def run(self) -> Graph:
        from onnx import numpy_helper

        graph = self.proto.graph
        for init in graph.initializer:
            try:
                self.b.add_constant(init.name, numpy_helper.to_array(init))
            except Exception as e:  # noqa: BLE001 - a malformed initializer is a malformed model
                raise ModelError(f"initializer '{init.name}' cannot be read ({e}); the file may be truncated") from None
        self._inputs([i for i in graph.input if i.name not in self.b.constants])
        issues: list[Unsupported] = []
        for k, proto_node in enumerate(graph.node):
            node = self._decode(proto_node, k)
            missing = [i for i in node.inputs if i and i not in self.b.values]
            if missing:
                if any(i in self.poisoned for i in missing):
                    self.poisoned.update(node.outputs)
                    continue
                raise ModelError(f"node '{node.name}' ({node.op_type}) reads '{missing[0]}', which no earlier node, "
                                 "input or initializer defines (the file may be truncated or not sorted)")
            reason = self._convert(node)
            if reason is not None:
                issues.append(Unsupported(node.op_type, node.name, node.opset, reason))
                self.poisoned.update(node.outputs)
        if issues:
            raise UnsupportedModelError(issues)
        outputs = [o.name for o in graph.output]
        for o in outputs:
            if o not in self.b.values:
                raise ModelError(f"graph output '{o}' is not computed by any node")
        self.b.outputs = outputs
        try:
            return self.b.build()
        except GraphError as e:
            raise ModelError(f"the imported graph is malformed: {e}") from None

    def _inputs(self, inputs) -> None:
        names = [i.name for i in inputs]
        unknown = set(self.shapes) - set(names)
        if unknown:
            raise InputShapeError(f"--shape names {sorted(unknown)}, which is not an input of the model; its inputs "
                                  f"are {', '.join(names) or 'none'}")
        from onnx import helper

        for inp in inputs:
            t = inp.type.tensor_type
            if not inp.type.HasField("tensor_type"):
                raise ModelError(f"input '{inp.name}' is not a tensor")
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)) if t.elem_type else None
            if dtype != np.float32:
                raise UnsupportedModelError([Unsupported("input", inp.name, self.opset,
                                                         f"inputs must be float32 tensors, not {dtype}")])
            dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim]
            if inp.name in self.shapes:
                given = tuple(int(d) for d in self.shapes[inp.name])
                if t.HasField("shape") and (len(given) != len(dims) or any(
                        d is not None and d != g for d, g in zip(dims, given))):
                    raise InputShapeError(f"the shape {list(given)} given for input '{inp.name}' does not match its "
                                          f"declared shape {_dims_str(t.shape.dim)}")
                if any(g < 1 for g in given):
                    raise InputShapeError(f"the shape given for input '{inp.name}' needs positive dimensions, got "
                                          f"{list(given)}")
                shape = given
            elif not t.HasField("shape") or any(d is None for d in dims):
                example = ",".join(str(d or 1) for d in dims) if t.HasField("shape") else "1,3,224,224"
                raise InputShapeError(f"input '{inp.name}' has a dynamic shape {_dims_str(t.shape.dim)}; give a static "
                                      f"one, e.g. --shape {inp.name}={example} (shapes={{'{inp.name}': "
                                      f"({example.replace(',', ', ')})}} in Python)")
            else:
                shape = tuple(dims)
            self.b.inputs.append(inp.name)
            self.b.values[inp.name] = Value(inp.name, TensorType(shape, "float32"))

    def _decode(self, proto_node, index: int) -> _OnnxNode:
        from onnx import helper

        attrs = {a.name: helper.get_attribute_value(a) for a in proto_node.attribute}
        domain = proto_node.domain if proto_node.domain not in ("", "ai.onnx") else ""
        name = proto_node.name or f"{proto_node.op_type}_{index}"
        return _OnnxNode(proto_node.op_type if not domain else f"{domain}.{proto_node.op_type}", name,
                         list(proto_node.input), list(proto_node.output), attrs, self.opset)

    def _convert(self, node: _OnnxNode) -> str | None:
        """Convert one node; the reason it is unsupported, or None."""
        conv = _CONVERTERS.get(node.op_type)
        if conv is None:
            return "this operator is not supported"
        extra = sorted(set(node.attrs) - conv.attrs)
        if extra:
            return f"unsupported attribute(s) {', '.join(extra)}"
        try:
            conv.fn(self, node)
        except _Reject as e:
            return str(e)
        except GraphError as e:
            return str(e)
        return None

    # ------------------------------------------------------------------ helpers for converters
    def type(self, name: str):
        return self.b.values[name].type

    def shape(self, name: str) -> tuple[int, ...]:
        return self.b.values[name].shape

    def static(self, name: str | None) -> np.ndarray | None:
        """The value of ``name`` if it is a constant or computed only from constants (evaluated now), else None."""
        if name is None:
            return None
        if name in self.b.constants:
            return self.b.constants[name]
        if name in self.folded:
            return self.folded[name]
        node = self.producer.get(name)
        if node is None:
            return None
        args = [self.static(i) for i in node.inputs]
        if any(a is None for a in args):
            return None
        for o, r in zip(node.outputs, evaluate(node.op, args)):
            self.folded[o] = np.asarray(r).astype(self.b.values[o].dtype, copy=False)
        return self.folded[name]

    def need_static(self, node: _OnnxNode, k: int, what: str) -> np.ndarray | None:
        """Input ``k`` as a constant (None when omitted); rejects the node when it is computed at run time."""
        name = node.input(k)
        if name is None:
            return None
        value = self.static(name)
        if value is None:
            raise _Reject(f"its {what} (input {k}, '{name}') must be a constant, but it is computed at run time")
        return value

    def emit(self, op: Op, inputs: Sequence[str], outputs: Sequence[str] | None, name: str) -> tuple[str, ...]:
        outs = self.b.add(op, inputs, name, outputs)
        node = self.b.nodes[-1]
        for o in outs:
            self.producer[o] = node
        return outs

    def constant(self, array: np.ndarray, hint: str, name: str | None = None) -> str:
        return self.b.add_constant(name, np.asarray(array), hint)


def _dims_str(dims) -> str:
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims) + "]"


def _axis(axis: int, rank: int, node: _OnnxNode) -> int:
    a = axis + rank if axis < 0 else axis
    if not 0 <= a < rank:
        raise _Reject(f"axis {axis} is out of range for rank {rank}")
    return a


def _only_output(node: _OnnxNode, what: str) -> None:
    if any(node.outputs[1:]):
        raise _Reject(f"its optional output(s) ({what}) are not supported at inference")


# ------------------------------------------------------------------------------------------- convolution, pooling

def _spatial_pads(node: _OnnxNode, in_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int],
                  dilations: Sequence[int]) -> tuple[int, int, int, int]:
    auto = node.attr("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto == "NOTSET":
        pads = tuple(node.attr("pads", (0, 0, 0, 0)))
        if len(pads) != 4:
            raise _Reject(f"pads {list(pads)} must have 4 entries for a 2-D window")
        if any(p < 0 for p in pads):
            raise _Reject(f"negative pads {list(pads)} are not supported")
        return pads  # type: ignore[return-value]
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise _Reject(f"auto_pad {auto!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small = total // 2
        begin.append(small if auto == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return (begin[0], begin[1], end[0], end[1])


def _window(node: _OnnxNode, x_shape, kernel) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
    if len(x_shape) != 4 or len(kernel) != 2:
        raise _Reject(f"only 2-D windows on NCHW tensors are supported (input shape {list(x_shape)}, kernel "
                      f"{list(kernel)})")
    strides = tuple(node.attr("strides", (1, 1)))
    dilations = tuple(node.attr("dilations", (1, 1)))
    if len(strides) != 2 or len(dilations) != 2:
        raise _Reject("strides and dilations need 2 entries for a 2-D window")
    return strides, dilations, _spatial_pads(node, x_shape[2:], kernel, strides, dilations)  # type: ignore


@_converts("Conv", attrs=("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
def _conv(imp: _Importer, node: _OnnxNode) -> None:
    x, w, b = node.input(0), node.input(1), node.input(2)
    if w is None or imp.static(w) is None:
        raise _Reject("its weight must be a constant (weights computed at run time are not supported)")
    if b is not None and imp.static(b) is None:
        raise _Reject("its bias must be a constant")
    w_shape = imp.shape(w)
    kernel = tuple(node.attr("kernel_shape", w_shape[2:]))
    if kernel != tuple(w_shape[2:]):
        raise _Reject(f"kernel_shape {list(kernel)} differs from the weight's {list(w_shape[2:])}")
    strides, dilations, pads = _window(node, imp.shape(x), kernel)
    op = Conv(strides, pads, dilations, int(node.attr("group", 1)), has_bias=b is not None)
    imp.emit(op, [x, w] + ([b] if b else []), node.outputs[:1], node.name)


@_converts("BatchNormalization", attrs=("epsilon", "momentum", "spatial", "training_mode"))
def _batchnorm(imp: _Importer, node: _OnnxNode) -> None:
    if node.attr("spatial", 1) != 1:
        raise _Reject("spatial=0 (statistics per element) is not supported")
    if node.attr("training_mode", 0):
        raise _Reject("training_mode=1 is not supported at inference")
    _only_output(node, "running mean and variance")
    imp.emit(BatchNorm(float(node.attr("epsilon", 1e-5))), node.inputs[:5], node.outputs[:1], node.name)


def _pool_kind(node: _OnnxNode) -> PoolKind:
    return PoolKind.MAX if "Max" in node.op_type else PoolKind.AVG


@_converts("MaxPool", attrs=("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"))
@_converts("AveragePool", attrs=("auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads",
                                  "strides"))
def _pool(imp: _Importer, node: _OnnxNode) -> None:
    _only_output(node, "indices")
    kernel = tuple(node.attr("kernel_shape", ()))
    x = node.input(0)
    strides, dilations, pads = _window(node, imp.shape(x), kernel)
    op = Pool(_pool_kind(node), kernel, strides, pads, dilations, bool(node.attr("ceil_mode", 0)),  # type: ignore
              bool(node.attr("count_include_pad", 0)))
    imp.emit(op, [x], node.outputs[:1], node.name)


@_converts("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(imp: _Importer, node: _OnnxNode) -> None:
    shape = imp.shape(node.input(0))
    if len(shape) != 4:
        raise _Reject(f"only NCHW inputs are supported, got shape {list(shape)}")
    imp.emit(Pool(_pool_kind(node), (shape[2], shape[3])), [node.input(0)], node.outputs, node.name)


@_converts("LRN", attrs=("alpha", "beta", "bias", "size"))
def _lrn(imp: _Importer, node: _OnnxNode) -> None:
    op = LRN(int(node.attr("size")), float(node.attr("alpha", 1e-4)), float(node.attr("beta", 0.75)),
             float(node.attr("bias", 1.0)))
    imp.emit(op, [node.input(0)], node.outputs, node.name)


# ------------------------------------------------------------------------------------------- elementwise

_UNARY = {"Relu": UnaryFn.RELU, "Sigmoid": UnaryFn.SIGMOID, "Tanh": UnaryFn.TANH, "HardSwish": UnaryFn.HARD_SWISH}


@_converts(*_UNARY)
def _unary(imp: _Importer, node: _OnnxNode) -> None:
    imp.emit(Unary(_UNARY[node.op_type]), [node.input(0)], node.outputs, node.name)


@_converts("LeakyRelu", attrs=("alpha",))
def _leaky_relu(imp: _Importer, node: _OnnxNode) -> None:
    imp.emit(Unary(UnaryFn.LEAKY_RELU, float(node.attr("alpha", 0.01))), [node.input(0)], node.outputs, node.name)


@_converts("HardSigmoid", attrs=("alpha", "beta"))
def _hard_sigmoid(imp: _Importer, node: _OnnxNode) -> None:
    op = Unary(UnaryFn.HARD_SIGMOID, float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5)))
    imp.emit(op, [node.input(0)], node.outputs, node.name)


@_converts("Clip", attrs=("min", "max"))
def _clip(imp: _Importer, node: _OnnxNode) -> None:
    big = float(np.finfo(np.float32).max)
    if node.opset < 11:
        lo, hi = float(node.attr("min", -big)), float(node.attr("max", big))
    else:
        if "min" in node.attrs or "max" in node.attrs:
            raise _Reject("min and max are inputs from opset 11 on, not attributes")
        lo_a, hi_a = imp.need_static(node, 1, "min"), imp.need_static(node, 2, "max")
        lo = float(lo_a) if lo_a is not None else -big
        hi = float(hi_a) if hi_a is not None else big
    imp.emit(Unary(UnaryFn.CLIP, lo, hi), [node.input(0)], node.outputs, node.name)


_BINARY = {"Add": BinaryFn.ADD, "Sub": BinaryFn.SUB, "Mul": BinaryFn.MUL, "Div": BinaryFn.DIV,
           "PRelu": BinaryFn.PRELU}


@_converts(*_BINARY)
def _binary(imp: _Importer, node: _OnnxNode) -> None:
    imp.emit(Binary(_BINARY[node.op_type]), node.inputs[:2], node.outputs, node.name)


@_converts("Sum")
def _sum(imp: _Importer, node: _OnnxNode) -> None:
    inputs = [i for i in node.inputs if i]
    if not inputs:
        raise _Reject("Sum needs at least one input")
    if len(inputs) == 1:
        imp.emit(Identity(), inputs, node.outputs, node.name)
        return
    acc = inputs[0]
    for k, other in enumerate(inputs[1:], start=1):
        last = k == len(inputs) - 1
        (acc,) = imp.emit(Binary(BinaryFn.ADD), [acc, other], node.outputs if last else None, node.name)


# ------------------------------------------------------------------------------------------- matrices

@_converts("Gemm", attrs=("alpha", "beta", "transA", "transB", "broadcast"))
def _gemm(imp: _Importer, node: _OnnxNode) -> None:
    a, b, c = node.input(0), node.input(1), node.input(2)
    if len(imp.shape(a)) != 2 or len(imp.shape(b)) != 2:
        raise _Reject(f"Gemm needs 2-D A and B, got {list(imp.shape(a))} and {list(imp.shape(b))}")
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if node.attr("transA", 0):
        (a,) = imp.emit(Transpose((1, 0)), [a], None, f"{node.name}_transA")
    if node.attr("transB", 0):
        (b,) = imp.emit(Transpose((1, 0)), [b], None, f"{node.name}_transB")
    last = c is None or beta == 0
    (y,) = imp.emit(MatMul(), [a, b], node.outputs if last and alpha == 1 else None, node.name)
    if alpha != 1:
        scale = imp.constant(np.float32(alpha), f"{node.name}_alpha")
        (y,) = imp.emit(Binary(BinaryFn.MUL), [y, scale], node.outputs if last else None, f"{node.name}_alpha")
    if not last:
        if beta != 1:
            k = imp.constant(np.float32(beta), f"{node.name}_beta")
            (c,) = imp.emit(Binary(BinaryFn.MUL), [c, k], None, f"{node.name}_beta")
        imp.emit(Binary(BinaryFn.ADD), [y, c], node.outputs, f"{node.name}_bias")


@_converts("MatMul")
def _matmul(imp: _Importer, node: _OnnxNode) -> None:
    imp.emit(MatMul(), node.inputs[:2], node.outputs, node.name)


@_converts("Softmax", attrs=("axis",))
def _softmax(imp: _Importer, node: _OnnxNode) -> None:
    x = node.input(0)
    shape = imp.shape(x)
    if node.opset >= 13:
        imp.emit(Softmax(_axis(int(node.attr("axis", -1)), len(shape), node)), [x], node.outputs, node.name)
        return
    # before opset 13 the input is coerced to 2-D at `axis` and normalized over the second dimension
    axis = _axis(int(node.attr("axis", 1)), len(shape), node)
    if axis == len(shape) - 1:
        imp.emit(Softmax(axis), [x], node.outputs, node.name)
        return
    flat = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    (x2,) = imp.emit(Reshape(flat), [x], None, f"{node.name}_2d")
    (y2,) = imp.emit(Softmax(1), [x2], None, node.name)
    imp.emit(Reshape(shape), [y2], node.outputs, f"{node.name}_nd")


# ------------------------------------------------------------------------------------------- shapes, data movement

def _reshape_to(imp: _Importer, node: _OnnxNode, shape: Sequence[int]) -> None:
    imp.emit(Reshape(tuple(int(d) for d in shape)), [node.input(0)], node.outputs[:1], node.name)


@_converts("Reshape", attrs=("allowzero",))
def _reshape(imp: _Importer, node: _OnnxNode) -> None:
    target = imp.need_static(node, 1, "shape")
    src = imp.shape(node.input(0))
    dims = [int(d) for d in np.asarray(target).reshape(-1)]
    if not node.attr("allowzero", 0):
        dims = [src[i] if d == 0 else d for i, d in enumerate(dims)]
    if dims.count(-1) > 1:
        raise _Reject(f"shape {dims} has more than one -1")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or math.prod(src) % known:
            raise _Reject(f"cannot reshape {list(src)} to {dims}")
        dims[dims.index(-1)] = math.prod(src) // known
    _reshape_to(imp, node, dims)


@_converts("Flatten", attrs=("axis",))
def _flatten(imp: _Importer, node: _OnnxNode) -> None:
    shape = imp.shape(node.input(0))
    axis = int(node.attr("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        raise _Reject(f"axis {axis} is out of range for rank {len(shape)}")
    _reshape_to(imp, node, (math.prod(shape[:axis]), math.prod(shape[axis:])))


def _axes_input(imp: _Importer, node: _OnnxNode) -> list[int] | None:
    if node.opset >= 13:
        if "axes" in node.attrs:
            raise _Reject("axes is an input from opset 13 on, not an attribute")
        axes = imp.need_static(node, 1, "axes")
        return None if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    axes = node.attr("axes")
    return None if axes is None else [int(a) for a in axes]


@_converts("Squeeze", attrs=("axes",))
def _squeeze(imp: _Importer, node: _OnnxNode) -> None:
    shape = imp.shape(node.input(0))
    axes = _axes_input(imp, node)
    drop = {i for i, d in enumerate(shape) if d == 1} if axes is None else {_axis(a, len(shape), node) for a in axes}
    if any(shape[a] != 1 for a in drop):
        raise _Reject(f"cannot squeeze axes {sorted(drop)} of shape {list(shape)}: not of size 1")
    _reshape_to(imp, node, [d for i, d in enumerate(shape) if i not in drop])


@_converts("Unsqueeze", attrs=("axes",))
def _unsqueeze(imp: _Importer, node: _OnnxNode) -> None:
    shape = list(imp.shape(node.input(0)))
    axes = _axes_input(imp, node)
    if axes is None:
        raise _Reject("Unsqueeze needs axes")
    rank = len(shape) + len(axes)
    norm = sorted(_axis(a, rank, node) for a in axes)
    if len(set(norm)) != len(norm):
        raise _Reject(f"repeated axes {axes}")
    for a in norm:
        shape.insert(a, 1)
    _reshape_to(imp, node, shape)


@_converts("Transpose", attrs=("perm",))
def _transpose(imp: _Importer, node: _OnnxNode) -> None:
    rank = len(imp.shape(node.input(0)))
    perm = tuple(int(p) for p in node.attr("perm", range(rank - 1, -1, -1)))
    imp.emit(Transpose(perm), [node.input(0)], node.outputs, node.name)


@_converts("Concat", attrs=("axis",))
def _concat(imp: _Importer, node: _OnnxNode) -> None:
    inputs = [i for i in node.inputs if i]
    rank = len(imp.shape(inputs[0]))
    if "axis" not in node.attrs:
        raise _Reject("Concat needs an axis")
    imp.emit(Concat(_axis(int(node.attr("axis")), rank, node)), inputs, node.outputs, node.name)


@_converts("Split", attrs=("axis", "split", "num_outputs"))
def _split(imp: _Importer, node: _OnnxNode) -> None:
    x = node.input(0)
    shape = imp.shape(x)
    axis = _axis(int(node.attr("axis", 0)), len(shape), node)
    parts = len(node.outputs)
    if node.opset >= 13:
        sizes = imp.need_static(node, 1, "split")
    else:
        sizes = node.attr("split")
    total = shape[axis]
    if sizes is None:
        chunk = -(-total // parts)
        sizes = [min(chunk, total - k * chunk) for k in range(parts)]
    sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
    if len(sizes) != parts or sum(sizes) != total or any(s < 1 for s in sizes):
        raise _Reject(f"split sizes {sizes} do not divide axis {axis} ({total}) into {parts} non-empty parts")
    start = 0
    for out, size in zip(node.outputs, sizes):
        starts = [0] * len(shape)
        starts[axis] = start
        dims = list(shape)
        dims[axis] = size
        if out:
            imp.emit(Slice(tuple(starts), (1,) * len(shape), tuple(dims)), [x], [out], f"{node.name}_{out}")
        start += size


@_converts("Slice", attrs=("starts", "ends", "axes"))
def _slice(imp: _Importer, node: _OnnxNode) -> None:
    x = node.input(0)
    shape = imp.shape(x)
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes"), None
    else:
        starts, ends = imp.need_static(node, 1, "starts"), imp.need_static(node, 2, "ends")
        axes, steps = imp.need_static(node, 3, "axes"), imp.need_static(node, 4, "steps")
    starts = [int(s) for s in np.asarray(starts).reshape(-1)]
    ends = [int(e) for e in np.asarray(ends).reshape(-1)]
    axes = list(range(len(starts))) if axes is None else [_axis(int(a), len(shape), node)
                                                          for a in np.asarray(axes).reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).reshape(-1)]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise _Reject("starts, ends, axes and steps differ in length")
    out_starts, out_steps, sizes = [0] * len(shape), [1] * len(shape), list(shape)
    for a, s, e, st in zip(axes, starts, ends, steps):
        if st == 0:
            raise _Reject("a slice step of 0")
        dim = shape[a]
        s, e = s + dim if s < 0 else s, e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        size = max(0, -(-(e - s) // st))
        if size == 0:
            raise _Reject(f"an empty slice of axis {a} (tensors without elements are not supported)")
        out_starts[a], out_steps[a], sizes[a] = s, st, size
    imp.emit(Slice(tuple(out_starts), tuple(out_steps), tuple(sizes)), [x], node.outputs, node.name)


_PAD_MODES = {"constant": PadMode.CONSTANT, "reflect": PadMode.REFLECT, "edge": PadMode.EDGE}


@_converts("Pad", attrs=("mode", "pads", "value"))
def _pad(imp: _Importer, node: _OnnxNode) -> None:
    mode = node.attr("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in _PAD_MODES:
        raise _Reject(f"pad mode {mode!r} is not supported (constant, reflect and edge are)")
    x = node.input(0)
    rank = len(imp.shape(x))
    if node.opset < 11:
        pads, value = list(node.attr("pads")), float(node.attr("value", 0.0))
    else:
        pads = [int(p) for p in np.asarray(imp.need_static(node, 1, "pads")).reshape(-1)]
        v = imp.need_static(node, 2, "constant_value")
        value = float(np.asarray(v).reshape(-1)[0]) if v is not None and np.asarray(v).size else 0.0
        axes = imp.need_static(node, 3, "axes")
        if axes is not None:
            axes = [_axis(int(a), rank, node) for a in np.asarray(axes).reshape(-1)]
            full = [0] * (2 * rank)
            for k, a in enumerate(axes):
                full[a], full[a + rank] = pads[k], pads[k + len(axes)]
            pads = full
    if len(pads) != 2 * rank:
        raise _Reject(f"pads {pads} need {2 * rank} entries for rank {rank}")
    if any(p < 0 for p in pads):
        raise _Reject(f"negative pads {pads} (cropping) are not supported")
    imp.emit(Pad(tuple(pads), _PAD_MODES[mode], value), [x], node.outputs, node.name)


@_converts("Identity")
def _identity(imp: _Importer, node: _OnnxNode) -> None:
    imp.emit(Identity(), [node.input(0)], node.outputs, node.name)


@_converts("Dropout", attrs=("ratio", "is_test", "seed"))
def _dropout(imp: _Importer, node: _OnnxNode) -> None:
    _only_output(node, "mask")
    if node.opset >= 12:
        training = imp.need_static(node, 2, "training_mode")
        if training is not None and bool(np.asarray(training).reshape(-1)[0]):
            raise _Reject("training_mode=true is not supported at inference")
    imp.emit(Identity(), [node.input(0)], node.outputs[:1], node.name)


# ------------------------------------------------------------------------------------------- constants

@_converts("Constant", attrs=("value", "value_float", "value_floats", "value_int", "value_ints"))
def _constant(imp: _Importer, node: _OnnxNode) -> None:
    from onnx import numpy_helper

    if len(node.attrs) != 1:
        raise _Reject("a Constant needs exactly one value attribute (value, value_float(s) or value_int(s))")
    key, v = next(iter(node.attrs.items()))
    if key == "value":
        array = numpy_helper.to_array(v)
    elif key.startswith("value_float"):
        array = np.asarray(v, np.float32)
    else:
        array = np.asarray(v, np.int64)
    imp.constant(array, node.name, node.outputs[0])


@_converts("ConstantOfShape", attrs=("value",))
def _constant_of_shape(imp: _Importer, node: _OnnxNode) -> None:
    from onnx import numpy_helper

    shape = [int(d) for d in np.asarray(imp.need_static(node, 0, "shape")).reshape(-1)]
    value = numpy_helper.to_array(node.attr("value")) if "value" in node.attrs else np.zeros(1, np.float32)
    if value.size != 1:
        raise _Reject("value must hold exactly one element")
    imp.constant(np.full(shape, value.reshape(-1)[0], value.dtype), node.name, node.outputs[0])


@_converts("Shape", attrs=("start", "end"))
def _shape(imp: _Importer, node: _OnnxNode) -> None:
    shape = list(imp.shape(node.input(0)))
    start, end = node.attr("start", 0), node.attr("end", len(shape))
    imp.constant(np.asarray(shape[slice(start, end)], np.int64), node.name, node.outputs[0])


@_converts("Gather", attrs=("axis",))
def _gather(imp: _Importer, node: _OnnxNode) -> None:
    if imp.static(node.input(0)) is None or imp.static(node.input(1)) is None:
        raise _Reject("only Gather of constants (folded at compile time) is supported")
    rank = len(imp.shape(node.input(0)))
    imp.emit(Gather(_axis(int(node.attr("axis", 0)), rank, node)), node.inputs[:2], node.outputs, node.name)


@_converts("Cast", attrs=("to", "saturate"))
def _cast(imp: _Importer, node: _OnnxNode) -> None:
    from onnx import helper

    try:
        to = np.dtype(helper.tensor_dtype_to_np_dtype(int(node.attr("to")))).name
    except (KeyError, TypeError, ValueError):
        raise _Reject(f"cast to ONNX type {node.attr('to')} is not supported") from None
    x = node.input(0)
    if imp.static(x) is not None:
        imp.emit(Cast(to), [x], node.outputs, node.name)
    elif imp.type(x).dtype == to:
        imp.emit(Identity(), [x], node.outputs, node.name)
    else:
        raise _Reject(f"casting a run-time tensor from {imp.type(x).dtype} to {to} is not supported")


#: the ONNX operators the importer reads
SUPPORTED_OPERATORS = tuple(sorted(_CONVERTERS))

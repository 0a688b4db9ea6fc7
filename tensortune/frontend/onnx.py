"""ONNX -> graph IR: static shapes, typed operators, initializers as constants.

Each ONNX node is converted by the converter its operator's module registered for the model's opset
(``operators.onnx_convert``); this module reads the model, its inputs and initializers, and runs them.
Supported: opsets 7 to 28 of the default domain and IR version 3 or later. Initializers listed among the
graph inputs (older exporters) are weights, not user inputs. A dynamic input dimension needs a static
shape from ``shapes``. Every unsupported node (operator, attribute or a non-constant input where a
constant is needed) is collected, and one ``UnsupportedModelError`` lists them all before anything
is compiled; a node that reads an unsupported node's output is listed where its own operator or
attributes are unsupported (its other checks need its inputs).

Nodes whose attributes depend on tensors (``Reshape``'s shape, ``Clip``'s bounds, ``Slice``'s starts)
read those tensors as constants: computed on demand with the reference interpreter when they come from
constant subgraphs (``Shape`` -> ``Gather`` -> ``Concat``). Such subgraphs stay in the imported graph;
the constant folding and dead-node passes remove them.
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np

from ..dtype import DType
from ..errors import DTypeError
from ..graph.errors import GraphError, InputShapeError, ModelError, Unsupported, UnsupportedModelError
from ..graph.interpret import evaluate
from ..graph.ir import Graph, GraphBuilder, Node, TensorType, Value
from ..graph.op import Op, numpy_dtype
from ..operators import onnx_convert
from ..operators.onnx_convert import OnnxNode, Reject

MIN_OPSET, MAX_OPSET = 7, 28
MIN_IR_VERSION = 3


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
        self.read = {i for n in graph.node for i in n.input if i} | {o.name for o in graph.output}

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
                    reason = self._converter_of(node)[1]  # its operator and attributes can still be checked
                    if reason is not None:
                        issues.append(Unsupported(node.op_type, node.name, node.opset, reason))
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
        """Bind each input to its static shape: declared, given by input name, or with its symbolic dimensions
        (``batch``, ``sequence``) given by name. One ``InputShapeError`` names every dimension still unknown."""
        from onnx import helper

        names = [i.name for i in inputs]
        symbols = {d.dim_param for i in inputs for d in i.type.tensor_type.shape.dim if d.dim_param not in ("", "?")}
        unknown = set(self.shapes) - set(names) - symbols
        if unknown:
            raise InputShapeError(f"--shape names {sorted(unknown)}, which is neither an input of the model nor one "
                                  f"of its symbolic dimensions; its inputs are {', '.join(names) or 'none'}"
                                  + (f", its symbolic dimensions {', '.join(sorted(symbols))}" if symbols else ""))
        sizes = {k: _symbol_size(k, v) for k, v in self.shapes.items() if k in symbols and k not in names}
        missing: list[tuple[str, str]] = []  # (input, what is unknown)
        for inp in inputs:
            t = inp.type.tensor_type
            if not inp.type.HasField("tensor_type"):
                raise ModelError(f"input '{inp.name}' is not a tensor")
            dtype = _input_dtype(t.elem_type)
            if dtype is None:
                given_type = helper.tensor_dtype_to_string(t.elem_type) if t.elem_type else "no element type"
                raise UnsupportedModelError([Unsupported("input", inp.name, self.opset, (
                    f"inputs must be tensors of {', '.join(d.value for d in DType)}, not {given_type}"))])
            dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else sizes.get(d.dim_param)
                    for d in t.shape.dim]
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
            elif not t.HasField("shape"):
                missing.append((inp.name, "its whole shape (the model declares none)"))
                continue
            elif any(d is None for d in dims):
                missing += [(inp.name, f"dim {k} '{d.dim_param or '?'}'") for k, (d, v) in
                            enumerate(zip(t.shape.dim, dims)) if v is None]
                continue
            else:
                shape = tuple(dims)
            self.b.inputs.append(inp.name)
            self.b.values[inp.name] = Value(inp.name, TensorType(shape, dtype.value))
        if missing:
            raise InputShapeError(_missing_sizes(missing, inputs))

    def _decode(self, proto_node, index: int) -> OnnxNode:
        from onnx import helper

        attrs = {a.name: helper.get_attribute_value(a) for a in proto_node.attribute}
        domain = proto_node.domain if proto_node.domain not in ("", "ai.onnx") else ""
        name = proto_node.name or f"{proto_node.op_type}_{index}"
        return OnnxNode(proto_node.op_type if not domain else f"{domain}.{proto_node.op_type}", name,
                         list(proto_node.input), list(proto_node.output), attrs, self.opset)

    @staticmethod
    def _converter_of(node: OnnxNode) -> tuple[onnx_convert.Converter | None, str | None]:
        """The converter of ``node``, or why there is none (an unknown operator or attribute)."""
        conv = onnx_convert.lookup(node.op_type, node.opset)
        if conv is None:
            ranges = onnx_convert.opset_ranges(node.op_type)
            if ranges:
                return None, f"this operator is supported at opsets {ranges}, not {node.opset}"
            return None, "this operator is not supported"
        extra = sorted(set(node.attrs) - conv.attrs)
        if extra:
            return None, f"unsupported attribute(s) {', '.join(extra)}"
        return conv, None

    def _convert(self, node: OnnxNode) -> str | None:
        """Convert one node; the reason it is unsupported, or None."""
        conv, reason = self._converter_of(node)
        if conv is None:
            return reason
        try:
            conv.fn(self, node)
        except Reject as e:
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
            self.folded[o] = np.asarray(r).astype(numpy_dtype(self.b.values[o].dtype), copy=False)
        return self.folded[name]

    def need_static(self, node: OnnxNode, k: int, what: str) -> np.ndarray | None:
        """Input ``k`` as a constant (None when omitted); rejects the node when it is computed at run time."""
        name = node.input(k)
        if name is None:
            return None
        value = self.static(name)
        if value is None:
            raise Reject(f"its {what} (input {k}, '{name}') must be a constant, but it is computed at run time")
        return value

    def is_read(self, name: str) -> bool:
        return name in self.read

    def emit(self, op: Op, inputs: Sequence[str], outputs: Sequence[str] | None, name: str) -> tuple[str, ...]:
        outs = self.b.add(op, inputs, name, outputs)
        node = self.b.nodes[-1]
        for o in outs:
            self.producer[o] = node
        return outs

    def constant(self, array: np.ndarray, hint: str, name: str | None = None) -> str:
        return self.b.add_constant(name, np.asarray(array), hint)


def _input_dtype(elem_type: int) -> DType | None:
    """The dtype of an ONNX tensor element type, or None for one kernels do not compute (or none given)."""
    from onnx import helper

    if not elem_type:
        return None
    try:
        return DType.of(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError, DTypeError):
        return None


def _symbol_size(name: str, value) -> int:
    size = [int(v) for v in np.asarray(value).reshape(-1)]
    if len(size) != 1 or size[0] < 1:
        raise InputShapeError(f"symbolic dimension '{name}' needs one positive size, got {list(size)}")
    return size[0]


def _missing_sizes(missing: list[tuple[str, str]], inputs) -> str:
    """The message naming every unknown input dimension, with the ``--shape`` items that would give them: one per
    symbolic dimension, one per input whose unknown dimensions have no name."""
    lines = "; ".join(f"input '{name}' {what}" for name, what in missing)
    symbols = sorted({what.split("'")[1] for _, what in missing if "'" in what} - {"?"})
    unnamed = {name for name, what in missing if "'?'" in what or "whole" in what}
    items: list[tuple[str, int | tuple[int, ...]]] = [(s, 1) for s in symbols]
    for inp in inputs:
        if inp.name in unnamed:
            dims = inp.type.tensor_type.shape.dim
            items.append((inp.name, tuple(d.dim_value or 1 for d in dims) if dims else (1, 3, 224, 224)))
    cli = "--shape " + " ".join(f"{k}={v if isinstance(v, int) else ','.join(map(str, v))}" for k, v in items)
    python = ", ".join(f"'{k}': {v}" for k, v in items)
    return (f"the model's inputs have dynamic dimensions with no size given: {lines}. Give them static sizes, e.g. "
            f"{cli} (shapes={{{python}}} in Python)")


def _dims_str(dims) -> str:
    return "[" + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims) + "]"


#: the ONNX operators the importer reads
SUPPORTED_OPERATORS = onnx_convert.supported_operators()

"""How an operator module says how ONNX nodes become graph nodes: converters registered per ONNX operator type and
opset range, and what a converter may ask of the importer (``ImportContext``).

A converter is ``fn(ctx, node)``: it reads the ONNX node (``OnnxNode``: decoded attributes, inputs) and emits graph
nodes through ``ctx``, or raises ``Reject`` saying why the node cannot be imported. ``@converter("Clip",
attrs=(...), since=11)`` registers one for opsets 11 and later; a type may have several, for disjoint opset ranges
(the ONNX operator changed meaning). An attribute the converter does not list makes the node unsupported, so no
attribute is ignored by accident. ``simple`` makes the converter of an operator whose ONNX attributes are its own
fields.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

from ..graph.ir import TensorType
from ..graph.op import Op


class Reject(Exception):
    """A node cannot be imported; the message says why."""


@dataclass
class OnnxNode:
    """One ONNX node as the converters see it: decoded attributes, inputs ("" for an omitted optional one)."""

    op_type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict
    opset: int

    def attr(self, key: str, default=None):
        return self.attrs.get(key, default)

    def str_attr(self, key: str, default: str) -> str:
        v = self.attrs.get(key, default)
        return v.decode() if isinstance(v, bytes) else v

    def input(self, k: int) -> str | None:
        return self.inputs[k] if k < len(self.inputs) and self.inputs[k] else None


class ImportContext(Protocol):
    """What a converter may ask of the importer."""

    def type(self, name: str) -> TensorType: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def static(self, name: str | None) -> np.ndarray | None:
        """The value of ``name`` if it is a constant or computed only from constants (evaluated now), else None."""

    def need_static(self, node: OnnxNode, k: int, what: str) -> np.ndarray | None:
        """Input ``k`` as a constant (None when omitted); rejects the node when it is computed at run time."""

    def is_read(self, name: str) -> bool:
        """Whether a node of the model reads ``name``, or it is an output of the model."""

    def emit(self, op: Op, inputs: Sequence[str], outputs: Sequence[str] | None, name: str) -> tuple[str, ...]:
        """Append ``op(inputs)``; its outputs are ``outputs`` (fresh names when None)."""

    def constant(self, array: np.ndarray, hint: str, name: str | None = None) -> str:
        """Add a constant; returns its name."""


ConvertFn = Callable[[ImportContext, OnnxNode], None]


@dataclass(frozen=True)
class Converter:
    """The converter of ``op_type`` for opsets ``since`` to ``until`` (None: the newest), reading ``attrs``."""

    op_type: str
    fn: ConvertFn
    attrs: frozenset[str]
    since: int = 1
    until: int | None = None

    def covers(self, opset: int) -> bool:
        return self.since <= opset and (self.until is None or opset <= self.until)


_CONVERTERS: dict[str, list[Converter]] = {}


def converter(*op_types: str, attrs: Sequence[str] = (), since: int = 1, until: int | None = None):
    """Register the decorated ``fn(ctx, node)`` as the converter of ``op_types`` for opsets ``since``..``until``."""
    def wrap(fn: ConvertFn) -> ConvertFn:
        for t in op_types:
            mine = Converter(t, fn, frozenset(attrs), since, until)
            clash = [c for c in _CONVERTERS.get(t, []) if _overlap(c, mine)]
            assert not clash, f"two converters of {t} for one opset: {clash[0].fn.__qualname__}, {fn.__qualname__}"
            _CONVERTERS.setdefault(t, []).append(mine)
        return fn
    return wrap


def _overlap(a: Converter, b: Converter) -> bool:
    return (a.until is None or b.since <= a.until) and (b.until is None or a.since <= b.until)


def simple(op_type: str, cls: type, attrs: Mapping[str, object] = (), inputs: int = 1, since: int = 1) -> None:
    """Register the converter of an ONNX operator that maps to ``cls(**attributes)`` on its first ``inputs``
    inputs, with each ONNX attribute of ``attrs`` (name -> default, whose type it is converted to) a field."""
    defaults = dict(attrs)

    def convert(ctx: ImportContext, node: OnnxNode) -> None:
        fields = {k: type(d)(node.attr(k, d)) for k, d in defaults.items()}
        ctx.emit(cls(**fields), [node.input(k) for k in range(inputs)], node.outputs, node.name)

    convert.__qualname__ = f"convert_{op_type}"
    converter(op_type, attrs=tuple(defaults), since=since)(convert)


def lookup(op_type: str, opset: int) -> Converter | None:
    """The converter of ``op_type`` for ``opset``, or None."""
    return next((c for c in _CONVERTERS.get(op_type, ()) if c.covers(opset)), None)


def opset_ranges(op_type: str) -> str:
    """The opsets some converter of ``op_type`` reads, as text ("11 and later", "7 to 10, 13 and later"), or ""."""
    spans = sorted((c.since, c.until) for c in _CONVERTERS.get(op_type, ()))
    return ", ".join(f"{a} and later" if b is None else f"{a} to {b}" for a, b in spans)


def supported_operators() -> tuple[str, ...]:
    """The ONNX operator types some converter reads."""
    return tuple(sorted(_CONVERTERS))


# ------------------------------------------------------------------------------------------- helpers for converters

def axis(value: int, rank: int) -> int:
    """A possibly negative ONNX axis as an index; rejects one out of range."""
    a = value + rank if value < 0 else value
    if not 0 <= a < rank:
        raise Reject(f"axis {value} is out of range for rank {rank}")
    return a


def only_output(node: OnnxNode, what: str) -> None:
    """Rejects a node whose optional outputs beyond the first are read."""
    if any(node.outputs[1:]):
        raise Reject(f"its optional output(s) ({what}) are not supported at inference")


def ints(value) -> list[int]:
    """A constant's (or an attribute's) integers as a flat list."""
    return [int(v) for v in np.asarray(value).reshape(-1)]

"""Comparisons, logic and selection, elementwise with numpy broadcasting: ONNX Equal, Less, Greater, LessOrEqual,
GreaterOrEqual (numbers in, bool out), And, Or, Xor, Not (bool) and Where (a bool condition picks x or y).

Each is one formula like the arithmetic of ``elementwise``, and fuses into chains of element-by-element operators
(``passes.fuse_injective``); none is a ``Unary`` or ``Binary``, so none joins a convolution's epilogue (whose
steps keep its dtype). Bool tensors are stored one byte per element (``dtype.DType.bool``). A kernel of mixed element
widths (float in, bool out) splits its rows by the lanes of its widest dtype; the C code generator computes such a
loop element by element (it makes vectors of one dtype only).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..graph.errors import GraphError
from ..graph.ir import Graph, Node, TensorType
from ..graph.op import Pattern, broadcast_shapes, check_count
from ..target import Target
from .elementwise import Elementwise
from .kernel import KernelDef, lanes_of
from .map_op import element_kernel
from .math import NumpyMath
from .onnx_convert import simple


class MixedElementwise(Elementwise):
    """An elementwise operator whose inputs and output may differ in dtype; its kernel splits rows by the fewest
    lanes of any of them."""

    __slots__ = ()
    pattern = Pattern.BROADCAST

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        lanes = min(lanes_of(target, g.values[v].dtype, node) for v in (*node.inputs, node.outputs[0]))
        return element_kernel(g, node, lanes, self.element, self.name)


def _check_dtypes(op: Elementwise, inputs, what: str, ok) -> None:
    for t in inputs:
        if not ok(t.dtype):
            raise GraphError(f"{op.kind}: inputs must be {what} tensors, got {t.dtype}")


class Comparison(MixedElementwise):
    """``a OP b`` of two tensors of one dtype (numbers; bools too where ``bools``), a bool tensor."""

    __slots__ = ()
    arity = 2
    bools: ClassVar[bool] = False

    def infer(self, inputs):
        check_count(self, inputs, 2)
        a, b = inputs
        if a.dtype != b.dtype:
            raise GraphError(f"{self.kind}: operands have different dtypes {a.dtype} and {b.dtype}")
        if a.dtype == "bool" and not self.bools:
            raise GraphError(f"{self.kind}: operands must be numbers, got bool")
        return (TensorType(broadcast_shapes(self, a.shape, b.shape), "bool"),)

    def reference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.asarray(self.formula((a, b), NumpyMath(np.result_type(a, b))), bool)


@dataclass(frozen=True, slots=True)
class Equal(Comparison):
    name = "equal"
    bools = True

    def formula(self, xs, m):
        return m.equal(xs[0], xs[1])


@dataclass(frozen=True, slots=True)
class Less(Comparison):
    name = "less"

    def formula(self, xs, m):
        return xs[0] < xs[1]


@dataclass(frozen=True, slots=True)
class Greater(Comparison):
    name = "greater"

    def formula(self, xs, m):
        return xs[0] > xs[1]


@dataclass(frozen=True, slots=True)
class LessOrEqual(Comparison):
    name = "less_or_equal"

    def formula(self, xs, m):
        return xs[0] <= xs[1]


@dataclass(frozen=True, slots=True)
class GreaterOrEqual(Comparison):
    name = "greater_or_equal"

    def formula(self, xs, m):
        return xs[0] >= xs[1]


class Logical(MixedElementwise):
    """A function of bool tensors (``arity`` of them), a bool tensor."""

    __slots__ = ()

    def infer(self, inputs):
        check_count(self, inputs, self.arity)
        _check_dtypes(self, inputs, "bool", lambda dt: dt == "bool")
        return (TensorType(broadcast_shapes(self, *(t.shape for t in inputs)), "bool"),)


@dataclass(frozen=True, slots=True)
class And(Logical):
    name = "and"
    arity = 2

    def formula(self, xs, m):
        return xs[0] & xs[1]


@dataclass(frozen=True, slots=True)
class Or(Logical):
    name = "or"
    arity = 2

    def formula(self, xs, m):
        return xs[0] | xs[1]


@dataclass(frozen=True, slots=True)
class Xor(Logical):
    name = "xor"
    arity = 2

    def formula(self, xs, m):
        return m.not_equal(xs[0], xs[1])


@dataclass(frozen=True, slots=True)
class Not(Logical):
    name = "not"
    pattern = Pattern.ELEMWISE

    def formula(self, xs, m):
        return ~xs[0]


@dataclass(frozen=True, slots=True)
class Where(MixedElementwise):
    """``x if cond else y``, the three broadcast together; x and y of one dtype, cond bool."""

    name = "where"
    arity = 3

    def infer(self, inputs):
        check_count(self, inputs, 3)
        cond, x, y = inputs
        if cond.dtype != "bool":
            raise GraphError(f"Where: the condition must be a bool tensor, got {cond.dtype}")
        if x.dtype != y.dtype:
            raise GraphError(f"Where: x and y have different dtypes {x.dtype} and {y.dtype}")
        return (TensorType(broadcast_shapes(self, cond.shape, x.shape, y.shape), x.dtype),)

    def reference(self, cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where(cond, x, y)

    def formula(self, xs, m):
        return m.select(xs[0], xs[1], xs[2])


for _type, _cls in (("Equal", Equal), ("Less", Less), ("Greater", Greater), ("LessOrEqual", LessOrEqual),
                    ("GreaterOrEqual", GreaterOrEqual), ("And", And), ("Or", Or), ("Xor", Xor), ("Where", Where)):
    simple(_type, _cls, inputs=_cls.arity)
simple("Not", Not)

"""Operators computed element by element: each output element is a function of input elements found from its index
(``MapOp``). Elementwise arithmetic reads the elements at the same index (broadcast), a transpose, slice, pad or
concatenation reads one element elsewhere (TVM's injective operators).

A ``MapOp`` states that function once, ``element(xs, idx)``: the output element at logical index ``idx`` from its
inputs ``xs``, each an ``Operand`` that gives its element at any logical index. Its kernel is one pass over the
output (``element_kernel``), and, since an operand may as well be another operator's ``element``, a chain of such
operators is computed as one (``fused.Fused``, made by ``passes.fuse_injective``) with no tensor stored between.
"""
from __future__ import annotations

from typing import Callable, ClassVar, Sequence

from ..graph.ir import Graph, Node
from ..graph.op import Op
from ..target import Target
from ..te import Expr
from .kernel import KernelArgs, KernelDef, broadcast_index, lanes_of, map_kernel, read, zero_index


class Operand:
    """An input of an element function: its ``shape``, ``dtype`` and ``at(idx)``, its element at logical ``idx``."""

    __slots__ = ("shape", "dtype", "_at")

    def __init__(self, shape: tuple[int, ...], dtype: str, at: Callable[[tuple[Expr, ...]], Expr]):
        self.shape, self.dtype, self._at = shape, dtype, at

    def at(self, idx: Sequence[Expr]) -> Expr:
        return self._at(tuple(idx))

    def broadcast(self, idx: Sequence[Expr]) -> Expr:
        """The element that numpy broadcasting gives output element ``idx`` (trailing axes align)."""
        return self.at(broadcast_index(self.shape, idx))


def node_operands(a: KernelArgs, node: Node) -> list[Operand]:
    """The node's inputs as operands, each a placeholder bound in ``a`` and read in its layout."""
    found = []
    for name in node.inputs:
        t, v, layout = a.value(name, "in"), a.g.values[name], a.layout(name)
        found.append(Operand(v.shape, v.dtype, lambda idx, t=t, layout=layout: read(t, layout, idx) if idx
                             else t[zero_index()]))
    return found


def element_kernel(g: Graph, node: Node, lanes: int, element: Callable[[Sequence[Operand], tuple], Expr],
                   kind: str) -> KernelDef:
    """The kernel of ``element(inputs, idx)`` over the node's output (``kernel.map_kernel``'s schedule)."""
    a = KernelArgs(g)
    xs = node_operands(a, node)
    return map_kernel(a, node, lanes, lambda idx: element(xs, idx), kind)


class MapOp(Op):
    """An operator whose output elements are ``element(xs, idx)`` (see the module docstring); ``name``: its
    kernel's kind."""

    __slots__ = ()
    name: ClassVar[str] = ""

    def element(self, xs: Sequence[Operand], idx: tuple[Expr, ...]) -> Expr:  # pragma: no cover - abstract
        raise NotImplementedError

    def reads_once(self, input_shape: tuple[int, ...], output_shape: tuple[int, ...]) -> bool:
        """Whether the output reads each element of an input of ``input_shape`` at most once (a producer fused into
        it is then computed no more often than on its own)."""
        return True

    def absorbs(self, output_shape: tuple[int, ...]) -> bool:
        """Whether a fused node may end with this operator: one that must keep its own layout rule (a channel
        concatenation of blocked images) does not absorb its producers."""
        return True

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        return element_kernel(g, node, lanes_of(target, g.values[node.outputs[0]].dtype, node), self.element,
                              self.name)

"""``fuse_elementwise``: chains of elementwise nodes become one node (``operators.FusedElementwise``), computed in one
pass over the output with no tensor stored between them.

The rule reads the operators' patterns: an elementwise operator (``operators.Elementwise``) whose pattern is
``ELEMWISE`` or ``BROADCAST`` joins its reader when that reader is its only one, is itself such an operator, has an
output of the same shape and dtype, and the node's output is not a graph output; chains join chains. (A node whose output is smaller than its reader's, broadcast into
it, stays a kernel of its own: fused, it would be computed again for every element it broadcasts to.) It runs after
``fuse_epilogues``, so the chains a convolution or dense layer absorbs are already in its epilogue.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..graph.ir import Graph, GraphBuilder, Node
from ..graph.op import Pattern
from ..operators import Elementwise
from ..operators.fused import FusedElementwise


@dataclass
class _Chain:
    """Steps of elementwise operators over the chain's inputs (``FusedElementwise``'s indexing)."""

    steps: list[tuple[Elementwise, tuple[int, ...]]] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)

    def input(self, name: str) -> int:
        if name not in self.inputs:
            self.inputs.append(name)
        return self.inputs.index(name)

    def inline(self, other: "_Chain") -> int:
        """Append ``other``'s steps (its inputs become this chain's); the argument that reads its result."""
        base = len(self.steps)
        for op, args in other.steps:
            self.steps.append((op, tuple(self.input(other.inputs[a]) if a >= 0 else -1 - (base + (-1 - a))
                                         for a in args)))
        return -len(self.steps)


def _elementwise(node: Node) -> bool:
    return isinstance(node.op, Elementwise) and node.op.pattern <= Pattern.BROADCAST


def fuse_elementwise(g: Graph) -> Graph:
    consumers = g.consumers()
    outputs = set(g.outputs)

    def joins_reader(node: Node) -> bool:
        out = node.outputs[0]
        readers = consumers.get(out, [])
        if out in outputs or len(readers) != 1 or not _elementwise(readers[0]):
            return False
        mine, theirs = g.values[out], g.values[readers[0].outputs[0]]
        return mine.shape == theirs.shape and mine.dtype == theirs.dtype

    b = GraphBuilder.like(g)
    pending: dict[str, _Chain] = {}  # value -> the chain that computes it, to be inlined into its reader
    for node in g.nodes:
        if not _elementwise(node):
            b.keep(node, g)
            continue
        chain = _Chain()
        args: dict[str, int] = {}
        for v in node.inputs:
            if v not in args:
                args[v] = chain.inline(pending.pop(v)) if v in pending else chain.input(v)
        chain.steps.append((node.op, tuple(args[v] for v in node.inputs)))
        if joins_reader(node):
            pending[node.outputs[0]] = chain
        elif len(chain.steps) == 1:
            b.keep(node, g)
        else:
            b.add(FusedElementwise(tuple(chain.steps), len(chain.inputs)), chain.inputs, node.name,
                  outputs=node.outputs)
    assert not pending, "a held node's reader was never reached"
    return b.build()

"""``fuse_injective``: chains of elementwise and injective nodes become one node (``operators.Fused``), computed in
one pass over the output with no tensor stored between them.

The rule, after TVM's, reads only what the operators declare: a node of an element-by-element operator
(``operators.MapOp``, pattern ``ELEMWISE``, ``BROADCAST`` or ``INJECTIVE``: arithmetic, activations, casts,
transposes, slices, pads, concatenations) joins its reader when that reader is its only one and is such an operator
too, the node's output is not a graph output, and the reader reads each of its elements at most once
(``MapOp.reads_once``: an elementwise reader of the same shape, a transpose, a slice; not a reader that broadcasts
it, which would compute it again for every copy) and takes no other layout rule (``MapOp.absorbs``: a channel
concatenation of blocked images keeps its own). Chains join chains, so ``x + b -> Transpose -> Slice`` is one
kernel. A reshape is not fused: on plain tensors it moves nothing (its output is its input's memory).

It runs after ``fuse_epilogues``, so the elementwise chains a convolution or dense layer absorbs are already in its
epilogue.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..graph.ir import Graph, GraphBuilder, Node
from ..graph.op import Pattern
from ..operators import Elementwise, Fused, MapOp


@dataclass
class _Chain:
    """Steps over the chain's inputs (``Fused``'s indexing)."""

    steps: list[tuple[MapOp, tuple[int, ...]]] = field(default_factory=list)
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


def _fusable(node: Node) -> bool:
    return isinstance(node.op, MapOp) and not isinstance(node.op, Fused) and node.op.pattern <= Pattern.INJECTIVE


def fuse_injective(g: Graph) -> Graph:
    consumers = g.consumers()
    outputs = set(g.outputs)

    def joins_reader(node: Node) -> bool:
        out = node.outputs[0]
        readers = consumers.get(out, [])
        if out in outputs or len(readers) != 1 or not _fusable(readers[0]):
            return False
        reader = readers[0]
        # an elementwise reader reads a value it takes twice at one index (x * x); others at two
        once = isinstance(reader.op, Elementwise) or reader.inputs.count(out) == 1
        out_shape = g.values[reader.outputs[0]].shape
        return once and reader.op.absorbs(out_shape) and reader.op.reads_once(g.values[out].shape, out_shape)

    b = GraphBuilder.like(g)
    pending: dict[str, _Chain] = {}  # value -> the chain that computes it, to be inlined into its reader
    for node in g.nodes:
        if not _fusable(node):
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
            b.add(Fused(tuple(chain.steps), len(chain.inputs)), chain.inputs, node.name, outputs=node.outputs)
    assert not pending, "a held node's reader was never reached"
    return b.build()

"""``fold_constants``: every node whose inputs are all constants becomes constants (evaluated by the interpreter)."""
from __future__ import annotations

import numpy as np

from ..graph.interpret import evaluate
from ..graph.ir import Graph, GraphBuilder
from ..graph.op import numpy_dtype


def fold_constants(g: Graph) -> Graph:
    b = GraphBuilder.like(g)
    for node in g.nodes:
        if all(i in b.constants for i in node.inputs):
            for o, r in zip(node.outputs, evaluate(node.op, [b.constants[i] for i in node.inputs])):
                b.add_constant(o, np.asarray(r).astype(numpy_dtype(g.values[o].dtype), copy=False))
        else:
            b.keep(node, g)
    return b.build()

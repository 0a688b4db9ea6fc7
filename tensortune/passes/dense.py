"""``matmul_to_dense``: a ``MatMul`` of activations ``[..., K]`` by a constant ``[K, N]`` matrix becomes a ``Dense``
layer with the weight stored ``[N, K]`` (inputs of rank > 2 are reshaped to 2-D and back)."""
from __future__ import annotations

import math

import numpy as np

from ..graph.ir import Graph, GraphBuilder
from ..operators import Dense, MatMul, Reshape


def matmul_to_dense(g: Graph) -> Graph:
    b = GraphBuilder.like(g)
    for node in g.nodes:
        x, w = node.inputs[0], node.inputs[-1]
        if not isinstance(node.op, MatMul) or not g.is_constant(w) or g.is_constant(x) or \
                len(g.values[w].shape) != 2 or len(g.values[x].shape) < 2:
            b.keep(node, g)
            continue
        weight = b.add_constant(None, np.ascontiguousarray(g.constants[w].T), f"{node.name}_weight")
        shape = g.values[x].shape
        if len(shape) == 2:
            b.add(Dense(), [x, weight], node.name, outputs=node.outputs)
            continue
        (flat,) = b.add(Reshape((math.prod(shape[:-1]), shape[-1])), [x], f"{node.name}_flat")
        (y,) = b.add(Dense(), [flat, weight], node.name)
        b.add(Reshape(g.values[node.outputs[0]].shape), [y], f"{node.name}_unflat", outputs=node.outputs)
    return b.build()

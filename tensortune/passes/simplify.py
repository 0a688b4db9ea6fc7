"""``remove_identities``: ``Identity`` nodes, and ``Reshape`` nodes to the shape their input already has, are
dropped; their readers read the input instead. (One whose output is a graph output stays: it names that output.)"""
from __future__ import annotations

from dataclasses import replace

from ..graph.ir import Graph, GraphBuilder
from ..operators import Identity, Reshape


def remove_identities(g: Graph) -> Graph:
    b = GraphBuilder.like(g)
    alias: dict[str, str] = {}
    outputs = set(g.outputs)
    for node in g.nodes:
        inputs = tuple(alias.get(i, i) for i in node.inputs)
        trivial = isinstance(node.op, Identity) or (
            isinstance(node.op, Reshape) and node.op.shape == g.values[inputs[0]].shape)
        if trivial and node.outputs[0] not in outputs:
            alias[node.outputs[0]] = inputs[0]
            continue
        b.keep(replace(node, inputs=inputs), g)
    return b.build()

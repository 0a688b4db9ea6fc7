"""``eliminate_dead_nodes``: nodes none of whose outputs reach a graph output are dropped (and so are the
constants only they read)."""
from __future__ import annotations

from ..graph.ir import Graph, GraphBuilder


def eliminate_dead_nodes(g: Graph) -> Graph:
    live = set(g.outputs)
    kept = []
    for node in reversed(g.nodes):
        if any(o in live for o in node.outputs):
            kept.append(node)
            live.update(node.inputs)
    b = GraphBuilder.like(g)
    for node in reversed(kept):
        b.keep(node, g)
    return b.build()

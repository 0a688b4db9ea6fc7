"""``fuse_producers``: a node whose kernel can compute the producer of one of its inputs itself takes it in; the
fused node takes the consumer's place and name, and the producer's node is gone.

The rules are the operators' (``graph.op.PRODUCER_FUSIONS``, each registered by an operator module with
``producer_fusion``), so this pass names no operator. Today there is one: a 1x1 expansion computed by the depthwise
convolution that reads it, one kernel that never stores the expanded tensor (``operators.expansion``). A rule asks
that the producer's output be read by its consumer alone; a producer is taken in once, and a node taken in takes in
nothing itself.
"""
from __future__ import annotations

from ..graph.ir import Graph, GraphBuilder, Node
from ..graph.op import PRODUCER_FUSIONS
from ..target import Target


def fuse_producers(g: Graph, target: Target) -> Graph:
    found: dict[str, tuple[Node, Node]] = {}  # consumer -> (its producer, the fused node)
    absorbed: set[str] = set()
    for node in g.nodes:
        if node.name in absorbed:
            continue
        hit = next((h for rule in PRODUCER_FUSIONS if (h := rule(g, node, target)) is not None), None)
        if hit is not None and hit[0].name not in absorbed and hit[0].name not in found:
            found[node.name] = hit
            absorbed.add(hit[0].name)
    if not found:
        return g
    b = GraphBuilder.like(g)
    for node in g.nodes:
        if node.name not in absorbed:
            b.keep(found[node.name][1] if node.name in found else node, g)
    return b.build()

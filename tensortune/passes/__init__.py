"""Graph passes: each a named pure function ``Graph -> Graph`` (the input graph is never changed), and the
pipeline that runs them in order, with a ``trace`` hook that sees the graph after each pass.

The graph verifies itself whenever one is built, so a pass that breaks a rule fails where it breaks it.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

from ..graph.ir import Graph
from ..target import Target
from .dead_nodes import eliminate_dead_nodes
from .dense import matmul_to_dense
from .fold_batchnorm import fold_batchnorm
from .fold_constants import fold_constants
from .fuse_epilogues import fuse_epilogues
from .fuse_injective import fuse_injective
from .fuse_producers import fuse_producers
from .plan_layout import Blocks, plan_layout
from .simplify import remove_identities
from .sink_reshapes import sink_reshapes

GraphPass = Callable[[Graph], Graph]


def graph_passes(target: Target, blocks: Blocks | None = None) -> tuple[tuple[str, GraphPass], ...]:
    """The pipeline for ``target`` (its vectors give the channel blocks of the layout; ``blocks``: other blocks of
    convolutions' outputs, see ``plan_layout``)."""
    return (
        ("fold_constants", fold_constants),
        ("eliminate_dead_nodes", eliminate_dead_nodes),
        ("remove_identities", remove_identities),
        ("fold_batchnorm", fold_batchnorm),
        ("matmul_to_dense", matmul_to_dense),
        ("sink_reshapes", sink_reshapes),
        ("fold_constants_again", fold_constants),
        ("fuse_epilogues", fuse_epilogues),
        ("fuse_injective", fuse_injective),
        ("fuse_epilogues_again", fuse_epilogues),  # chains fuse_injective made (SiLU) join their producer
        ("plan_layout", partial(plan_layout, target=target, blocks=blocks)),
        ("fuse_producers", partial(fuse_producers, target=target)),
        ("eliminate_dead_nodes_again", eliminate_dead_nodes),
    )


def optimize(g: Graph, target: Target, trace: Callable[[str, Graph], None] | None = None,
             blocks: Blocks | None = None) -> Graph:
    """Run every pass of ``graph_passes(target, blocks)`` in order; ``trace(name, graph)`` sees each result."""
    for name, fn in graph_passes(target, blocks):
        g = fn(g)
        if trace is not None:
            trace(name, g)
    return g


__all__ = ["Blocks", "GraphPass", "eliminate_dead_nodes", "fold_batchnorm", "fold_constants", "fuse_epilogues",
           "fuse_injective", "fuse_producers", "graph_passes", "matmul_to_dense", "optimize", "plan_layout",
           "remove_identities", "sink_reshapes"]

"""A numpy reference executor of the graph IR: every node runs its operator's ``reference``, independent of code
generation.

Tests run a graph here before and after each pass (a pass must not change results), and constant folding
evaluates nodes with ``evaluate``. Layouts change where elements are stored, not what they are, so this
executor ignores them.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from .errors import GraphError
from .ir import Graph
from .op import Op, numpy_dtype


def interpret(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``inputs`` (by input name); returns its outputs by name."""
    env: dict[str, np.ndarray] = dict(graph.constants)
    for name in graph.inputs:
        if name not in inputs:
            raise GraphError(f"interpret: no array for graph input '{name}'")
        a = np.asarray(inputs[name])
        if a.shape != graph.values[name].shape:
            raise GraphError(f"interpret: input '{name}' has shape {a.shape}, expected {graph.values[name].shape}")
        env[name] = a
    for node in graph.nodes:
        results = evaluate(node.op, [env[i] for i in node.inputs])
        for o, r in zip(node.outputs, results):
            env[o] = np.asarray(r).astype(numpy_dtype(graph.values[o].dtype), copy=False)
    return {o: env[o] for o in graph.outputs}


def evaluate(op: Op, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The outputs of ``op`` applied to ``args``."""
    out = op.reference(*args)
    return list(out) if isinstance(out, (list, tuple)) else [out]

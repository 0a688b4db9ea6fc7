"""``sink_reshapes``: elementwise nodes after a ``Reshape`` are computed before it, on the tensor it reshapes.

A reshape of a plain tensor is free (its output is its input's memory), but it stands between a producer and the
elementwise nodes after it, so they cannot join the producer's epilogue. Exporters put one exactly there: a
``MatMul`` of ``[1, 128, 768]`` activations becomes a ``Dense`` of ``[128, 768]`` between reshapes
(``matmul_to_dense``), and the bias ``Add``, GELU and residual ``Add`` that follow read the reshaped ``[1, 128,
3072]`` value. Since an elementwise node computes each element alone, it may as well run on the reshaped tensor,
when each of its operands is one of:

* a value that is the same reshape of a tensor (``x`` viewed with the shape ``y``), then read as ``x``;
* a constant whose broadcasting is the same on both shapes: after its leading 1s, its axes are trailing axes that
  ``x`` and ``y`` share (a bias over the last axis, a scalar), then read with its leading 1s dropped;
* a run-time value of the reshaped shape (a residual), then read through a reshape of its own, which is free too.

Its output is then a view too, and the nodes after it sink in turn; a view is materialized as the original
``Reshape`` (under its original name) where anything else reads it. Dead reshapes left behind are removed by the
pipeline's dead-node pass.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..graph.ir import Graph, GraphBuilder, Node
from ..operators import Elementwise, Reshape


@dataclass(frozen=True)
class _View:
    """A value equal to ``Reshape(shape)(source)``."""

    source: str
    shape: tuple[int, ...]


def _core(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` without its leading 1s."""
    return shape[next((k for k, d in enumerate(shape) if d != 1), len(shape)):]


def _same_broadcast(const_shape: tuple[int, ...], source: tuple[int, ...], shape: tuple[int, ...]) -> bool:
    """Whether a constant of ``const_shape`` broadcasts onto ``source`` as it does onto ``shape``."""
    r = len(_core(const_shape))
    return r == 0 or (r <= min(len(source), len(shape)) and source[-r:] == shape[-r:])


def sink_reshapes(g: Graph) -> Graph:
    b = GraphBuilder.like(g)
    views: dict[str, _View] = {}
    emitted: set[str] = set()  # views already materialized as their Reshape

    def materialize(name: str) -> None:
        if name in views and name not in emitted:
            emitted.add(name)
            v = views[name]
            b.add(Reshape(v.shape), [v.source], f"{name}_reshape", outputs=[name])

    def sunk_inputs(node: Node) -> list[str] | None:
        """``node``'s inputs read on the reshaped tensors, or None when it cannot sink."""
        if not isinstance(node.op, Elementwise) or node.outputs[0] in g.outputs:
            return None
        found = [views[i] for i in node.inputs if i in views]
        if not found:
            return None
        shape, source = found[0].shape, b.values[found[0].source].shape
        if any(v.shape != shape or b.values[v.source].shape != source for v in found) or \
                g.values[node.outputs[0]].shape != shape:
            return None
        inputs = []
        for i in node.inputs:
            if i in views:
                inputs.append(views[i].source)
            elif g.is_constant(i) and _same_broadcast(g.values[i].shape, source, shape):
                c = g.constants[i]
                inputs.append(b.add_constant(None, c.reshape(_core(c.shape)), f"{i}_sunk"))
            elif g.values[i].shape == shape:
                (flat,) = b.add(Reshape(source), [i], f"{i}_flat")
                inputs.append(flat)
            else:
                return None
        return inputs

    for node in g.nodes:
        if isinstance(node.op, Reshape) and not g.is_constant(node.inputs[0]) and node.outputs[0] not in g.outputs:
            x = node.inputs[0]
            source = views[x].source if x in views else x
            views[node.outputs[0]] = _View(source, node.op.shape)
            continue
        inputs = sunk_inputs(node)
        if inputs is not None:
            (out,) = b.add(node.op, inputs, node.name)
            views[node.outputs[0]] = _View(out, g.values[node.outputs[0]].shape)
            continue
        for i in node.inputs:
            materialize(i)
        b.keep(node, g)
    for o in g.outputs:
        materialize(o)
    return b.build()

"""``fuse_epilogues``: elementwise nodes after an out-fusable node or a reduction join it as its epilogue.

The rule reads only the operators' fusion patterns (``graph.op.Pattern``), after TVM's: a node whose operator is
``OUT_FUSABLE`` or a ``REDUCTION`` and computes an epilogue (``operators.WithEpilogue``: convolutions, dense layers,
poolings) absorbs the ``ELEMWISE`` or ``BROADCAST`` node that reads its output (an ``operators.Elementwise``, its
formula computed on the result in registers before it is stored), then the one after that, and so on. A chain ``Conv
-> Add(bias) -> Relu -> Add(residual) -> Clip`` becomes one ``Conv`` node whose epilogue is the chain, so one kernel
computes it and no intermediate tensor is stored; a new activation joins with no edit here. A node joins when the
value it reads is used by it alone (and is not a graph output) and its result has that value's shape. While the
epilogue of a convolution or dense layer is still empty, a per-channel constant ``Add``/``Sub`` is folded into its
bias and a per-channel constant ``Mul``/``Div`` into its weights and bias. The fused node takes the place of the
last node it absorbs, so every operand it reads (a residual computed after the convolution) is defined before it.

A value read twice by one formula (SiLU, ``x * sigmoid(x)``: a ``Sigmoid`` and a ``Mul`` read the convolution) has
two readers here; ``fuse_injective`` makes them one ``Fused`` node, and the pass runs again after it: a fused chain
of elementwise steps over the value and scalar constants joins as one step (``operators.fused.ElementwiseChain``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..graph.ir import Graph, GraphBuilder, Node
from ..graph.op import Pattern
from ..operators import Add, Binary, ConvLike, Div, Elementwise, EpilogueStep, Fused, Mul, Sub, Unary, WithEpilogue
from ..operators.fused import ElementwiseChain


@dataclass(frozen=True)
class _Pending:
    """An out-fusable node whose output may still absorb its reader."""

    op: WithEpilogue
    inputs: tuple[str, ...]
    name: str
    output: str


def _join(g: Graph, p: _Pending, node: Node) -> tuple[EpilogueStep, str | None] | None:
    """How ``node`` joins ``p``'s epilogue (the step and its operand), or None when it cannot."""
    v = p.output
    out = g.values[node.outputs[0]]
    if out.shape != g.values[v].shape or out.dtype != g.values[v].dtype:
        return None
    if isinstance(node.op, Fused):  # a chain over the value and scalars, made by fuse_injective
        scalars = {i: g.constants[i].reshape(-1)[0] for i in node.inputs if g.is_constant(i) and g.constants[i].size == 1}
        chain = ElementwiseChain.of(node.op, node.inputs, v, scalars)
        return None if chain is None else (EpilogueStep(chain), None)
    if not isinstance(node.op, Elementwise) or node.op.pattern > Pattern.BROADCAST:
        return None
    if isinstance(node.op, Unary):
        return EpilogueStep(node.op), None
    if not isinstance(node.op, Binary) or node.inputs[0] == node.inputs[1]:
        return None
    left = node.inputs[1] == v
    if left and not node.op.fuses_as_right_operand:
        return None
    return EpilogueStep(node.op, operand_left=left), node.inputs[0] if left else node.inputs[1]


def _per_channel(g: Graph, name: str, out_shape: tuple[int, ...]) -> np.ndarray | None:
    """A constant that varies only along axis 1 of ``out_shape``, as a vector over that axis; else None."""
    if not g.is_constant(name):
        return None
    a = g.constants[name]
    shape = (1,) * (len(out_shape) - a.ndim) + a.shape
    if any(d != 1 for k, d in enumerate(shape) if k != 1):
        return None
    return np.broadcast_to(a.reshape(-1), (out_shape[1],)).astype(np.float64)


def _fold_into_weights(g: Graph, b: GraphBuilder, p: _Pending, step: EpilogueStep, operand: str) -> _Pending | None:
    """``p`` with a per-channel constant add/sub/mul/div folded into its bias or weights, or None."""
    op = step.op
    if not isinstance(p.op, ConvLike) or p.op.epilogue or not isinstance(op, (Add, Sub, Mul, Div)) or \
            (step.operand_left and not isinstance(op, (Add, Mul))):  # ``bias + y`` as well as ``y + bias``
        return None
    k = _per_channel(g, operand, g.values[p.output].shape)
    if k is None or not g.is_constant(p.inputs[1]) or (p.op.has_bias and not g.is_constant(p.inputs[2])):
        return None
    w = g.constants[p.inputs[1]].astype(np.float64)
    bias = g.constants[p.inputs[2]].astype(np.float64) if p.op.has_bias else np.zeros(w.shape[0])
    if isinstance(op, (Add, Sub)):
        bias = bias + (k if isinstance(op, Add) else -k)
    else:
        k = k if isinstance(op, Mul) else 1.0 / k
        w, bias = w * k.reshape((-1,) + (1,) * (w.ndim - 1)), bias * k
    dtype = g.values[p.output].dtype
    w_name = b.add_constant(None, w.astype(dtype), f"{p.name}_w")
    b_name = b.add_constant(None, bias.astype(dtype), f"{p.name}_b")
    inputs = (p.inputs[0], w_name, b_name) + p.inputs[p.op.num_base_inputs:]
    return replace(p, op=replace(p.op, has_bias=True), inputs=inputs)


def fuse_epilogues(g: Graph) -> Graph:
    consumers = g.consumers()
    outputs = set(g.outputs)
    b = GraphBuilder.like(g)
    pending: dict[str, _Pending] = {}

    def may_absorb(p: _Pending) -> bool:
        readers = consumers.get(p.output, [])
        return p.output not in outputs and len(readers) == 1 and _join(g, p, readers[0]) is not None

    def emit(p: _Pending) -> None:
        b.add(p.op, p.inputs, p.name, outputs=[p.output])

    def hold_or_emit(p: _Pending) -> None:
        if may_absorb(p):
            pending[p.output] = p
        else:
            emit(p)

    for node in g.nodes:
        if isinstance(node.op, WithEpilogue) and node.op.pattern in (Pattern.OUT_FUSABLE, Pattern.REDUCTION):
            hold_or_emit(_Pending(node.op, node.inputs, node.name, node.outputs[0]))
            continue
        chosen = next((pending[i] for i in node.inputs if i in pending), None)
        for i in dict.fromkeys(node.inputs):  # operands computed by other held nodes are needed now
            if i in pending and pending[i] is not chosen:
                emit(pending.pop(i))
        if chosen is None:
            b.keep(node, g)
            continue
        del pending[chosen.output]
        step, operand = _join(g, chosen, node)  # type: ignore[misc]
        merged = _fold_into_weights(g, b, chosen, step, operand) if operand is not None else None
        if merged is None:
            op = replace(chosen.op, epilogue=chosen.op.epilogue + (step,))
            merged = replace(chosen, op=op, inputs=chosen.inputs + ((operand,) if operand else ()))
        hold_or_emit(replace(merged, output=node.outputs[0]))
    assert not pending, "a held node's reader was never reached"
    return b.build()

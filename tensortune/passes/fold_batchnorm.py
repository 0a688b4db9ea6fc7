"""``fold_batchnorm``: a BatchNorm after a convolution (2-D or 3-D) is folded into the convolution's weights and
bias; any other BatchNorm with constant statistics becomes a per-channel ``x * scale + shift`` (two elementwise nodes
that the epilogue fusion or one elementwise kernel take)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..graph.ir import Graph, GraphBuilder, Node
from ..operators import Add, BatchNorm, Conv, Mul
from ..operators.conv import Conv3d

_CONVS = (Conv, Conv3d)


def batchnorm_affine(node: Node, g: Graph) -> tuple[np.ndarray, np.ndarray] | None:
    """``(scale, shift)`` per channel of a BatchNorm whose statistics are constants, else None."""
    params = [g.constants.get(i) for i in node.inputs[1:]]
    if any(p is None for p in params):
        return None
    gamma, beta, mean, var = (p.astype(np.float64) for p in params)
    scale = gamma / np.sqrt(var + node.op.epsilon)
    return scale, beta - mean * scale


def fold_batchnorm(g: Graph) -> Graph:
    producers, consumers = g.producers(), g.consumers()
    outputs = set(g.outputs)
    folded: dict[str, Node] = {}  # conv output -> the BatchNorm folded into it
    for node in g.nodes:
        if not isinstance(node.op, BatchNorm) or batchnorm_affine(node, g) is None:
            continue
        conv = producers.get(node.inputs[0])
        if conv is not None and isinstance(conv.op, _CONVS) and not conv.op.epilogue and \
                len(consumers[node.inputs[0]]) == 1 and node.inputs[0] not in outputs and \
                g.is_constant(conv.inputs[1]) and (not conv.op.has_bias or g.is_constant(conv.inputs[2])):
            folded[node.inputs[0]] = node
    b = GraphBuilder.like(g)
    for node in g.nodes:
        if isinstance(node.op, _CONVS) and node.outputs[0] in folded:
            bn = folded[node.outputs[0]]
            scale, shift = batchnorm_affine(bn, g)  # type: ignore[misc]
            w = g.constants[node.inputs[1]]
            bias = g.constants[node.inputs[2]].astype(np.float64) if node.op.has_bias else 0.0
            scaled = w * scale.reshape((-1,) + (1,) * (w.ndim - 1))
            w2 = b.add_constant(None, scaled.astype(w.dtype), f"{node.name}_w_bn")
            b2 = b.add_constant(None, (bias * scale + shift).astype(w.dtype), f"{node.name}_b_bn")
            b.add(replace(node.op, has_bias=True), [node.inputs[0], w2, b2], node.name, outputs=bn.outputs)
        elif isinstance(node.op, BatchNorm) and node.inputs[0] in folded:
            continue
        elif isinstance(node.op, BatchNorm) and batchnorm_affine(node, g) is not None:
            scale, shift = batchnorm_affine(node, g)  # type: ignore[misc]
            x = g.values[node.inputs[0]]
            bshape = (-1,) + (1,) * (len(x.shape) - 2)
            k = b.add_constant(None, scale.reshape(bshape).astype(x.dtype), f"{node.name}_scale")
            s = b.add_constant(None, shift.reshape(bshape).astype(x.dtype), f"{node.name}_shift")
            (scaled,) = b.add(Mul(), [node.inputs[0], k], f"{node.name}_mul")
            b.add(Add(), [scaled, s], f"{node.name}_add", outputs=node.outputs)
        else:
            b.keep(node, g)
    return b.build()

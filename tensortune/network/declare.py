"""``declare``: the kernel of a graph node with its default schedule, picked by the node's operator."""
from __future__ import annotations

from ..dtype import DType
from ..errors import TensortuneError
from ..graph.ir import Graph, Node
from ..graph.ops import (LRN, Binary, Cast, Concat, Conv, Dense, Identity, MatMul, Pad, Pool, Relayout, Reshape, Slice,
                         Softmax, Transpose, Unary)
from ..target import Target
from .conv import conv_kernel
from .kernels import (KernelDef, NetworkCompileError, cast_kernel, concat_kernel, elementwise_kernel, lrn_kernel,
                      matmul_kernel, pad_kernel, pool_kernel, reshape_kernel, slice_kernel, softmax_kernel,
                      transpose_kernel)


def declare(g: Graph, node: Node, target: Target) -> KernelDef:
    """The kernel of ``node`` with its default schedule (``is_alias`` nodes have none)."""
    lanes = max(1, target.lanes(_dtype(g, node)))
    kind = type(node.op)
    if kind in _WITH_TARGET:
        return _WITH_TARGET[kind](g, node, target, lanes)
    if kind in _KERNELS:
        return _KERNELS[kind](g, node, lanes)
    raise NetworkCompileError(f"node '{node.name}' ({node.op}) has no kernel: {node.op.kind} is only supported when "
                              "it is folded into a constant at compile time")


#: operator kind -> its kernel's declaration (those of the first table also take the target)
_WITH_TARGET = {Conv: conv_kernel, Dense: conv_kernel, Pool: pool_kernel}
_KERNELS = {Unary: elementwise_kernel, Binary: elementwise_kernel, Relayout: elementwise_kernel,
            Identity: elementwise_kernel, Cast: cast_kernel, Reshape: reshape_kernel, Transpose: transpose_kernel,
            Slice: slice_kernel, Pad: pad_kernel, Concat: concat_kernel, MatMul: matmul_kernel, LRN: lrn_kernel,
            Softmax: softmax_kernel}


def _dtype(g: Graph, node: Node) -> DType:
    dt = g.values[node.outputs[0]].dtype
    try:
        return DType.of(dt)
    except TensortuneError:
        raise NetworkCompileError(f"node '{node.name}' makes a {dt} tensor at run time; compiled networks compute "
                                  "float32 (and fold integer shape computations at compile time)") from None

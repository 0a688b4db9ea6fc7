"""Matrix products: ``MatMul`` (numpy's, batched with broadcasting; ONNX MatMul and Gemm import to it) and
``Dense`` (activations by a constant weight, which ``passes.matmul_to_dense`` makes of a MatMul and which runs as
the 1x1 convolution of 1x1 images: ``conv.ConvLike``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.errors import GraphError, NetworkCompileError
from ..graph.ir import Graph, Node, TensorType
from ..graph.op import Op, broadcast_shapes, check_count
from ..schedule import create_schedule
from ..target import Target
from .conv import ConvLike
from .elementwise import Add, EpilogueStep, Mul, apply_epilogue
from .kernel import KernelArgs, KernelDef, lanes_of, schedule_reductions
from .movement import Transpose
from .onnx_convert import ImportContext, OnnxNode, Reject, converter


@dataclass(frozen=True, slots=True)
class Dense(ConvLike):
    """``x @ weight.T (+ bias)`` then ``epilogue``: x ``[M, K]``, weight ``[N, K]``, bias ``[N]``, operands."""

    dense = True
    has_bias: bool = False
    epilogue: tuple[EpilogueStep, ...] = ()

    def infer(self, inputs):
        x, w = self.data_and_weight(inputs, 2)
        if x.shape[1] != w.shape[1]:
            raise GraphError(f"Dense: data {x.shape} and weight {w.shape} disagree on K")
        if self.has_bias and inputs[2].shape != (w.shape[0],):
            raise GraphError(f"Dense: the bias must have shape ({w.shape[0]},), got {inputs[2].shape}")
        return self.output(TensorType((x.shape[0], w.shape[0]), x.dtype), inputs)

    def reference(self, x: np.ndarray, w: np.ndarray, *rest: np.ndarray) -> np.ndarray:
        y = x @ w.T
        if self.has_bias:
            y = y + rest[0]
        return apply_epilogue(self.epilogue, y, rest[self.num_base_inputs - 2:])


@dataclass(frozen=True, slots=True)
class MatMul(Op):
    """Numpy ``matmul`` semantics (batched, with broadcasting of the batch dimensions)."""

    def infer(self, inputs):
        check_count(self, inputs, 2)
        a, b = inputs
        if not a.shape or not b.shape:
            raise GraphError("MatMul: operands must have at least one dimension")
        sa = (1,) + a.shape if len(a.shape) == 1 else a.shape
        sb = b.shape + (1,) if len(b.shape) == 1 else b.shape
        if sa[-1] != sb[-2]:
            raise GraphError(f"MatMul: shapes {a.shape} and {b.shape} disagree on the reduced dimension")
        batch = broadcast_shapes(self, sa[:-2], sb[:-2])
        shape = batch + (sa[-2],) * (len(a.shape) > 1) + (sb[-1],) * (len(b.shape) > 1)
        return (TensorType(shape, a.dtype),)

    def reference(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.matmul(a, b)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        return matmul_kernel(g, node, lanes_of(target, g.values[node.outputs[0]].dtype, node))


def matmul_kernel(g: Graph, node: Node, lanes: int) -> KernelDef:
    a = KernelArgs(g)
    av, bv, out_v = g.values[node.inputs[0]], g.values[node.inputs[1]], g.values[node.outputs[0]]
    if len(av.shape) < 2 or len(bv.shape) < 2:
        raise NetworkCompileError(f"MatMul '{node.name}': 1-D operands are not supported; reshape them to 2-D")
    ta, tb = a.value(node.inputs[0], "a"), a.value(node.inputs[1], "b")
    kdim = av.shape[-1]
    r = te.reduce_axis(kdim, "k")

    def body(*idx):
        batch = idx[:-2]
        ai = _bcast_index(av.shape[:-2], batch) + (idx[-2], r)
        bi = _bcast_index(bv.shape[:-2], batch) + (r, idx[-1])
        return te.sum(ta[ai] * tb[bi], axis=r)

    out = te.compute(out_v.shape, body, "out")
    s = create_schedule(out)
    schedule_reductions(s, [out], lanes)
    return a.done("matmul", node, out, s, 2 * math.prod(out_v.shape) * kdim)


def _bcast_index(shape: tuple[int, ...], batch: tuple) -> tuple:
    off = len(batch) - len(shape)
    return tuple(te.const(0, "int32") if d == 1 else batch[off + k] for k, d in enumerate(shape))


@converter("MatMul")
def _matmul(ctx: ImportContext, node: OnnxNode) -> None:
    ctx.emit(MatMul(), node.inputs[:2], node.outputs, node.name)


@converter("Gemm", attrs=("alpha", "beta", "transA", "transB", "broadcast"))
def _gemm(ctx: ImportContext, node: OnnxNode) -> None:
    a, b, c = node.input(0), node.input(1), node.input(2)
    if len(ctx.shape(a)) != 2 or len(ctx.shape(b)) != 2:
        raise Reject(f"Gemm needs 2-D A and B, got {list(ctx.shape(a))} and {list(ctx.shape(b))}")
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    if node.attr("transA", 0):
        (a,) = ctx.emit(Transpose((1, 0)), [a], None, f"{node.name}_transA")
    if node.attr("transB", 0):
        (b,) = ctx.emit(Transpose((1, 0)), [b], None, f"{node.name}_transB")
    last = c is None or beta == 0
    (y,) = ctx.emit(MatMul(), [a, b], node.outputs if last and alpha == 1 else None, node.name)
    if alpha != 1:
        scale = ctx.constant(np.float32(alpha), f"{node.name}_alpha")
        (y,) = ctx.emit(Mul(), [y, scale], node.outputs if last else None, f"{node.name}_alpha")
    if not last:
        if beta != 1:
            k = ctx.constant(np.float32(beta), f"{node.name}_beta")
            (c,) = ctx.emit(Mul(), [c, k], None, f"{node.name}_beta")
        ctx.emit(Add(), [y, c], node.outputs, f"{node.name}_bias")

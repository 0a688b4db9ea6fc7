"""Matrix products: ``MatMul`` (numpy's, batched with broadcasting; ONNX MatMul and Gemm import to it) and
``Dense`` (activations by a constant weight, which ``passes.matmul_to_dense`` makes of a MatMul and which runs as
the 1x1 convolution of 1x1 images: ``conv.ConvLike``)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import te
from ..graph.errors import GraphError, NetworkCompileError
from ..graph.ir import Graph, Node, TensorType
from ..graph.op import Op, broadcast_shapes, check_count
from ..schedule import create_schedule
from ..target import Target
from .conv import ConvLike
from .epilogue import epilogue_operands, epilogue_stages
from .elementwise import Add, EpilogueStep, Mul, apply_epilogue
from .kernel import KernelArgs, KernelDef, lanes_of
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

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        """Rows of activations (``GEMM_MIN_ROWS`` or more: a sequence's tokens, a batch) by the register-tiled GEMM
        (``dense_gemm_kernel``); one row (a classifier, a recurrent step) as the blocked 1x1 convolution."""
        if g.values[node.inputs[0]].shape[0] < GEMM_MIN_ROWS:
            return ConvLike.kernel(self, g, node, target)
        return dense_gemm_kernel(g, node, target)


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
        return matmul_kernel(g, node, target)


#: vectors of columns in a GEMM's register tile, and its most rows (``gemm_tiles``): BLIS's micro-kernels of
#: 16 and 32 vector registers (6 x 16 on AVX2, 12 x 32 on AVX-512 and NEON's 12 x 8)
TILE_VECTORS, MAX_TILE_ROWS = 2, 12


def matmul_kernel(g: Graph, node: Node, target: Target) -> KernelDef:
    """The product of two run-time tensors (attention's ``Q @ K^T`` and ``P @ V``), each batch as a register-tiled
    GEMM (``gemm_tiles``): rows x up to ``TILE_VECTORS`` vectors of columns accumulated over K in registers, A's element
    broadcast, a row of B one vector load. The tiles cover the output padded to whole tiles: B is copied into
    columns padded with zeros (``b_pad``, one pass over B), A's rows past the end read its last row again, and the
    output keeps the real ones."""
    a = KernelArgs(g)
    av, bv, out_v = g.values[node.inputs[0]], g.values[node.inputs[1]], g.values[node.outputs[0]]
    if len(av.shape) < 2 or len(bv.shape) < 2:
        raise NetworkCompileError(f"MatMul '{node.name}': 1-D operands are not supported; reshape them to 2-D")
    ta, tb = a.value(node.inputs[0], "a"), a.value(node.inputs[1], "b")
    *batch, m, n = out_v.shape
    kdim = av.shape[-1]
    rows, panel = gemm_tiles(m, n, target, out_v.dtype, node)
    mp, np_ = -(-m // rows) * rows, -(-n // panel) * panel
    b_batch = bv.shape[:-2]
    b_pad = te.compute((*b_batch, kdim, np_), lambda *i: te.select(
        i[-1] < n, tb[(*i[:-1], te.minimum(i[-1], n - 1))], te.const(0, bv.dtype)), "b_pad")
    r = te.reduce_axis(kdim, "k")

    def body(*idx):
        bat = idx[:-2]
        ai = _bcast_index(av.shape[:-2], bat) + (te.minimum(idx[-2], m - 1), r)
        bi = _bcast_index(b_batch, bat) + (r, idx[-1])
        return te.sum(ta[ai] * b_pad[bi], axis=r)

    acc = te.compute((*batch, mp, np_), body, "acc")
    out = te.compute(out_v.shape, lambda *i: acc[i], "out")
    s = create_schedule(out)
    pad_axes = s[b_pad].axis
    s[b_pad].parallel(s[b_pad].fuse(*pad_axes[:-1]) if len(pad_axes) > 2 else pad_axes[0])
    schedule_gemm(s, out, acc, rows, panel)
    return a.done("matmul", node, out, s, 2 * math.prod(out_v.shape) * kdim)


#: the fewest rows a dense layer's default kernel computes as a GEMM (``Dense.kernel``)
GEMM_MIN_ROWS = 2


def dense_gemm_kernel(g: Graph, node: Node, target: Target) -> KernelDef:
    """A dense layer ``x [M, K] @ W.T`` with its bias and epilogue, as register tiles of ``gemm_tiles`` (see
    ``schedule_gemm``) over the output padded to whole tiles: the constant weights packed once, at compile time,
    into panels ``[N'/panel, K, panel]`` (zero columns past N), rows past M reading the last one again; the bias and
    epilogue computed on the real elements as they are stored."""
    a = KernelArgs(g)
    xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
    (m, kdim), n = xv.shape, out_v.shape[1]
    w = g.constants.get(node.inputs[1])
    if w is None:
        raise NetworkCompileError(f"Dense '{node.name}': its weight must be a constant")
    rows, panel = gemm_tiles(m, n, target, out_v.dtype, node)
    mp, np_ = -(-m // rows) * rows, -(-n // panel) * panel
    wide = np.zeros((np_, kdim), w.dtype)
    wide[:n] = w
    x = a.value(node.inputs[0], "data", (m, kdim))
    wp = a.const(np.ascontiguousarray(wide.reshape(np_ // panel, panel, kdim).transpose(0, 2, 1)), "weight")
    bias = a.value(node.inputs[2], "bias") if node.op.has_bias else None
    operands = epilogue_operands(a, g, node)
    r = te.reduce_axis(kdim, "k")
    acc = te.compute((mp, np_), lambda i, j: te.sum(x[te.minimum(i, m - 1), r] * wp[j // panel, r, j % panel],
                                                    axis=r), "acc")
    base = te.compute((m, n), lambda i, j: acc[i, j], "acc_crop")
    stages = epilogue_stages(base, node.op, bias, operands, lambda ax: ax)
    out = stages[-1] if stages else base
    s = create_schedule(out)
    schedule_gemm(s, out, acc, rows, panel, inline=[base, *stages[:-1]] if stages else ())
    return a.done("dense", node, out, s, 2 * m * n * kdim)


def gemm_tiles(m: int, n: int, target: Target, dtype, node: Node | None = None) -> tuple[int, int]:
    """``(rows, columns)`` of a GEMM's register tile: ``TILE_VECTORS`` vectors of columns (fewer when ``n`` fills
    fewer), and as many rows as the target's vector registers hold accumulators for beside the row of B's vectors
    and A's broadcast element (6 of AVX2's 16, 12 of 32; fewer when ``m`` is). Each step of K then loads a row of
    B and ``rows`` elements of A for ``rows x vectors`` FMAs: with 4 rows instead of 6, an AVX2 core was bound by its
    loads (BERT-base's dense layers 1.5x slower on a Zen 3)."""
    lanes = lanes_of(target, dtype, node)
    vectors = min(TILE_VECTORS, -(-n // lanes)) if lanes > 1 else 1
    panel = vectors * lanes if lanes > 1 else min(n, 8)
    fit = target.accumulator_budget(TILE_VECTORS) // TILE_VECTORS
    return max(1, min(MAX_TILE_ROWS, fit, m)), panel


def schedule_gemm(s, out, acc, rows: int, panel: int, inline: Sequence = ()) -> None:
    """``out[..., M, N]`` in register tiles of ``rows x panel`` accumulated by ``acc`` (``[..., M', N']``, padded to
    whole tiles) over its one reduction: panels outermost (a panel of B, ``K x panel``, stays in cache while every
    row tile reads it), in parallel with the batch; in a tile, K, then the rows unrolled, then the columns in vectors.
    ``inline``: stages between ``acc`` and ``out`` (an epilogue), computed in place."""
    for t in inline:
        s[t].compute_inline()
    *outer, y, x = s[out].axis
    yo, yi = s[out].split(y, rows)
    xo, xi = s[out].split(x, panel)
    s[out].reorder(*outer, xo, yo, yi, xi)
    s[out].parallel(s[out].fuse(*outer, xo) if outer else xo)
    s[out].vectorize(xi)  # the epilogue (GELU's erf, SiLU's exp) in whole vectors as the tile is stored
    s[acc].compute_at(s[out], yo)
    *_, ay, ax = s[acc].axis
    (k,) = s[acc].reduce_axis
    s[acc].reorder(k, ay, ax)
    s[acc].unroll(ay)
    s[acc].vectorize(ax)


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

"""Matrix multiplication and dense layers, with an optional fused bias + ReLU epilogue.

The right-hand matrix is repacked into ``[N/bn, K, bn]`` panels so the innermost loop reads
``bn`` contiguous floats per ``k``: one or two vector registers, reused by every row of the
register block. The packing is part of the declaration (a layout transform), so it is timed.

When the register block does not divide the matrix (a prime number of rows, say), the product is
accumulated over a padded domain: rows and columns past the end read the last row of A or column
of B again (valid memory, results thrown away), and only the real ``M x N`` are written out.
"""
from __future__ import annotations

import numpy as np

from .. import te
from ..dtype import DType
from ..errors import ShapeError
from ..target import Target, TargetKind
from ..schedule import Schedule, create_schedule
from ..te import Tensor
from .operator import Operator, Part
from .schedule_helpers import largest_divisor, local_accumulator, simple_gpu_schedule


def _panel(n: int, target: Target, dtype: str) -> int:
    """Panel width: two vector registers when they divide N, else one, else one register padded."""
    lanes = max(1, target.lanes(DType.of(dtype)))
    for w in (2 * lanes, lanes):
        if n % w == 0:
            return w
    return min(lanes, n)


def matmul(M: int, N: int, K: int, dtype: str = "float32", bias: bool = False, relu: bool = False,
           transpose_b: bool = False, target: Target | None = None, name: str = "matmul",
           panel: int | None = None, row_tile: int = 1) -> Operator:
    """``out = A @ B (+ bias) (then ReLU)``; ``A: [M, K]``, ``B: [K, N]`` (``[N, K]`` if ``transpose_b``).

    B is repacked into panels of ``panel`` columns (default: from the target's vector width). The
    product is accumulated over ``M`` rounded up to a multiple of ``row_tile`` and ``N`` rounded up
    to a multiple of ``panel`` (see the module docstring); both round to themselves by default.
    """
    if panel is not None and panel < 1 or row_tile < 1:
        raise ShapeError(f"{name}: panel and row_tile must be positive, got {panel} and {row_tile}")
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((N, K) if transpose_b else (K, N), dtype, "B")
    bn = panel or _panel(N, target or Target.host(), dtype)
    Mp, Np = -(-M // row_tile) * row_tile, -(-N // bn) * bn

    def col(j):  # a column of B: past the end, the last one again
        return te.minimum(j, N - 1) if Np > N else j

    def row(i):  # a row of A: past the end, the last one again
        return te.minimum(i, M - 1) if Mp > M else i

    if transpose_b:
        PB = te.compute((Np // bn, K, bn), lambda no, k, ni: B[col(no * bn + ni), k], "B_packed")
    else:
        PB = te.compute((Np // bn, K, bn), lambda no, k, ni: B[k, col(no * bn + ni)], "B_packed")
    k = te.reduce_axis(K, "k")
    padded = (Mp, Np) != (M, N)
    acc_name = name if not (bias or relu or padded) else f"{name}_acc"
    C = te.compute((Mp, Np), lambda i, j: te.sum(A[row(i), k] * PB[j // bn, k, j % bn], axis=k), acc_name)
    stages = [C]
    if padded:
        stages.append(te.compute((M, N), lambda i, j: C[i, j], name if not (bias or relu) else f"{name}_crop"))
    inputs = [A, B, *_epilogue(stages, dtype, bias, relu, name)]
    return Operator(name, tuple(inputs), stages[-1], 2 * M * N * K, _reference(transpose_b, bias, relu), _schedule,
                    parts={Part.PACKED_WEIGHT: PB, Part.ACCUMULATOR: C}, epilogue=tuple(stages[1:-1]))


def _epilogue(stages: list[Tensor], dtype: str, bias: bool, relu: bool, name: str) -> list[Tensor]:
    """Append the bias and ReLU stages to ``stages`` (the last one is named ``name``); the bias input, if any."""
    M, N = stages[-1].shape
    inputs = []
    if bias:
        bias_t = te.placeholder((N,), dtype, "bias")
        inputs.append(bias_t)
        prev = stages[-1]
        stages.append(te.compute((M, N), lambda i, j: prev[i, j] + bias_t[j], f"{name}_bias" if relu else name))
    if relu:
        prev = stages[-1]
        stages.append(te.compute((M, N), lambda i, j: te.maximum(prev[i, j], te.const(0, dtype)), name))
    return inputs


def _reference(transpose_b: bool, bias: bool, relu: bool):
    def reference(a, b, *rest):
        r = a.astype(np.float64) @ (b.T if transpose_b else b).astype(np.float64)
        if bias:
            r = r + rest[0]
        if relu:
            r = np.maximum(r, 0)
        return r.astype(a.dtype)

    return reference


def dense(batch: int, in_features: int, out_features: int, dtype: str = "float32", bias: bool = True,
          relu: bool = False, target: Target | None = None, name: str = "dense") -> Operator:
    """A fully connected layer ``data @ weight.T + bias`` with ``weight: [out_features, in_features]``."""
    return matmul(batch, out_features, in_features, dtype, bias, relu, transpose_b=True, target=target, name=name)


def _schedule(op: Operator, target: Target) -> Schedule:
    """Register-blocked, packed, vectorized and parallel: the structure of a BLAS micro-kernel."""
    out = op.output
    pack = op.part(Part.PACKED_WEIGHT)
    s = create_schedule(out)
    M, N = out.shape
    bn = pack.shape[2]
    lanes = max(1, target.lanes(out.dtype))
    vec_regs = -(-bn // lanes)
    # rows of the register block: its accumulators (rows x vec_regs) must fit the target's registers
    bm = largest_divisor(M, max(1, target.accumulator_budget(vec_regs) // vec_regs))
    acc = local_accumulator(s, op)  # computed per output tile, the epilogue inlined into the output
    i, j = s[out].axis
    io, ii = s[out].split(i, bm)
    jo, ji = s[out].split(j, bn)
    s[out].reorder(jo, io, ii, ji)
    tile = s[out].fuse(jo, io)
    s[out].parallel(tile)
    if bn > 1:
        s[out].vectorize(ji)
    s[acc].compute_at(s[out], tile)
    ci, cj = s[acc].axis
    (k,) = s[acc].reduce_axis
    s[acc].reorder(k, ci, cj)
    s[acc].unroll(ci)
    if bn > 1:
        s[acc].vectorize(cj)
    no, _, ni = s[pack].axis
    s[pack].parallel(no)
    if bn > 1:
        s[pack].vectorize(ni)
    return s


def matmul_nn(M: int, N: int, K: int, dtype: str = "float32", name: str = "matmul", bias: bool = False,
              relu: bool = False, transpose_b: bool = False) -> Operator:
    """``out = A @ B (+ bias) (then ReLU)`` with ``A: [M, K]`` and ``B: [K, N]`` (``[N, K]`` if ``transpose_b``) read
    in place (no packed panels): the GPU matmul, whose tiles are staged in shared memory by the schedule instead, and
    the template-free search's, which finds its own tiling."""
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((N, K) if transpose_b else (K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    stages = [te.compute((M, N), lambda i, j: te.sum(A[i, k] * (B[j, k] if transpose_b else B[k, j]), axis=k),
                         f"{name}_acc" if bias or relu else name)]
    inputs = [A, B, *_epilogue(stages, dtype, bias, relu, name)]

    def schedule(op: Operator, target: Target) -> Schedule:
        return simple_gpu_schedule(op) if target.kind is TargetKind.CUDA else create_schedule(op.output)

    return Operator(name, tuple(inputs), stages[-1], 2 * M * N * K, _reference(transpose_b, bias, relu), schedule,
                    parts={Part.ACCUMULATOR: stages[0]}, epilogue=tuple(stages[1:-1]))


__all__ = ["dense", "matmul", "matmul_nn"]

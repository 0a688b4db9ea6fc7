"""Batched matrix products, as attention computes them: ``C[b] = A[b] @ B[b]`` (``B[b]`` transposed for Q K^T)."""
from __future__ import annotations

import numpy as np

from .. import te
from ..schedule import Schedule, create_schedule
from ..target import Target
from .operator import Operator, Part


def batch_matmul(batch: int, M: int, N: int, K: int, dtype: str = "float32", transpose_b: bool = False,
                 name: str = "batch_matmul") -> Operator:
    """``C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]`` (``B[b, j, k]`` if ``transpose_b``), both operands read in
    place: no template, the template-free search tiles it."""
    A = te.placeholder((batch, M, K), dtype, "A")
    B = te.placeholder((batch, N, K) if transpose_b else (batch, K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((batch, M, N), lambda b, i, j: te.sum(A[b, i, k] * (B[b, j, k] if transpose_b else B[b, k, j]),
                                                         axis=k), name)

    def reference(a, b):
        b = b.transpose(0, 2, 1) if transpose_b else b
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)

    return Operator(name, (A, B), C, 2 * batch * M * N * K, reference, _schedule, parts={Part.ACCUMULATOR: C})


def _schedule(op: Operator, target: Target) -> Schedule:
    """The untuned baseline: one product per thread at a time, the rows vectorized by the compiler if at all."""
    s = create_schedule(op.output)
    s[op.output].parallel(s[op.output].axis[0])
    return s


__all__ = ["batch_matmul"]

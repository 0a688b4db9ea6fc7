"""Row normalizations: softmax and layer normalization over the last axis of a ``[rows, N]`` matrix."""
from __future__ import annotations

import numpy as np

from .. import te
from ..schedule import Schedule, create_schedule
from ..target import Target
from .operator import Operator


def softmax(M: int, N: int, dtype: str = "float32", name: str = "softmax") -> Operator:
    """``exp(x - max(x)) / sum(exp(x - max(x)))`` along each of the ``M`` rows of ``N``: a row maximum, the
    exponentials, their sum, the quotient (about 5 operations an element: ``flops``)."""
    x = te.placeholder((M, N), dtype, "x")
    k1, k2 = te.reduce_axis(N, "k1"), te.reduce_axis(N, "k2")
    mx = te.compute((M,), lambda i: te.max(x[i, k1], axis=k1), "row_max")
    ex = te.compute((M, N), lambda i, j: te.exp(x[i, j] - mx[i]), "exp")
    sm = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), "row_sum")
    out = te.compute((M, N), lambda i, j: ex[i, j] / sm[i], name)

    def reference(a):
        z = np.exp(a.astype(np.float64) - a.max(axis=1, keepdims=True))
        return (z / z.sum(axis=1, keepdims=True)).astype(a.dtype)

    return Operator(name, (x,), out, 5 * M * N, reference, _schedule)


def layer_norm(M: int, N: int, dtype: str = "float32", eps: float = 1e-5, name: str = "layer_norm") -> Operator:
    """``(x - mean) / sqrt(var + eps) * gamma + beta`` along each of the ``M`` rows of ``N`` (about 8 operations an
    element: ``flops``)."""
    x = te.placeholder((M, N), dtype, "x")
    gamma, beta = te.placeholder((N,), dtype, "gamma"), te.placeholder((N,), dtype, "beta")
    k1, k2 = te.reduce_axis(N, "k1"), te.reduce_axis(N, "k2")
    total = te.compute((M,), lambda i: te.sum(x[i, k1], axis=k1), "row_sum")
    squares = te.compute((M,), lambda i: te.sum((x[i, k2] - total[i] * (1.0 / N)) * (x[i, k2] - total[i] * (1.0 / N)),
                                                axis=k2), "row_squares")
    out = te.compute((M, N), lambda i, j: (x[i, j] - total[i] * (1.0 / N)) / te.sqrt(squares[i] * (1.0 / N) + eps)
                     * gamma[j] + beta[j], name)

    def reference(a, g, b):
        a64 = a.astype(np.float64)
        mu = a64.mean(axis=1, keepdims=True)
        return ((a64 - mu) / np.sqrt(a64.var(axis=1, keepdims=True) + eps) * g + b).astype(a.dtype)

    return Operator(name, (x, gamma, beta), out, 8 * M * N, reference, _schedule)


def _schedule(op: Operator, target: Target) -> Schedule:
    """The untuned baseline: every stage at the root, the rows in parallel."""
    s = create_schedule(op.output)
    for stage in s.stages.values():
        if not stage.is_placeholder:
            s[stage.name].parallel(s[stage.name].axis[0])
    return s


__all__ = ["layer_norm", "softmax"]

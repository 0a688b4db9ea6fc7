"""The transforms of Winograd's minimal filtering F(m, r) (Lavin & Gray, 2016), exact, and as tensor
expressions whose constants fold away once their loops are unrolled.

The matrices come from Toom-Cook interpolation at ``POINTS[m]`` and infinity, transposed from linear
convolution to correlation: ``y = AT [(G g) * (BT d)]`` is the correlation of ``alpha = m + r - 1``
inputs ``d`` with ``r`` weights ``g``, and in two dimensions ``Y = AT [(G g G^T) * (BT d B)] A``.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np

from .. import te
from ..errors import ShapeError
from ..te import Expr

#: interpolation points of each output tile size m (the point at infinity comes on top)
POINTS: dict[int, tuple[Fraction, ...]] = {
    2: tuple(map(Fraction, (0, 1, -1))),
    4: tuple(map(Fraction, (0, 1, -1, 2, -2))),
    6: tuple(map(Fraction, (0, 1, -1, 2, -2))) + (Fraction(1, 2), Fraction(-1, 2)),
}

Matrix = tuple[tuple[Fraction, ...], ...]


@dataclass(frozen=True)
class WinogradMatrices:
    """The exact transforms of F(m, r): ``AT`` (m x alpha), ``G`` (alpha x r), ``BT`` (alpha x alpha), with
    ``y = AT [(G g) * (BT d)]`` the correlation of ``alpha`` inputs ``d`` with ``r`` weights ``g``."""

    m: int
    r: int
    AT: Matrix
    G: Matrix
    BT: Matrix

    @property
    def alpha(self) -> int:
        return self.m + self.r - 1

    def array(self, name: str) -> np.ndarray:
        """One matrix in float64."""
        return np.array(getattr(self, name), dtype=np.float64)


def _poly(roots: Sequence[Fraction]) -> list[Fraction]:
    """Coefficients, lowest power first, of ``prod(x - a for a in roots)``."""
    c = [Fraction(1)]
    for a in roots:
        c = [Fraction(0)] + c
        for i in range(len(c) - 1):
            c[i] -= a * c[i + 1]
    return c


@functools.cache
def winograd_matrices(m: int, r: int = 3) -> WinogradMatrices:
    """The transforms of F(m, r), from ``POINTS[m]`` and infinity.

    With points a_j, M(x) = prod(x - a_j) and M_j(x) = M(x) / (x - a_j): row j of ``BT`` holds the
    coefficients of M_j (of M for infinity), row j of ``G`` is a_j^k / M_j(a_j), column j of ``AT`` is a_j^i.
    """
    if m not in POINTS:
        raise ShapeError(f"Winograd output tile m={m} is not supported; use one of {sorted(POINTS)}")
    points = POINTS[m]
    n = len(points)
    assert n == m + r - 2
    alpha = n + 1
    at = [[a ** i for a in points] + [Fraction(int(i == m - 1))] for i in range(m)]
    g, bt = [], []
    for j, a in enumerate(points):
        others = points[:j] + points[j + 1:]
        scale = math.prod(a - b for b in others)
        g.append([a ** k / scale for k in range(r)])
        bt.append(_poly(others) + [Fraction(0)])
    g.append([Fraction(int(k == r - 1)) for k in range(r)])
    bt.append(_poly(points))
    assert len(bt) == alpha and all(len(row) == alpha for row in bt + at)
    freeze = lambda rows: tuple(tuple(row) for row in rows)  # noqa: E731
    return WinogradMatrices(m, r, freeze(at), freeze(g), freeze(bt))


def _row_sum(row: Sequence[Fraction], term: Callable[[int], Expr], dtype: str) -> Expr:
    """``sum(row[k] * term(k))`` over the non-zero entries; coefficients of 1 and -1 become additions."""
    out: Expr | None = None
    for k, c in sorted(((k, c) for k, c in enumerate(row) if c), key=lambda kc: kc[1] < 0):
        t = term(k)
        if abs(c) != 1:
            t = te.const(float(abs(c)), dtype) * t
        if out is None:
            out = t if c > 0 else te.const(0.0, dtype) - t
        else:
            out = out + t if c > 0 else out - t
    assert out is not None, "a transform row is all zeros"
    return out


def transform_expr(rows: Matrix, index: Expr, term: Callable[[int], Expr], dtype: str) -> Expr:
    """``sum_k rows[index][k] * term(k)`` for a symbolic ``index``: a chain of selects on ``index`` over the
    rows' explicit sums, which folds to one sum once ``index`` is a constant (an unrolled loop)."""
    out = _row_sum(rows[-1], term, dtype)
    for i in range(len(rows) - 2, -1, -1):
        out = te.select(te.equal(index, i), _row_sum(rows[i], term, dtype), out)
    return out

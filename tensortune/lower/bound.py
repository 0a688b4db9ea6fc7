"""Bound inference: the region of a producer that a consumer reads inside one of its loops.

A stage computed at loop ``L`` of its consumer only needs the elements the consumer reads while
the loops inside ``L`` sweep their ranges (the loops outside ``L`` are fixed). For each dimension
the region is ``[min, min + extent)`` with ``min`` an expression of the fixed loop variables and
``extent`` a constant; when that cannot be shown, the region is the whole dimension.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..arith import Analyzer, Ranges
from ..te.expr import CmpOp, Compare, Const, Expr, TensorRead, substitute, walk


@dataclass(frozen=True)
class Region:
    """Per dimension, the first element (an expression of enclosing loop variables) and the extent."""

    mins: tuple[Expr, ...]
    extents: tuple[int, ...]

    @staticmethod
    def whole(shape: tuple[int, ...]) -> Region:
        return Region(tuple(Const(0) for _ in shape), tuple(shape))


def infer_region(producer: str, shape: tuple[int, ...], consumer_body: Expr, root_values: dict, free: Ranges,
                 fixed: Ranges, analyzer: Analyzer) -> Region:
    """The region of ``producer`` that ``consumer_body`` reads while the ``free`` loop variables sweep their
    ranges (``root_values``: the consumer's root axes in terms of its loop variables)."""
    reads = [n for n in walk(consumer_body) if isinstance(n, TensorRead) and n.tensor.name == producer]
    mins: list[Expr] = []
    exts: list[int] = []
    for d, full in enumerate(shape):
        best: tuple[Expr, int] | None = None
        for r in reads:
            rg = analyzer.region(substitute(r.indices[d], root_values), free, fixed)
            if rg is None:
                best = None
                break
            if best is None:
                best = rg
                continue
            delta = analyzer.simplify(rg[0] - best[0], fixed)
            if not isinstance(delta, Const):
                best = None
                break
            lo = min(0, int(delta.value))
            hi = max(best[1], int(delta.value) + rg[1])
            best = (analyzer.simplify(best[0] + lo, fixed), hi - lo)
        if best is None or best[1] >= full:
            best = (Const(0), full)
        mins.append(best[0])
        exts.append(best[1])
    return Region(tuple(mins), tuple(exts))


def union_regions(regions: list[Region], shape: tuple[int, ...], fixed: Ranges, analyzer: Analyzer) -> Region:
    """The smallest region holding every one of ``regions`` (of one tensor of ``shape``) where their first elements
    differ by constants; the whole dimension where they do not."""
    first = regions[0]
    mins, exts = list(first.mins), list(first.extents)
    for other in regions[1:]:
        for d, full in enumerate(shape):
            delta = analyzer.simplify(other.mins[d] - mins[d], fixed)
            if not isinstance(delta, Const):
                mins[d], exts[d] = Const(0), full
                continue
            lo, hi = min(0, int(delta.value)), max(exts[d], int(delta.value) + other.extents[d])
            mins[d], exts[d] = analyzer.simplify(mins[d] + lo, fixed), hi - lo
            if exts[d] >= full:
                mins[d], exts[d] = Const(0), full
    return Region(tuple(mins), tuple(exts))


def domain_guards(first: Expr, offset: Expr, extent: int, full: int, outer: Ranges,
                  analyzer: Analyzer) -> list[Expr]:
    """Conditions keeping ``first + offset`` inside ``[0, full)`` where the region (of ``extent`` elements
    starting at ``first``) may stick out of the tensor."""
    out = []
    b = analyzer.bounds(analyzer.simplify(first, outer), outer)
    if b is None or b[1] + extent > full:
        out.append(Compare(CmpOp.LT, first + offset, Const(full)))
    if b is None or b[0] < 0:
        out.append(Compare(CmpOp.GE, first + offset, Const(0)))
    return out

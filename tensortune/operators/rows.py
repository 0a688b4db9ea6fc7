"""Reductions along rows in vector lanes, and the schedule of a kernel computed row by row (LayerNorm's statistics,
Softmax's maximum and sum).

A row's sum (or maximum) is accumulated in ``lanes`` partial results, one vector (``[*rows, lanes]``: element ``l``
of each step of the row's last axis goes to lane ``l``), then the lanes are reduced: the long loop runs in whole
vectors instead of one scalar chain. ``schedule_by_rows`` computes every stage of a kernel inside the loop over its
rows (the row stays in the cache between passes; one parallel loop for the whole kernel).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

from .. import te

LANES_SUFFIX = "_lanes"


def lane_reduce(rows: tuple[int, ...], row: tuple[int, ...], term: Callable[[tuple, tuple], te.Expr], lanes: int,
                reducer: Callable, name: str) -> list[te.Tensor]:
    """The stages reducing ``term(o, r)`` over each row ``r`` (of shape ``row``) of the rows ``o`` (of shape
    ``rows``) with ``reducer`` (``te.sum``, ``te.max``); the last stage is the result, of shape ``rows``. In vector
    lanes (a ``<name>_lanes`` stage first) where the row's last axis holds at least two vectors; the elements past
    its last whole vector (a row of 1500) join the lanes' reduction."""
    tag = name.split("_")[-1][0]
    r = [te.reduce_axis(d, f"{tag}{k}") for k, d in enumerate(row[:-1])]
    whole, tail = divmod(row[-1], lanes) if lanes > 1 else (0, row[-1])
    if whole < 2:
        last = te.reduce_axis(row[-1], f"{tag}{len(row) - 1}")
        return [te.compute(rows, lambda *o: reducer(term(o, (*r, last)), axis=[*r, last]), name)]
    step = te.reduce_axis(whole, f"{tag}v")
    part = te.compute((*rows, lanes), lambda *ol: reducer(term(ol[:-1], (*r, step * lanes + ol[-1])),
                                                          axis=[*r, step]), name + LANES_SUFFIX)
    q = te.reduce_axis(lanes + tail, f"{tag}l")
    if not tail:
        return [part, te.compute(rows, lambda *o: reducer(part[(*o, q)], axis=q), name)]
    if r:  # a tail of each row of a multi-axis row: its other axes would have to be reduced too
        last = te.reduce_axis(row[-1], f"{tag}{len(row) - 1}")
        return [te.compute(rows, lambda *o: reducer(term(o, (*r, last)), axis=[*r, last]), name)]

    def body(*o):  # the lanes, then the tail's elements (indices clamped: only the taken branch is read)
        lane = part[(*o, te.minimum(q, lanes - 1))]
        rest = term(o, (te.maximum(q - lanes, 0) + whole * lanes,))
        return reducer(te.select(q < lanes, lane, rest), axis=q)

    return [part, te.compute(rows, body, name)]


def schedule_by_rows(s, out: te.Tensor, stages: Sequence[te.Tensor], outer: int, lanes: int,
                     min_parallel: int = 1 << 14) -> None:
    """``out`` row by row: its first ``outer`` axes fused into one loop, parallel when ``out`` has ``min_parallel``
    elements, the row stored in vectors; every one of ``stages`` (producers of ``out``, each of the rows' shape
    or of a row's) computed inside that loop, lane partial results and whole rows in vectors."""
    st = s[out]
    axes = list(st.axis)
    fused = st.fuse(*axes[:outer]) if outer > 1 else axes[0]
    _vectorize_last(s, out, lanes, skip=outer)
    if math.prod(out.shape) >= min_parallel and fused.extent > 1:
        st.parallel(fused)
    for t in reversed(stages):  # consumers first: then each producer's readers are inside the loop already
        s[t].compute_at(st, fused)
        if t.name.endswith(LANES_SUFFIX):
            *_, lane = s[t].axis
            s[t].reorder(*s[t].reduce_axis, lane)
            s[t].vectorize(lane)
        elif not s[t].reduce_axis and len(t.shape) > outer:  # a whole row (not one number per row)
            _vectorize_last(s, t, lanes, skip=outer)


def _vectorize_last(s, t: te.Tensor, lanes: int, skip: int) -> None:
    """The last axis of ``t`` in vectors (after its first ``skip`` axes), split into whole ones where it can be."""
    st = s[t]
    axes = list(st.axis)
    if len(axes) <= skip or lanes <= 1:
        return
    last = axes[-1]
    if last.extent % lanes == 0 and last.extent > lanes:
        st.vectorize(st.split(last, lanes)[1])
    elif last.extent % lanes == 0 or last.extent >= 4 * lanes:  # a long row of no whole vectors: a shorter tail
        st.vectorize(last)

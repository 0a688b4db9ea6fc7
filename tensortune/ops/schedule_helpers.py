"""Scheduling steps shared by the default schedules and the templates, phrased on an operator's parts."""
from __future__ import annotations

import math

from ..schedule import Schedule, create_schedule
from ..target import Target
from ..te import Tensor
from .operator import Operator, Part


#: outer iterations too few to share among a machine's threads evenly
FEW_OUTER = 16


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit``."""
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)


def local_accumulator(s: Schedule, op: Operator) -> Tensor:
    """Inline the epilogue into the output; return the tensor that accumulates the reduction.

    That is the operator's accumulator, or a new local cache of the output when the output is the
    reduction itself, so that a schedule can always compute the accumulator inside an output tile.
    """
    for t in op.epilogue:
        s[t].compute_inline()
    acc = op.part(Part.ACCUMULATOR)
    return s.cache_write(acc, "local") if acc is op.output else acc


def parallel_input_transform(s: Schedule, op: Operator) -> None:
    """Compute the padded or packed input (where there is one) at the root, parallel over its two outer loops
    (batch and channel or channel block), and its rows too when those are fewer than ``FEW_OUTER`` (a network's
    first layer: three channels, one block, copied by one thread otherwise)."""
    for role in (Part.PADDED_INPUT, Part.PACKED_INPUT):
        if role in op.parts:
            stage = s[op.parts[role]]
            b, c = stage.axis[:2]
            rows = len(stage.axis) >= 4 and b.extent * c.extent < FEW_OUTER
            stage.parallel(stage.fuse(b, c, stage.axis[2]) if rows else stage.fuse(b, c))


def register_tile(oc_blocks: int, oh: int, ow: int, vectors_per_block: int, target: Target) -> tuple[int, int, int]:
    """(output-channel blocks, rows, columns) of a register tile: accumulators, one weight vector per channel
    vector and one broadcast input must fit the target's registers (``Target.accumulator_budget``). Only
    divisors (a partial tile would need guards in the innermost loop); the most accumulators, then the widest
    rows, then the fewest channel blocks."""
    best, choice = (0, 0, 0), (1, 1, 1)
    for oct_ in _divisors(oc_blocks):
        vec = oct_ * vectors_per_block
        for owt in _divisors(ow):
            for oht in _divisors(oh) if owt == ow else (1,):
                accs = vec * oht * owt
                if accs > target.accumulator_budget(vec):
                    continue
                score = (accs, owt, -oct_)
                if score > best:
                    best, choice = score, (oct_, oht, owt)
    return choice


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def default_blocked_schedule(op: Operator, target: Target) -> Schedule:
    """The default schedule of a convolution (or depthwise convolution) on NCHW[x]c tensors, as a network runs it
    untuned: register tiles of (output-channel blocks x rows x columns), accumulated over the reduction
    (input-channel block, kh, kw, channels of the block; a depthwise convolution's kh, kw) and written through the
    epilogue once; parallel over batch, channel tiles and row tiles. The padded input, if any, is made first, in
    parallel. ``op`` has the parts ``Part.ACCUMULATOR`` (and ``Part.PADDED_INPUT`` if padded) and output axes
    (batch, channel block, row, column, channel)."""
    s = create_schedule(op.output)
    out, acc = s[op.output], s[local_accumulator(s, op)]
    if Part.PADDED_INPUT in op.parts:
        t = op.parts[Part.PADDED_INPUT]
        pad = s[t]
        pad.parallel(pad.fuse(*pad.axis[:3]))
        if t.shape[-1] % max(1, target.lanes(t.dtype)) == 0:
            pad.vectorize(pad.axis[-1])
    n, oc, y, x, ob = out.axis
    red = acc.reduce_axis
    depthwise = len(red) == 2  # each output channel reads its own input channel: no channel reuse to tile
    vectors = -(-ob.extent // max(1, target.lanes(op.output.dtype)))
    oct_, oht, owt = register_tile(1 if depthwise else oc.extent, y.extent, x.extent, vectors, target)
    oco, oci = out.split(oc, oct_)
    yo, yi = out.split(y, oht)
    xo, xi = out.split(x, owt)
    out.reorder(n, oco, yo, xo, oci, yi, xi, ob)
    out.parallel(out.fuse(n, oco, yo))
    out.vectorize(ob)
    acc.compute_at(out, xo)
    _, coc, cy, cx, cb = acc.axis
    acc.reorder(*red, cy, cx, coc, cb)  # positions outside channel vectors: one broadcast input serves all vectors
    if depthwise:
        acc.unroll(red[-1])
    acc.unroll(coc)
    acc.unroll(cy)
    acc.unroll(cx)
    acc.vectorize(cb)
    return s


def simple_gpu_schedule(op: Operator, threads: int = 256) -> Schedule:
    """A plain GPU schedule: intermediate stages inlined, the output's loops fused and spread over blocks
    of ``threads`` threads, each thread computing one element (its reduction serial). Correct for any operator
    whose stages other than the output are elementwise or padding; fast for none."""
    out = op.output
    s = Schedule(out)
    for name, st in s.stages.items():
        if name != out.name and not st.is_placeholder:
            s[name].compute_inline()
    stage = s[out]
    fused = stage.fuse(*stage.axis) if len(stage.axis) > 1 else stage.axis[0]
    bx, tx = stage.split(fused, min(threads, fused.extent))
    stage.bind(bx, "blockIdx.x")
    stage.bind(tx, "threadIdx.x")
    return s


def schedule_elementwise(s: Schedule, t: Tensor, lanes: int, min_parallel: int = 1 << 14) -> None:
    """Vectorize the innermost axis when it is whole vectors or a long row (at least 4 vectors: the code generator
    ends it with a shorter vector); run the outermost loop of more than one iteration in
    parallel (the outer axes fused first; only when the tensor is big enough to be worth threads), so that a
    ``[1, 128, 768]`` tensor splits its 128 rows. The two innermost axes stay loops of their own, so that the
    elements of a row are addressed without division."""
    st = s[t]
    axes = list(st.axis)
    if len(axes) >= 4:
        axes = [st.fuse(*axes[:-2])] + axes[-2:]
    loops = axes
    inner = axes[-1]
    if inner.extent % lanes == 0 and lanes > 1:
        outer, vec = st.split(inner, lanes)
        st.vectorize(vec)
        loops = axes[:-1] + [outer]
    elif lanes > 1 and inner.extent >= 4 * lanes:  # a long row of no whole vectors: vectors, then a shorter tail
        st.vectorize(inner)
    parallel = next((a for a in loops if a.extent > 1), None)
    if math.prod(t.shape) >= min_parallel and parallel is not None:
        st.parallel(parallel)

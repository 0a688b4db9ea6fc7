"""Scheduling steps shared by the default schedules and the templates, phrased on an operator's parts."""
from __future__ import annotations

from ..schedule import Schedule
from ..te import Tensor
from .operator import Operator, Part


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
    """Compute the padded or packed input (where there is one) at the root, parallel over its two
    outer loops (batch and channel or channel block)."""
    for role in (Part.PADDED_INPUT, Part.PACKED_INPUT):
        if role in op.parts:
            stage = s[op.parts[role]]
            b, c = stage.axis[:2]
            stage.parallel(stage.fuse(b, c))


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

"""``lower``: schedule -> loop IR, as one visible list of named, pure passes."""
from __future__ import annotations

from typing import Callable, Sequence

from ..arith import Analyzer
from ..ir.nodes import PrimFunc
from ..ir.verify import verify as verify_ir
from ..schedule.schedule import Schedule
from ..te.tensor import Tensor
from .gpu import insert_gpu_sync
from .loop_nest import build_loop_nest
from .passes import partition_tails, remove_unit_loops, simplify_func, unroll_loops

Pass = Callable[[PrimFunc, Analyzer], PrimFunc]

#: The lowering pipeline after loop-nest construction, in order.
PASSES: tuple[tuple[str, Pass], ...] = (
    ("simplify", simplify_func),
    ("remove_unit_loops", remove_unit_loops),
    ("insert_gpu_sync", insert_gpu_sync),  # the identity without shared buffers (CPU kernels)
    ("unroll_loops", unroll_loops),
    ("simplify_after_unroll", simplify_func),
    ("partition_tails", partition_tails),
)


def lower(sch: Schedule, args: Sequence[Tensor] | None = None, name: str = "kernel", *, verify: bool = False,
          trace: Callable[[str, PrimFunc], None] | None = None, analyzer: Analyzer | None = None) -> PrimFunc:
    """Lower a schedule to a ``PrimFunc``. ``args`` orders the kernel arguments (default: inputs, then outputs).

    ``verify`` runs the IR verifier after every pass; ``trace(pass_name, func)`` sees the IR after each pass.
    ``analyzer`` is the arithmetic analysis shared by the passes (a new one by default); pass the same one
    to code generation to reuse what lowering learned.
    """
    analyzer = analyzer or Analyzer()
    func = build_loop_nest(sch, list(args) if args is not None else None, name, analyzer)
    steps = (("build_loop_nest", None),) + PASSES
    for pass_name, fn in steps:
        if fn is not None:
            func = fn(func, analyzer)
        if verify:
            verify_ir(func, pass_name)
        if trace is not None:
            trace(pass_name, func)
    return func

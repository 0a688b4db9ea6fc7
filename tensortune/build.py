"""``build``: schedule -> loop IR -> C -> shared library -> callable ``Module``."""
from __future__ import annotations

from typing import Sequence

from .codegen import codegen_c
from .ir import PrimFunc, Store
from .te.expr import walk
from .lower import lower
from .runtime import ArgSpec, Module, compile_shared
from .target import Target
from .schedule import Schedule
from .te import Tensor


def arg_specs(func: PrimFunc) -> tuple[tuple[ArgSpec, ...], tuple[ArgSpec, ...]]:
    """The runtime's view of a kernel's arguments (outputs marked) and of its workspaces."""
    written = {n.buffer.name for n in walk(func.body) if isinstance(n, Store)}
    args = tuple(ArgSpec(b.name, b.shape, b.dtype, b.name in written) for b in func.args)
    return args, tuple(ArgSpec(b.name, b.shape, b.dtype) for b in func.workspaces)


def build(sch: Schedule, args: Sequence[Tensor] | None = None, target: Target | str | None = None,
          name: str = "kernel", num_threads: int | None = None) -> Module:
    """Compile a schedule for ``target`` (default: this machine) and load it.

    ``args`` orders the arrays the kernel takes (default: the inputs in declaration order, then the
    outputs). The returned module also carries the lowered IR as ``module.ir`` and the C as ``module.source``.
    """
    tgt = Target.parse(target) if isinstance(target, str) else (target or Target.host())
    func = lower(sch, args, name)
    source = codegen_c(func, tgt)
    path = compile_shared(source, tgt)
    specs, work = arg_specs(func)
    module = Module(path, func.name, specs, work, source=source, num_threads=num_threads)
    module.ir = func
    return module

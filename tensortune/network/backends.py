"""How each target kind's network is emitted and built: the network compiler's backend table.

A ``NetworkBackend`` turns a planned program (its lowered kernels and their calls, each argument in an input, an
output, the constant arena or the workspace) into source that defines the entry point ``network_run`` (and
``network_profile``, which times each call), and builds it with the target's toolchain (``build.BACKENDS``). The C
backend serves CPU targets; a target kind without one is refused with what is missing (``network_backend``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..arith import Analyzer
from ..build import BACKENDS
from ..codegen import codegen_c_unit
from ..graph.errors import NetworkCompileError
from ..ir import PrimFunc
from ..target import Target, TargetKind
from .plan import Call, Place

ENTRY = "network_run"
PROFILE_ENTRY = "network_profile"


@dataclass(frozen=True)
class NetworkBackend:
    """``emit(name, functions, calls, n_inputs, n_outputs, target) -> source`` of a whole network, and
    ``build(source, target) -> path`` of its library."""

    emit: Callable[[str, Sequence[tuple[PrimFunc, Analyzer]], list[Call], int, int, Target], str]
    build: Callable[[str, Target], Path]


def entry_source(calls_: list[Call], functions: list[PrimFunc], n_inputs: int, n_outputs: int) -> str:
    """``network_run``, and ``network_profile``: the same calls, each timed into ``seconds[call]``."""
    n_io = n_inputs + n_outputs
    params = {f.name: list(f.args) + list(f.workspaces) for f in functions}
    calls = []
    for call in calls_:
        exprs = []
        for slot, buf in zip(call.slots, params[call.function]):
            ctype = buf.dtype.c_type
            if slot.place is Place.INPUT:
                exprs.append(f"({ctype}*)args[{slot.offset}]")
            elif slot.place is Place.OUTPUT:
                exprs.append(f"({ctype}*)args[{n_inputs + slot.offset}]")
            else:
                base = "tt_const" if slot.place is Place.CONSTANT else "tt_work"
                exprs.append(f"({ctype}*)({base} + {slot.offset})")
        calls.append((f"{call.function}({', '.join(exprs + ['num_threads'])});", call.node))
    head = [f"  char* tt_const = (char*)args[{n_io}];", f"  char* tt_work = (char*)args[{n_io + 1}];",
            "  if (num_threads < 1) num_threads = 1;"]
    lines = [f"int32_t {ENTRY}(void** args, int32_t num_threads) {{", *head]
    lines += [f"  {code}  // {node}" for code, node in calls]
    lines += ["  return 0;", "}", "", "#include <time.h>", "static double tt_now(void) {",
              "  struct timespec t;", "  clock_gettime(CLOCK_MONOTONIC, &t);",
              "  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;", "}", "",
              f"int32_t {PROFILE_ENTRY}(void** args, int32_t num_threads, double* seconds) {{", *head,
              "  double t0 = tt_now(), t1;"]
    for k, (code, node) in enumerate(calls):
        lines += [f"  {code}  // {node}", f"  t1 = tt_now(); seconds[{k}] += t1 - t0; t0 = t1;"]
    lines += ["  return 0;", "}"]
    return "\n".join(lines)


def _emit_c(name: str, functions: Sequence[tuple[PrimFunc, Analyzer]], calls: list[Call], n_inputs: int,
            n_outputs: int, target: Target) -> str:
    """Every kernel as a static C function and the entry points that call them in order (one translation unit)."""
    main = entry_source(calls, [f for f, _ in functions], n_inputs, n_outputs)
    return codegen_c_unit(functions, target, main,
                          comment=f"network '{name}': {len(calls)} calls of {len(functions)} kernels")


def _build_c(source: str, target: Target) -> Path:
    return BACKENDS[TargetKind.C].compile(source, target, None)


#: target kind -> how its networks are emitted and built
NETWORK_BACKENDS: dict[TargetKind, NetworkBackend] = {TargetKind.C: NetworkBackend(_emit_c, _build_c)}


def network_backend(target: Target) -> NetworkBackend:
    """The backend of ``target``'s kind; a ``NetworkCompileError`` saying what is missing for a kind without one."""
    backend = NETWORK_BACKENDS.get(target.kind)
    if backend is None:
        raise NetworkCompileError(
            f"whole networks cannot be compiled for '{target}' yet: the network compiler emits entry points for CPU "
            f"targets ({', '.join(k.value for k in NETWORK_BACKENDS)}) only; single operators tune and run on it "
            f"('tensortune tune OPERATOR --target \"{target}\"')")
    return backend

"""A loop of vector fused multiply-adds, compiled for a target: the FMA peak's measure, and a steady clock.

Each thread runs independent chains of ``a = a * b + c`` on vectors of the target's width, enough of them to
cover the FMA latency on every unit, within the registers. It reads no memory, so its time depends only on the
cores it gets: ``benchmarking.peak`` measures the FMA peak with it, and the runner's speed probe
(``autotvm.measure.steadiness``) times it to tell a slow spell of a shared machine.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Callable

from ..target import Target
from .compiler import compile_shared, load_library

_SOURCE = r"""
#include <stdint.h>
typedef float tt_vec __attribute__((vector_size(%(bytes)d)));

/* Runs `iters` steps of %(chains)d independent FMA chains on each of `threads` threads; returns a value
   that depends on every result, so that the compiler keeps the work. */
float tt_fma_loop(int64_t iters, int32_t threads) {
  float sink = 0.0f;
  #pragma omp parallel num_threads(threads) reduction(+:sink)
  {
    tt_vec b = (tt_vec){} + 0.999999f, c = (tt_vec){} + 1e-7f;
    %(declare)s
    for (int64_t i = 0; i < iters; ++i) {
      %(step)s
    }
    tt_vec total = %(total)s;
    for (int k = 0; k < %(lanes)d; ++k) sink += total[k];
  }
  return sink;
}
"""


@dataclass(frozen=True)
class FmaLoop:
    """``run(iters, threads)``: ``iters`` steps on each of ``threads`` threads, ``flops_per_iter`` each."""

    run: Callable[[int, int], float]
    flops_per_iter: int  # per thread


def fma_loop(target: Target) -> FmaLoop:
    """The FMA loop compiled for ``target`` (a CPU target of this machine's architecture) and loaded."""
    lanes = target.lanes("float32")
    chains = min(12, target.vector_registers - 3)  # 2 FMA units x a latency of 4-5 cycles, within the registers
    source = _SOURCE % {
        "bytes": 4 * lanes, "lanes": lanes, "chains": chains,
        "declare": " ".join(f"tt_vec a{j} = (tt_vec){{}} + {j + 1}.0f;" for j in range(chains)),
        "step": " ".join(f"a{j} = a{j} * b + c;" for j in range(chains)),
        "total": " + ".join(f"a{j}" for j in range(chains)),
    }
    loop = load_library(compile_shared(source, target)).tt_fma_loop
    loop.argtypes = [ctypes.c_int64, ctypes.c_int32]
    loop.restype = ctypes.c_float
    return FmaLoop(loop, chains * lanes * 2)

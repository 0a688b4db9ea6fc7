"""The FMA peak of a target's ISA on this machine, measured (not assumed) with a small FMA loop.

Each thread runs independent chains of vector fused multiply-adds (``a = a * b + c``), enough of
them to cover the FMA latency on every unit, on vectors of the target's width; the peak is the
floating-point operations per second of the fastest of a few repeats. Benchmarks report their
kernels as a percentage of it.
"""
from __future__ import annotations

import ctypes
import time

from ..runtime.compiler import compile_shared, load_library
from ..target import Target, TargetError

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


def _chains(target: Target) -> int:
    """Independent accumulators: enough for 2 FMA units x a latency of 4-5 cycles, within the registers."""
    return min(12, target.vector_registers - 3)


def fma_peak_gflops(target: Target | None = None, threads: int = 1, seconds: float = 0.2, repeat: int = 5) -> float:
    """Measured float32 FMA throughput of ``target``'s vectors on ``threads`` threads, in GFLOP/s."""
    target = target or Target.host()
    host = Target.host()
    if target.arch != host.arch:
        raise TargetError(f"cannot measure the FMA peak of {target} on this {host.arch} machine")
    lanes, chains = target.lanes("float32"), _chains(target)
    source = _SOURCE % {
        "bytes": 4 * lanes, "lanes": lanes, "chains": chains,
        "declare": " ".join(f"tt_vec a{j} = (tt_vec){{}} + {j + 1}.0f;" for j in range(chains)),
        "step": " ".join(f"a{j} = a{j} * b + c;" for j in range(chains)),
        "total": " + ".join(f"a{j}" for j in range(chains)),
    }
    loop = load_library(compile_shared(source, target)).tt_fma_loop
    loop.argtypes = [ctypes.c_int64, ctypes.c_int32]
    loop.restype = ctypes.c_float
    flops_per_iter = threads * chains * lanes * 2
    iters = 1 << 16
    while True:  # calibrate: one call of about ``seconds``
        start = time.perf_counter()
        loop(iters, threads)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4:
            break
        iters *= 4
    iters = max(1, int(iters * seconds / elapsed))
    best = 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        loop(iters, threads)
        best = max(best, flops_per_iter * iters / (time.perf_counter() - start) / 1e9)
    return best

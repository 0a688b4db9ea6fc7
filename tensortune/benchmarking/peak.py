"""The FMA peak of a target's ISA on this machine, measured (not assumed) with a small FMA loop.

Each thread runs independent chains of vector fused multiply-adds (``a = a * b + c``), enough of
them to cover the FMA latency on every unit, on vectors of the target's width; the peak is the
floating-point operations per second of the fastest of a few repeats. Benchmarks report their
kernels as a percentage of it.
"""
from __future__ import annotations

import time

from ..runtime.fma import fma_loop
from ..target import Target, TargetError


def fma_peak_gflops(target: Target | None = None, threads: int = 1, seconds: float = 0.2, repeat: int = 5) -> float:
    """Measured float32 FMA throughput of ``target``'s vectors on ``threads`` threads, in GFLOP/s."""
    target = target or Target.host()
    host = Target.host()
    if target.arch != host.arch:
        raise TargetError(f"cannot measure the FMA peak of {target} on this {host.arch} machine")
    loop = fma_loop(target)
    flops_per_iter = threads * loop.flops_per_iter
    iters = 1 << 16
    while True:  # calibrate: one call of about ``seconds``
        start = time.perf_counter()
        loop.run(iters, threads)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds / 4:
            break
        iters *= 4
    iters = max(1, int(iters * seconds / elapsed))
    best = 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        loop.run(iters, threads)
        best = max(best, flops_per_iter * iters / (time.perf_counter() - start) / 1e9)
    return best

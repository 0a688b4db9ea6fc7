"""A hand-scheduled 1024^3 float32 matmul against numpy.matmul, on 1 thread and on all cores.

The schedule's sizes come from the target (``--target``, default this machine): B packed into
panels of two vector registers, A packed into row panels, a register block of ``rows`` x panel
accumulators that fits the target's vector registers, its reduction loop unrolled by 4. The columns
go in chunks of up to 4 panels that fit in half the target's L2 cache (``column_chunk``): a chunk of
B stays in L2 while every row panel of A passes it, instead of all of B streaming from the last-level
cache once per row panel (which an Intel Xeon's L3 cannot feed: 0.6x numpy on 2 threads without the
chunks). Chunks x row panels run in parallel.

numpy runs in a child process (``tensortune.benchmarking.peers.peer_environment``): without the
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE overrides some machines set (they halve OpenBLAS), and capped
to the target's ISA when it is narrower than the machine's (AVX2 code on an AVX-512 host runs
against OpenBLAS's Haswell kernel); the child reports the OpenBLAS kernel it loaded. Both sides use
the same protocol: one warm-up, then ``--repeat`` measurements of ``--number`` calls; the median is
reported, with the FMA peak of the target's vectors measured on this machine (a small FMA loop).

    python benchmarks/bench_matmul.py [--size 1024] [--target avx2] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from common import write_json


def register_block(target) -> tuple[int, int]:
    """(rows, columns) of the register block: a panel of two vectors, as many rows as registers allow."""
    lanes = target.lanes("float32")
    return min(8, target.accumulator_budget(2) // 2), 2 * lanes


MAX_CHUNK_PANELS = 4  # wider chunks measured no faster (Intel Xeon, 2 MiB L2: 8 panels 0.95x numpy, 4 panels 0.99x)
UNROLL_K = 4


def column_chunk(target, k: int, bn: int) -> int:
    """Panels of B per chunk of columns: at most ``MAX_CHUNK_PANELS``, whose ``k`` rows fit in half the L2 cache."""
    return max(1, min(MAX_CHUNK_PANELS, target.caches.l2 // 2 // (k * bn * 4)))


def schedule_matmul(n: int, m: int, k: int, target):
    """The hand-written schedule: packed A row panels and B column panels, a register block, column chunks that
    stay in L2, parallel chunks x row panels."""
    import tensortune as tt
    from tensortune import te

    bm, bn = register_block(target)
    mp = -(-m // bm) * bm  # rows padded to whole blocks: the padded rows read row m-1 again, then are dropped
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    PA = te.compute((mp // bm, k, bm), lambda mo, kk, mi: A[te.minimum(mo * bm + mi, m - 1), kk], "A_packed")
    np_ = -(-n // bn) * bn  # columns padded to whole panels the same way
    column = (lambda j: j) if np_ == n else (lambda j: te.minimum(j, n - 1))  # no clamp where panels divide
    PB = te.compute((np_ // bn, k, bn), lambda no, kk, ni: B[kk, column(no * bn + ni)], "B_packed")
    r = te.reduce_axis(k, "k")
    acc = te.compute((mp, np_), lambda i, j: te.sum(PA[i // bm, r, i % bm] * PB[j // bn, r, j % bn], axis=r), "acc")
    C = te.compute((m, n), lambda i, j: acc[i, j], "C")

    s = tt.create_schedule(C)
    i, j = s[C].axis
    io, ii = s[C].split(i, bm)
    jc, jr = s[C].split(j, bn * column_chunk(target, k, bn))
    jo, ji = s[C].split(jr, bn)
    s[C].reorder(jc, io, jo, ii, ji)  # a chunk of B stays in L2, a row panel of A in L1 across the chunk's panels
    s[C].parallel(s[C].fuse(jc, io))
    s[C].vectorize(ji)
    s[acc].compute_at(s[C], jo)  # the register block
    ci, cj = s[acc].axis
    (kk,) = s[acc].reduce_axis
    if k % UNROLL_K == 0:
        kk, ku = s[acc].split(kk, UNROLL_K)
        s[acc].reorder(kk, ku, ci, cj)
        s[acc].unroll(ku)
    else:
        s[acc].reorder(kk, ci, cj)
    s[acc].unroll(ci)
    s[acc].vectorize(cj)
    for packed in (PA, PB):
        outer, _, inner = s[packed].axis
        s[packed].parallel(outer)
        s[packed].vectorize(inner)
    return s, [A, B, C]


def numpy_worker(size: int, threads: int, number: int, repeat: int) -> dict:
    """Runs in the child process: time numpy.matmul with ``threads`` BLAS threads."""
    from threadpoolctl import threadpool_info, threadpool_limits

    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    c = np.empty((size, size), np.float32)
    with threadpool_limits(limits=threads, user_api="blas"):
        np.matmul(a, b, out=c)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                np.matmul(a, b, out=c)
            times.append((time.perf_counter() - t0) / number)
        blas = [{k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
                for d in threadpool_info() if d.get("user_api") == "blas"]
    return {"median_s": statistics.median(times), "blas": blas}


def run_numpy(size: int, threads: int, number: int, repeat: int, target) -> dict:
    from tensortune.benchmarking.peers import peer_environment

    env, caps = peer_environment(target, threads)
    cmd = [sys.executable, __file__, "--numpy-worker", "--size", str(size), "--threads", str(threads),
           "--number", str(number), "--repeat", str(repeat)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "capped": caps}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--target", default="native", help="target to compile for, e.g. avx2 (default: this machine)")
    p.add_argument("--number", type=int, default=5, help="calls per measurement")
    p.add_argument("--repeat", type=int, default=15, help="measurements (the median is reported)")
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds of both sides; medians over rounds")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--numpy-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.numpy_worker:
        print(json.dumps(numpy_worker(args.size, args.threads, args.number, args.repeat)))
        return

    import tensortune as tt
    from tensortune.benchmarking.peak import fma_peak_gflops

    target = tt.Target.parse(args.target)
    n = args.size
    flops = 2 * n ** 3
    s, tensors = schedule_matmul(n, n, n, target)
    mod = tt.build(s, tensors, target=target, name="matmul")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-2)  # never report a wrong kernel's speed

    cores = os.cpu_count() or 1
    bm, bn = register_block(target)
    chunk = column_chunk(target, n, bn)
    print(f"matmul {n}x{n}x{n} float32; target {target} ({target.isa.value}: {target.vector_registers} vector "
          f"registers of {target.lanes('float32')} floats); register block {bm}x{bn}; column chunks of {chunk} "
          f"panels (L2 {target.caches.l2 >> 10} KiB)")
    result: dict = {"size": n, "target": str(target), "isa": target.isa.value, "block": [bm, bn],
                    "chunk_panels": chunk, "threads": {}}
    print(f"{'threads':>7} {'tensortune GFLOP/s':>19} {'numpy GFLOP/s':>14} {'ratio':>6} {'FMA peak':>9} "
          f"{'tt % peak':>9} {'np % peak':>9}")
    for threads in sorted({1, cores}):
        peak = fma_peak_gflops(target, threads)
        ours, theirs = [], []
        for _ in range(args.rounds):  # alternate, so that drift of a shared machine hits both sides alike
            t = mod.time_evaluator(number=args.number, repeat=args.repeat, num_threads=threads)(a, b, c)
            ours.append(flops / t.median / 1e9)
            peer = run_numpy(n, threads, args.number, args.repeat, target)
            theirs.append(flops / peer["median_s"] / 1e9)
        tg, ng = statistics.median(ours), statistics.median(theirs)
        result["threads"][str(threads)] = {
            "tensortune_gflops": round(tg, 1), "numpy_gflops": round(ng, 1), "ratio": round(tg / ng, 3),
            "fma_peak_gflops": round(peak, 1), "tensortune_peak_share": round(tg / peak, 3),
            "numpy_peak_share": round(ng / peak, 3), "numpy_blas": peer["blas"], "numpy_capped": peer["capped"],
            "rounds": {"tensortune": [round(x, 1) for x in ours], "numpy": [round(x, 1) for x in theirs]}}
        print(f"{threads:>7} {tg:>19.1f} {ng:>14.1f} {tg / ng:>6.2f} {peak:>9.1f} {100 * tg / peak:>8.0f}% "
              f"{100 * ng / peak:>8.0f}%")
    kernels = {d["architecture"] for r in result["threads"].values() for d in r["numpy_blas"]}
    caps = next(iter(result["threads"].values()))["numpy_capped"]
    print(f"numpy BLAS kernel: {', '.join(sorted(str(k) for k in kernels))}"
          + (f" (capped: {' '.join(f'{k}={v}' for k, v in caps.items())})" if caps else ""))
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()

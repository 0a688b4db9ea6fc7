"""A hand-scheduled 1024^3 float32 matmul against numpy.matmul, on 1 thread and on all cores.

numpy runs in a child process started with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE removed from
its environment (some machines set them, which halves OpenBLAS's speed); the child reports the
OpenBLAS kernel it loaded (threadpoolctl). Both sides use the same protocol: one warm-up, then
``--repeat`` measurements of ``--number`` calls each; the median is reported. The tensortune
kernel is timed with its native timing loop; numpy's loop runs in Python (negligible at ms scale).

    python benchmarks/bench_matmul.py [--size 1024] [--json PATH]
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

OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def schedule_matmul(n: int, m: int, k: int):
    """The hand-written schedule: packed B panels, an 8x32 register block, parallel tiles."""
    import tensortune as tt
    from tensortune import te

    bn, bm = 32, 8  # 32 columns = two AVX-512 registers; 8 rows -> 16 accumulator registers
    A = te.placeholder((m, k), "float32", "A")
    B = te.placeholder((k, n), "float32", "B")
    PB = te.compute((n // bn, k, bn), lambda no, kk, ni: B[kk, no * bn + ni], "B_packed")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * PB[j // bn, r, j % bn], axis=r), "C")

    s = tt.create_schedule(C)
    CC = s.cache_write(C, "local")  # the register block
    i, j = s[C].axis
    io, ii = s[C].split(i, bm)
    jo, ji = s[C].split(j, bn)
    s[C].reorder(jo, io, ii, ji)  # a B panel stays in cache while all row blocks use it
    tile = s[C].fuse(jo, io)
    s[C].parallel(tile)
    s[C].vectorize(ji)
    s[CC].compute_at(s[C], tile)
    ci, cj = s[CC].axis
    (kk,) = s[CC].reduce_axis
    s[CC].reorder(kk, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    no, _, ni = s[PB].axis
    s[PB].parallel(no)
    s[PB].vectorize(ni)
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


def run_numpy(size: int, threads: int, number: int, repeat: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_VARS}
    cmd = [sys.executable, __file__, "--numpy-worker", "--size", str(size), "--threads", str(threads),
           "--number", str(number), "--repeat", str(repeat)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=1024)
    p.add_argument("--number", type=int, default=5, help="calls per measurement")
    p.add_argument("--repeat", type=int, default=15, help="measurements (the median is reported)")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    p.add_argument("--numpy-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.numpy_worker:
        print(json.dumps(numpy_worker(args.size, args.threads, args.number, args.repeat)))
        return

    import tensortune as tt

    n = args.size
    flops = 2 * n ** 3
    s, tensors = schedule_matmul(n, n, n)
    mod = tt.build(s, tensors, name="matmul")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.zeros((n, n), np.float32)
    mod(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-2)  # never report a wrong kernel's speed

    cores = os.cpu_count() or 1
    set_vars = {k: os.environ[k] for k in OPENBLAS_VARS if k in os.environ}
    print(f"matmul {n}x{n}x{n} float32; target {tt.Target.host()}")
    if set_vars:
        print(f"numpy peer runs with {', '.join(set_vars)} unset (this shell sets {set_vars})")
    result: dict = {"size": n, "target": str(tt.Target.host()), "threads": {}}
    print(f"{'threads':>7} {'tensortune GFLOP/s':>19} {'numpy GFLOP/s':>14} {'ratio':>6}")
    for threads in sorted({1, cores}):
        t = mod.time_evaluator(number=args.number, repeat=args.repeat, num_threads=threads)(a, b, c)
        peer = run_numpy(n, threads, args.number, args.repeat)
        tg, ng = flops / t.median / 1e9, flops / peer["median_s"] / 1e9
        result["threads"][str(threads)] = {"tensortune_gflops": round(tg, 1), "numpy_gflops": round(ng, 1),
                                           "ratio": round(tg / ng, 3), "numpy_blas": peer["blas"]}
        print(f"{threads:>7} {tg:>19.1f} {ng:>14.1f} {tg / ng:>6.2f}")
    kernels = {d["architecture"] for r in result["threads"].values() for d in r["numpy_blas"]}
    print(f"numpy BLAS kernel: {', '.join(sorted(str(k) for k in kernels))}")
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()

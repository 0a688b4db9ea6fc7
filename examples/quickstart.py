"""Declare a matmul, schedule it by hand, look at its loops and C, run it, compare with numpy.

    python examples/quickstart.py
"""
import numpy as np

import tensortune as tt
from tensortune import te

M = N = K = 480
# Sizes from this machine's vector registers: B panels of two registers (32 floats on AVX-512, 16 on
# AVX2, 8 on NEON) and as many rows as keep the rows x 2 accumulators in registers (8, or 6 on AVX2).
target = tt.Target.host()
bn = 2 * target.lanes("float32")
bm = min(8, target.accumulator_budget(2) // 2)

# 1. What to compute: C[i, j] = sum_k A[i, k] * B[k, j], with B repacked into bn-column panels.
A = te.placeholder((M, K), "float32", "A")
B = te.placeholder((K, N), "float32", "B")
PB = te.compute((N // bn, K, bn), lambda jo, k, ji: B[k, jo * bn + ji], "B_packed")
k = te.reduce_axis(K, "k")
C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * PB[j // bn, k, j % bn], axis=k), "C")

# 2. The naive schedule: loops in declaration order.
naive = tt.build(tt.create_schedule(C), [A, B, C], name="matmul_naive")

# 3. A hand-written schedule: bm x bn register tiles, vectorized and parallel.
s = tt.create_schedule(C)
CC = s.cache_write(C, "local")
i, j = s[C].axis
io, ii = s[C].split(i, bm)
jo, ji = s[C].split(j, bn)
s[C].reorder(jo, io, ii, ji)
tile = s[C].fuse(jo, io)
s[C].parallel(tile)
s[C].vectorize(ji)
s[CC].compute_at(s[C], tile)
ci, cj = s[CC].axis
(kk,) = s[CC].reduce_axis
s[CC].reorder(kk, ci, cj)
s[CC].unroll(ci)
s[CC].vectorize(cj)
s[PB].parallel(s[PB].axis[0])
s[PB].vectorize(s[PB].axis[2])

print("== loop IR of the scheduled kernel (first lines) ==")
print("\n".join(str(tt.lower(s, [A, B, C], name="matmul")).splitlines()[:14]), "\n  ...")
fast = tt.build(s, [A, B, C], name="matmul")
print("== generated C (first lines) ==")
print("\n".join(l for l in fast.source.splitlines() if l.strip())[:1200], "\n  ...")

# 4. Run on numpy arrays and check against numpy.
rng = np.random.default_rng(0)
a = rng.standard_normal((M, K), dtype=np.float32)
b = rng.standard_normal((K, N), dtype=np.float32)
c = np.zeros((M, N), np.float32)
fast(a, b, c)
np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-3)
print("result equals numpy: yes")

# 5. Time both schedules (median of repeats, native timing loop).
flops = 2 * M * N * K
t_naive = naive.time_evaluator(number=1, repeat=3)(a, b, c).median
t_fast = fast.time_evaluator(number=10, repeat=5)(a, b, c).median
print(f"naive schedule: {flops / t_naive / 1e9:8.1f} GFLOP/s")
print(f"hand schedule:  {flops / t_fast / 1e9:8.1f} GFLOP/s  ({t_naive / t_fast:.0f}x faster)")

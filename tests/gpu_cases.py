"""Small GPU schedules shared by the GPU tests: a tiled matmul with shared-memory staging, and helpers that
lower a GPU schedule, emulate it on the CPU (thread loops run serially) and compile its CUDA C with nvcc."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

import tensortune as tt
from tensortune import te
from tensortune.build import build_library
from tensortune.ir import PrimFunc
from tensortune.lower.gpu import serialize_gpu
from tensortune.schedule import Schedule
from tensortune.target import Target

CUDA = Target.parse("cuda -arch=sm_90")

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and shutil.which("/usr/local/cuda/bin/nvcc") is None,
                                reason="nvcc (the CUDA toolkit) is not installed: CUDA C is generated but not compiled")


def matmul_decl(M: int, N: int, K: int):
    A = te.placeholder((M, K), "float32", "A")
    B = te.placeholder((K, N), "float32", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    return A, B, C


def tiled_matmul(M: int = 64, N: int = 64, K: int = 32, block=(16, 32), tile=(4, 4), bk: int = 8,
                 vector: int = 4) -> tuple[Schedule, list]:
    """C tiled over blocks of ``block`` rows x columns, per-thread register tiles of ``tile``, A and B tiles of
    ``bk`` columns / rows staged in shared memory by cooperative (vectorized) fills."""
    A, B, C = matmul_decl(M, N, K)
    s = tt.create_schedule(C)
    CL = s.cache_write(C, "local")
    AA = s.cache_read(A, "shared", [CL])
    BB = s.cache_read(B, "shared", [CL])
    y, x = s[C].axis
    by, yi = s[C].split(y, block[0])
    ty, yi = s[C].split(yi, tile[0])
    bx, xi = s[C].split(x, block[1])
    tx, xi = s[C].split(xi, tile[1])
    s[C].reorder(by, bx, ty, tx, yi, xi)
    s[C].bind(by, "blockIdx.y")
    s[C].bind(bx, "blockIdx.x")
    s[C].bind(ty, "threadIdx.y")
    s[C].bind(tx, "threadIdx.x")
    s[C].vectorize(xi)
    s[CL].compute_at(s[C], tx)
    cy, cx = s[CL].axis
    (k,) = s[CL].reduce_axis
    ko, ki = s[CL].split(k, bk)
    s[CL].reorder(ko, ki, cy, cx)
    s[CL].unroll(cy)
    s[CL].unroll(cx)
    threads_x, threads_y = block[1] // tile[1], block[0] // tile[0]
    for st in (AA, BB):
        s[st].compute_at(s[CL], ko)
        r, c = s[st].axis
        co, v = s[st].split(c, vector)
        f = s[st].fuse(r, co)
        f, tx2 = s[st].split(f, threads_x)
        f, ty2 = s[st].split(f, threads_y)
        s[st].bind(tx2, "threadIdx.x")
        s[st].bind(ty2, "threadIdx.y")
        s[st].vectorize(v)
    return s, [A, B, C]


def emulate(func: PrimFunc, inputs: list[np.ndarray], out_shape: tuple[int, ...]) -> np.ndarray:
    """Run a lowered GPU kernel on this CPU with its thread loops serial (``serialize_gpu``)."""
    module = build_library(serialize_gpu(func), Target.host()).load()
    out = np.full(out_shape, np.nan, np.float32)
    module(*inputs, out)
    return out

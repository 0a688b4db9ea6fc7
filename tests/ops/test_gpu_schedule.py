"""GPU scheduling: bind, shared and local cache stages, and every invalid binding as a ScheduleError; the lowered
loops (shared regions over the block's threads, barriers) and their CPU emulation against numpy."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tensortune as tt
from tensortune.errors import ScheduleError
from tensortune.ir import Allocate, Barrier, For, ForKind, Scope
from tensortune.lower.gpu import gpu_launch, serialize_gpu
from tensortune.schedule import Schedule, step_from_json, step_to_json
from tensortune.schedule.steps import Bind
from tensortune.target import Target
from tensortune.te.expr import walk

from gpu_cases import CUDA, emulate, matmul_decl, tiled_matmul


def raises(fn, stage: str, words: str) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        fn()
    assert info.value.stage == stage, str(info.value)
    assert words in str(info.value), str(info.value)
    return info.value


def test_bind_is_a_step_that_replays_from_json():
    s, (A, B, C) = tiled_matmul()
    binds = [st for st in s.steps if isinstance(st, Bind)]
    assert {b.thread for b in binds} == {ForKind.BLOCK_X, ForKind.BLOCK_Y, ForKind.THREAD_X, ForKind.THREAD_Y}
    steps = [step_from_json(json.loads(json.dumps(step_to_json(st)))) for st in s.steps]
    assert steps == s.steps
    A2, B2, C2 = matmul_decl(64, 64, 32)
    again = Schedule.replay(C2, steps)
    assert str(tt.lower(again, [A2, B2, C2])) == str(tt.lower(s, [A, B, C]))


def test_shared_tile_covers_the_block_and_barriers_surround_the_fills():
    s, args = tiled_matmul()
    func = tt.lower(s, args, verify=True)
    shared = {n.buffer.name: n.buffer for n in walk(func.body) if isinstance(n, Allocate)
              and n.buffer.scope is Scope.SHARED}
    # a block's 16 rows x 8 k of A and 8 k x 32 columns of B, not one thread's
    assert shared["A.shared"].shape == (16, 8) and shared["B.shared"].shape == (8, 32)
    local = [n.buffer for n in walk(func.body) if isinstance(n, Allocate) and n.buffer.scope is Scope.LOCAL]
    assert [b.shape for b in local] == [(4, 4)]
    text = str(func)
    assert text.count("barrier()") == 2  # before the fills (the k loop fills them again) and after
    lines = text.splitlines()
    first, second = [i for i, ln in enumerate(lines) if "barrier()" in ln]
    assert any("A.shared[" in ln for ln in lines[first:second]) and any("B.shared[" in ln for ln in lines[first:second])
    assert gpu_launch(func, CUDA).block == (8, 4, 1) and gpu_launch(func, CUDA).grid == (2, 4, 1)


@pytest.mark.parametrize("shape, block, tile, bk, vector", [
    ((64, 64, 32), (16, 32), (4, 4), 8, 4),
    ((48, 40, 24), (8, 8), (2, 2), 4, 2),
    ((32, 96, 16), (32, 32), (4, 8), 16, 4),
])
def test_gpu_matmul_emulated_on_the_cpu_equals_numpy(shape, block, tile, bk, vector, rng):
    M, N, K = shape
    s, args = tiled_matmul(M, N, K, block, tile, bk, vector)
    func = tt.lower(s, args, verify=True)
    a = rng.standard_normal((M, K)).astype("float32")
    b = rng.standard_normal((K, N)).astype("float32")
    np.testing.assert_allclose(emulate(func, [a, b], (M, N)), a @ b, rtol=1e-4, atol=1e-4)


def test_serialize_gpu_leaves_no_binding_or_barrier():
    s, args = tiled_matmul()
    func = serialize_gpu(tt.lower(s, args))
    assert not any(isinstance(n, Barrier) or (isinstance(n, For) and n.kind.is_gpu) for n in walk(func.body))


# ---------------------------------------------------------------------------------------- invalid bindings

def _simple():
    A, B, C = matmul_decl(64, 64, 32)
    return tt.create_schedule(C), C


def test_binding_a_reduction_axis_is_an_error():
    s, C = _simple()
    (k,) = s[C].reduce_axis
    raises(lambda: s[C].bind(k, "threadIdx.x"), "C", "cannot bind a reduction axis")
    raises(lambda: s[C].bind(k, "blockIdx.x"), "C", "cannot bind a reduction axis")


def test_unknown_index_and_annotate_with_a_gpu_kind_are_errors():
    s, C = _simple()
    y, x = s[C].axis
    raises(lambda: s[C].bind(y, "threadIdx.w"), "C", "bind needs a GPU index")
    raises(lambda: s[C].bind(y, ForKind.PARALLEL), "C", "bind needs a GPU index")
    raises(lambda: s[C].annotate(y, ForKind.THREAD_X), "C", "use bind")


def test_one_index_per_stage_and_one_binding_per_axis():
    s, C = _simple()
    y, x = s[C].axis
    yo, yi = s[C].split(y, 8)
    s[C].bind(yi, "threadIdx.x")
    raises(lambda: s[C].bind(x, "threadIdx.x"), "C", "already bound to threadIdx.x")
    raises(lambda: s[C].bind(yi, "threadIdx.y"), "C", "already bound")
    raises(lambda: s[C].unroll(yi), "C", "already bound")
    raises(lambda: s[C].split(yi, 2), "C", "annotated axis")


def test_more_than_1024_threads_in_one_axis_is_an_error():
    A = tt.te.placeholder((4096,), "float32", "A")
    B = tt.te.compute((4096,), lambda i: A[i] * 2.0, "B")
    s = tt.create_schedule(B)
    raises(lambda: s[B].bind(s[B].axis[0], "threadIdx.x"), "B", "more than the 1024 threadIdx.x")
    xo, xi = s[B].split(s[B].axis[0], 128)
    raises(lambda: s[B].bind(xi, "threadIdx.z"), "B", "more than the 64 threadIdx.z")


def test_more_than_1024_threads_per_block_is_an_error_at_lowering():
    A, B, C = matmul_decl(64, 64, 32)
    s = tt.create_schedule(C)
    y, x = s[C].axis
    s[C].bind(y, "threadIdx.y")
    s[C].bind(x, "threadIdx.x")
    raises(lambda: tt.lower(s, [A, B, C]), "C", "blocks of 4096 threads")


def test_cooperative_loop_with_more_threads_than_its_block_is_an_error():
    s, args = tiled_matmul()
    A = args[0]
    # A.shared's fill binds 16 threadIdx.x, but C's blocks have 8
    s2, (A2, B2, C2) = _tiled_with_fill_threads(16)
    raises(lambda: tt.lower(s2, [A2, B2, C2]), "A.shared", "whose blocks have 8")
    del s, A


def _tiled_with_fill_threads(n: int):
    A, B, C = matmul_decl(64, 64, 32)
    s = tt.create_schedule(C)
    CL = s.cache_write(C, "local")
    AA = s.cache_read(A, "shared", [CL])
    y, x = s[C].axis
    by, ty = s[C].split(y, 16)
    bx, tx = s[C].split(x, 8)
    s[C].reorder(by, bx, ty, tx)
    s[C].bind(by, "blockIdx.y")
    s[C].bind(bx, "blockIdx.x")
    s[C].bind(ty, "threadIdx.y")
    s[C].bind(tx, "threadIdx.x")
    s[CL].compute_at(s[C], tx)
    (k,) = s[CL].reduce_axis
    ko, ki = s[CL].split(k, 8)
    s[AA].compute_at(s[CL], ko)
    f = s[AA].fuse(*s[AA].axis)
    f, t = s[AA].split(f, n)
    s[AA].bind(t, "threadIdx.x")
    return s, (A, B, C)


def test_shared_memory_over_the_target_limit_is_an_error():
    s, args = tiled_matmul(256, 256, 256, block=(128, 128), tile=(8, 8), bk=64)  # 64 KiB of shared tiles
    func = tt.lower(s, args)
    raises(lambda: gpu_launch(func, CUDA), "A.shared", "more than the 49152")
    big = Target.parse("cuda -arch=sm_90 -shared_memory=96K")
    assert gpu_launch(func, big).shared_bytes == 65536


def test_a_shared_stage_left_at_the_root_is_an_error():
    A, B, C = matmul_decl(16, 16, 16)
    s = tt.create_schedule(C)
    s.cache_read(A, "shared", [C])
    y, x = s[C].axis
    s[C].bind(y, "blockIdx.x")
    s[C].bind(x, "threadIdx.x")
    raises(lambda: tt.lower(s, [A, B, C]), "A.shared", "inside the loops of a thread block")


def test_several_root_stages_in_one_kernel_is_an_error():
    A = tt.te.placeholder((64,), "float32", "A")
    P = tt.te.compute((64,), lambda i: A[i] + 1.0, "P")
    Q = tt.te.compute((64,), lambda i: P[i] * 2.0, "Q")
    s = tt.create_schedule(Q)
    for t in (P, Q):
        bo, bi = s[t].split(s[t].axis[0], 32)
        s[t].bind(bo, "blockIdx.x")
        s[t].bind(bi, "threadIdx.x")
    raises(lambda: gpu_launch(tt.lower(s, [A, Q]), CUDA), "P", "one GPU kernel computes one root stage")


def test_unknown_cache_scope_is_an_error():
    A, B, C = matmul_decl(16, 16, 16)
    s = tt.create_schedule(C)
    raises(lambda: s.cache_read(A, "texture", [C]), "A", "unknown scope 'texture'")


def test_cpu_schedules_with_a_shared_cache_lower_as_before():
    """On a CPU a 'shared' cache stage is a local buffer and gets no barrier: CPU kernels are unchanged."""
    A, B, C = matmul_decl(16, 16, 16)
    s = tt.create_schedule(C)
    CL = s.cache_write(C, "local")
    AS = s.cache_read(A, "shared", [CL])
    s[CL].compute_at(s[C], s[C].axis[0])
    s[AS].compute_at(s[CL], s[CL].reduce_axis[0])
    func = tt.lower(s, [A, B, C])
    assert not any(isinstance(n, Barrier) for n in walk(func.body))
    assert all(n.buffer.scope is Scope.LOCAL for n in walk(func.body) if isinstance(n, Allocate))


def test_the_c_backend_refuses_bound_loops():
    s, args = tiled_matmul()
    with pytest.raises(tt.errors.CodegenError, match="cuda"):
        tt.build(s, args, target=Target.host())

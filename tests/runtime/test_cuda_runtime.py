"""Running CUDA kernels. On a machine with an NVIDIA GPU, cuda-python and nvcc: every GPU operator equals numpy,
timings come from CUDA events, a failing kernel is a classified result. Elsewhere those tests skip with a
message, and the tests here check that the lack of a GPU is reported as such (never a crash)."""
from __future__ import annotations

import random

import numpy as np
import pytest

import tensortune as tt
from tensortune.autotvm.catalog import create_task
from tensortune.autotvm.measure import ErrorKind, LocalRunner, MeasureInput, RunOptions
from tensortune.autotvm.measure.builder import _build_one
from tensortune.build import build_library
from tensortune.ops.operator import check_output
from tensortune.runtime.cuda import CudaLaunchError, CudaUnavailableError, gpu_available

from gpu_cases import CUDA, needs_nvcc, tiled_matmul

GPU, WHY = gpu_available()
needs_gpu = pytest.mark.skipif(not GPU, reason=f"no GPU to run CUDA kernels on: {WHY}")


def test_gpu_available_reports_instead_of_raising():
    ok, why = gpu_available()
    assert isinstance(ok, bool) and isinstance(why, str) and why


def test_a_binding_without_a_driver_library_is_reported_as_no_gpu(monkeypatch):
    """cuda-python installed (PyTorch's CUDA wheels bring it) on a machine with no NVIDIA driver: its first call
    raises while loading libcuda; that is 'no GPU here', not a crash."""
    import types

    import tensortune.runtime.cuda as cuda

    def no_driver(flags):
        raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found via system search')

    monkeypatch.setattr(cuda, "_binding", lambda: types.SimpleNamespace(cuInit=no_driver))
    cuda.driver.cache_clear()
    try:
        ok, why = gpu_available()
        assert not ok and "driver library cannot be loaded" in why and "NVIDIA driver library" in why
        with pytest.raises(CudaUnavailableError):
            cuda.driver()
    finally:
        cuda.driver.cache_clear()


@needs_nvcc
@pytest.mark.skipif(GPU, reason="checks the message of a machine without a GPU")
def test_loading_a_cuda_kernel_without_a_gpu_says_what_is_missing():
    s, args = tiled_matmul()
    lib = build_library(tt.lower(s, args), CUDA)
    with pytest.raises((CudaUnavailableError, CudaLaunchError)):
        lib.load()


@needs_nvcc
@pytest.mark.skipif(GPU, reason="checks the result of a machine without a GPU")
def test_the_runner_classifies_a_missing_gpu_as_a_failed_candidate():
    task = create_task("matmul", dict(M=32, N=32, K=32), target=CUDA)
    inp = MeasureInput(task, task.space.sample(1, random.Random(0))[0])
    build = _build_one(inp, 60.0)
    assert build.ok, build.error_msg
    with LocalRunner(RunOptions(timeout=30.0)) as runner:
        (res,) = runner.run([inp], [build])
    assert res.error_kind is ErrorKind.RUNTIME_CRASH
    assert "Cuda" in res.error_msg or "CUDA" in res.error_msg


@needs_gpu
@pytest.mark.parametrize("operator, shape", [
    ("matmul", dict(M=128, N=96, K=64)), ("matmul", dict(M=33, N=65, K=17)),
    ("conv2d", dict(IC=16, H=14, W=14, OC=32, K=3, stride=1, pad=1)),
    ("conv2d", dict(IC=3, H=23, W=23, OC=16, K=7, stride=2, pad=3)),
    ("depthwise_conv2d", dict(C=32, H=28, W=28, K=3, stride=1, pad=1)),
    ("depthwise_conv2d", dict(C=16, H=15, W=15, K=3, stride=2, pad=1)),
])
def test_gpu_operators_equal_numpy_on_the_gpu(operator, shape):
    task = create_task(operator, shape, target=CUDA)
    canonical = task.make_inputs()
    expected = task.reference(canonical)
    schedules = [(task.operator.default_schedule(CUDA), task.operator)]
    schedules += [task.instantiate(i) for i in task.space.sample(3, random.Random(1))]
    for sch, op in schedules:
        module = build_library(tt.lower(sch, op.args), CUDA).load()
        out = np.full(op.output.shape, np.nan, np.float32)
        module(*op.prepare(*canonical), out)
        assert check_output(out, expected) is None
        timing = module.time_evaluator(2, 3, 1.0)(*op.prepare(*canonical), out)
        assert all(t > 0 for t in timing.results)
        module.close()


@needs_gpu
def test_the_runner_measures_gpu_candidates():
    task = create_task("matmul", dict(M=256, N=256, K=256), target=CUDA)
    inputs = [MeasureInput(task, i) for i in task.space.sample(4, random.Random(2))]
    builds = [_build_one(inp, 60.0) for inp in inputs]
    with LocalRunner(RunOptions(timeout=30.0)) as runner:
        results = runner.run(inputs, builds)
    assert all(r.ok for r in results), [r.error_msg for r in results]

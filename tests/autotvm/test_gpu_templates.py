"""GPU templates: random configs of each instantiate, lower (verified), generate CUDA C, and their kernels run
serially on the CPU equal numpy; nvcc compiles them (where installed); tasks, features and the tuner work
for a cuda target with a fake measurement."""
from __future__ import annotations

import random

import numpy as np
import pytest

import tensortune as tt
from tensortune.autotvm.catalog import create_task
from tensortune.autotvm.features import FeatureExtractor
from tensortune.autotvm.measure import ErrorKind, MeasureResult
from tensortune.autotvm.task import TaskError
from tensortune.build import build_library
from tensortune.codegen import codegen_cuda
from tensortune.lower.gpu import gpu_launch
from tensortune.ops.operator import check_output

from gpu_cases import CUDA, emulate, needs_nvcc

SMALL_TASKS = [
    ("matmul", dict(M=64, N=96, K=48)),
    ("matmul", dict(M=33, N=20, K=7)),
    ("conv2d", dict(IC=8, H=14, W=14, OC=16, K=3, stride=1, pad=1)),
    ("conv2d", dict(IC=3, H=17, W=17, OC=8, K=3, stride=2, pad=1)),
    ("conv2d", dict(N=2, IC=4, H=8, W=8, OC=8, K=1, stride=1, pad=0)),
    ("depthwise_conv2d", dict(C=16, H=14, W=14, K=3, stride=2, pad=1)),
    ("depthwise_conv2d", dict(C=8, H=9, W=9, K=3, stride=1, pad=1)),
]


@pytest.mark.parametrize("operator, shape", SMALL_TASKS)
def test_random_configs_lower_and_emulate_equal_to_numpy(operator, shape):
    task = create_task(operator, shape, target=CUDA)
    assert task.name.endswith("_cuda")
    canonical = task.make_inputs()
    expected = task.reference(canonical)
    for index in task.space.sample(3, random.Random(hash(str(shape)) % 1000)):
        s, op = task.instantiate(index)
        func = tt.lower(s, op.args, "kernel", verify=True)
        source = codegen_cuda(func, CUDA)
        assert "__global__" in source
        out = emulate(func, op.prepare(*canonical), op.output.shape)
        assert check_output(out, expected) is None, task.config(index)


@needs_nvcc
@pytest.mark.parametrize("operator, shape", [SMALL_TASKS[0], SMALL_TASKS[3], SMALL_TASKS[5]])
def test_random_configs_compile_with_nvcc(operator, shape):
    task = create_task(operator, shape, target=CUDA)
    for index in task.space.sample(2, random.Random(7)):
        s, op = task.instantiate(index)
        lib = build_library(tt.lower(s, op.args, "kernel"), CUDA)
        assert lib.data[:4] == b"\x7fELF" and lib.launch.threads >= 32


def test_resnet_and_large_matmul_spaces_have_valid_configs_within_the_limits():
    for task in (create_task("matmul", dict(M=4096, N=4096, K=4096), target=CUDA),
                 create_task("conv2d", dict(IC=3, H=224, W=224, OC=64, K=7, stride=2, pad=3), target=CUDA),
                 create_task("conv2d", dict(IC=256, H=14, W=14, OC=512, K=3, stride=2, pad=1), target=CUDA)):
        for index in task.space.sample(3, random.Random(3)):
            s, op = task.instantiate(index)
            launch = gpu_launch(tt.lower(s, op.args, "kernel"), CUDA)
            assert 32 <= launch.threads <= 1024 and launch.shared_bytes <= 48 << 10


def test_gpu_and_cpu_templates_need_their_kind_of_target():
    with pytest.raises(TaskError, match="schedules for GPUs"):
        create_task("matmul", dict(M=8, N=8, K=8), template="matmul_cuda")
    with pytest.raises(TaskError, match="schedules for CPUs"):
        create_task("matmul", dict(M=8, N=8, K=8), template="matmul", target=CUDA)
    assert create_task("conv2d", dict(IC=8, H=8, W=8, OC=8, K=3), target=CUDA).name == "conv2d_nchw_cuda"


def test_features_carry_the_thread_binding_slots():
    task = create_task("matmul", dict(M=64, N=64, K=64), target=CUDA)
    fx = FeatureExtractor(task)
    index = task.space.sample(1, random.Random(0))[0]
    feats = fx([index])[0]
    from tensortune.autotvm.features import PER_LOOP
    slots = feats[: 4 * PER_LOOP].reshape(4, PER_LOOP)[:, 4:10]
    # loops: blockIdx.y, blockIdx.x, threadIdx.y, threadIdx.x
    assert slots[:2, 4].tolist() == [1.0, 1.0] and slots[2:4, 5].tolist() == [1.0, 1.0]


def test_tuning_a_gpu_task_with_a_fake_measurement_logs_records_with_the_target(tmp_path):
    from tensortune.autotvm.tune import tune

    task = create_task("matmul", dict(M=64, N=64, K=64), target=CUDA)

    def measure(inputs):
        out = []
        for inp in inputs:
            cfg = task.config(inp.config_index)
            threads = cfg["tile_y"].size[1] * cfg["tile_x"].size[1]
            out.append(MeasureResult((1e-3 / threads,), ErrorKind.NONE, "", 0.0))
        return out

    log = tmp_path / "gpu.jsonl"
    result = tune(task, 24, "xgb", batch_size=8, measure=measure, log_file=str(log), progress=False, seed=0)
    assert result.best_index is not None
    assert "cuda -arch=sm_90" in log.read_text()
    s, op = task.instantiate(result.best_index)
    assert np.isfinite(gpu_launch(tt.lower(s, op.args), CUDA).threads)

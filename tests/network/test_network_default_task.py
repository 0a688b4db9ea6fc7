"""The untuned kernel of each network layer as a task (``nchwc_default``): measured beside the templates, it equals
numpy, takes one trial of a network's budget, and compiling with a log keeps it wherever no tuned config beat it."""
from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

import tensortune as tt
from onnx_models import assert_close, ort_run, rand
from tensortune.network.tasks import Search
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import append_records, load_records
from tensortune.autotvm.task import Task
from tensortune.autotvm.templates import TEMPLATES
from tensortune.errors import ShapeError
from tensortune.operators.conv_tasks import default_task
from network_logs import DEFAULT_TEMPLATE
from tensortune.network.tasks import extract_tasks
from tensortune.network import optimized_graph, zoo
from tensortune.network.tuned import TunedKernels
from tensortune.network.tuning import tune_model
from tensortune.ops.winograd import _default_schedule as winograd_default_schedule, default_tile_size
from tensortune.target import Target

HOST = Target.host()
AVX2 = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
AVX512 = Target.parse("c -isa=avx512 -cores=2 -arch=x86_64")

LAYERS = [
    ("conv2d_nchwc_packed", 1, 32, 12, 12, 48, 3, 1, 1),  # 3x3 stride 1: Winograd on AVX2
    ("conv2d_nchwc_packed", 1, 16, 7, 7, 32, 3, 1, 1),  # 7x7 (few tiles): F(2x2)
    ("conv2d_nchwc_packed", 1, 16, 14, 14, 24, 1, 2, 0),  # 1x1 stride 2
    ("conv2d_nchwc_packed", 1, 3, 15, 15, 16, 3, 2, 1),  # 3 input channels
    ("depthwise_conv2d_nchwc_packed", 1, 32, 14, 14, 3, 2, 1),
    ("depthwise_conv2d_nchwc_packed", 1, 16, 9, 9, 3, 1, 1),
]


@pytest.mark.parametrize("args", LAYERS)
def test_the_default_kernel_of_a_layer_equals_numpy(args):
    task = Task(TEMPLATES[DEFAULT_TEMPLATE], args, HOST)
    assert len(task.space) == 1 and task.flops == Task(TEMPLATES[args[0]], args[1:], HOST).flops
    canonical = task.make_inputs(0)
    sch, op = task.instantiate(0)
    out = np.full(op.output.shape, np.nan, op.output.dtype.numpy)
    tt.build(sch, op.args)(*task.kernel_inputs(0, canonical), out)
    np.testing.assert_allclose(out, task.reference(canonical), rtol=1e-4, atol=1e-4, err_msg=str(task))


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=str)
def test_the_default_of_a_3x3_stride_1_layer_is_what_an_untuned_network_runs(target):
    for args in LAYERS[:4]:
        _, op = Task(TEMPLATES[DEFAULT_TEMPLATE], args, target).instantiate(0)
        tile = default_tile_size(target, 1, args[3], args[4], args[8]) if args[6:8] == (3, 1) else None
        winograd = op._schedule is winograd_default_schedule
        assert (tile is not None) == (target is AVX2 and args[6:8] == (3, 1))
        assert winograd == (tile is not None), (args, target)


@pytest.mark.parametrize("args", [("matmul", 64, 64, 64), ("conv2d_nchwc_packed", 1, 16, 8, 8, 16, 3, 1),
                                  ("depthwise_conv2d_nchwc_packed", 1, 16, 8, 8, 3, 1, 1, 0)])
def test_a_default_task_of_an_unknown_template_or_wrong_arguments_is_a_shape_error(args):
    with pytest.raises(ShapeError, match="names the layer's template"):
        Task(TEMPLATES[DEFAULT_TEMPLATE], args, HOST).space


def _record(task: Task, index: int, seconds: float):
    return MeasureInput(task, index), MeasureResult((seconds,), ErrorKind.NONE, "", 0.1, time.time())


@pytest.mark.slow
def test_compiling_keeps_the_default_where_no_tuned_config_beat_it(tmp_path):
    m = zoo.mobilenet_v2(image=32)
    tasks = [t for t in extract_tasks(optimized_graph(m, HOST), HOST, search=Search.TEMPLATES) if t.task is not None]
    slower, faster = tasks[2], tasks[3]  # the tuned config lost to the default / beat it
    log = tmp_path / "log.jsonl"
    append_records(log, [_record(slower.task, 0, 2e-3), _record(default_task(slower.task), 0, 1e-3),
                         _record(faster.task, 0, 1e-3), _record(default_task(faster.task), 0, 2e-3)])
    module = tt.compile(m, log=log)
    template = {n: k.template for k in module.manifest.kernels for n in k.nodes}
    assert {template[n] for n in slower.nodes} == {None}
    assert {template[n] for n in faster.nodes} == {faster.task.name}
    choose = TunedKernels(log, HOST)
    optimized = optimized_graph(m, HOST)
    for node in optimized.nodes:
        if node.name in slower.nodes + faster.nodes:
            choose(optimized, node, HOST)
    assert set(choose.kept_default) == set(slower.nodes) and set(choose.applied) == set(faster.nodes)
    x = rand((1, 3, 32, 32), 2)
    assert_close(module(x), ort_run(m, {"input": x})[0])


class DefaultWins:
    """Fake timings: every layer's default kernel at 100 GFLOP/s, every tuned config at 10 to 60."""

    def __init__(self):
        self.calls: Counter = Counter()

    def __call__(self, inputs):
        self.calls.update((i.task.workload_key, i.config_index) for i in inputs)
        return [MeasureResult((i.task.flops / ((100.0 if i.task.name == DEFAULT_TEMPLATE else
                                                10.0 + i.config_index % 51) * 1e9),), ErrorKind.NONE, "", 0.0)
                for i in inputs]


@pytest.mark.slow
def test_network_tuning_measures_each_default_once_and_compiles_to_the_defaults(tmp_path):
    m = zoo.resnet18(image=32)
    log = tmp_path / "net.jsonl"
    measure = DefaultWins()
    result = tune_model(m, 120, log, HOST, tuner="random", round_size=8, measure=measure, seed=0, progress=False, search=Search.TEMPLATES)
    defaults = [(t.task, n) for t, n in zip(result.tasks, result.trials) if t.task.name == DEFAULT_TEMPLATE]
    assert len(defaults) == 12 and all(n == 1 for _, n in defaults)
    assert all(c == 1 for c in measure.calls.values())  # nothing measured twice
    assert sum(1 for r in load_records(log) if r.template == DEFAULT_TEMPLATE) == 12
    # the estimate counts each layer at its default: what the compiled network runs
    flops = {t.task.workload_key: t.task.flops for t in result.tasks}
    expected = sum(t.weight * flops[t.task.workload_key] / 100e9 for t in result.tasks if t.task.name == DEFAULT_TEMPLATE)
    assert result.estimated_latency == pytest.approx(expected)
    module = tt.compile(m, log=log)
    assert not any(k.template for k in module.manifest.kernels)

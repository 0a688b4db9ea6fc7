"""Winograd in compiled networks: each 3x3, stride-1 convolution also has a Winograd task (an alternative of its
direct one), and compiling with a log runs, per node, the alternative whose best record is faster, its epilogue
(bias, residual add, activation) computed in the Winograd output transform."""
from __future__ import annotations

import json
import random
import time

import numpy as np
import pytest

import tensortune as tt
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import append_records
from tensortune.autotvm.task import Task
from tensortune.cli import main
from tensortune.graph.tasks import CONV_TEMPLATE, WINOGRAD_TEMPLATE, extract_tasks
from tensortune.network import optimized_graph, zoo
from tensortune.network.tuned import TunedKernels
from tensortune.network.tuning import weighted_tasks
from tensortune.ops import conv2d_nchw

TARGET = tt.Target.host()
#: the 3x3, stride-1 workloads of ResNet-18 on 32x32 images: (C, H, W) of each stage
LAYERS = [(64, 8, 8), (128, 4, 4), (256, 2, 2), (512, 1, 1)]


@pytest.fixture(scope="module")
def resnet():
    return zoo.resnet18(image=32)


@pytest.fixture(scope="module")
def tasks(resnet):
    return extract_tasks(optimized_graph(resnet, TARGET), TARGET)


def config_of_tile(task: Task, tile: int, seed: int = 0) -> int:
    """A random config of a Winograd task with output tiles of ``tile`` x ``tile``."""
    rng = random.Random(seed)
    return next(i for i in task.space.sample(200, rng) if task.config(i)["tile_size"] == tile)


def record(task: Task, index: int, seconds: float) -> tuple[MeasureInput, MeasureResult]:
    return MeasureInput(task, index), MeasureResult((seconds,), ErrorKind.NONE, "", 0.1, time.time())


def test_3x3_stride_1_convolutions_have_a_winograd_alternative(tasks):
    with_alternative = [t for t in tasks if t.alternatives]
    assert [t.task.args[1:4] for t in with_alternative] == LAYERS
    for t in with_alternative:
        (alt,) = t.alternatives
        assert alt.name == WINOGRAD_TEMPLATE and alt.args == t.task.args and t.tasks == (t.task, alt)
        assert alt.flops == t.task.flops == t.flops
    weighted = weighted_tasks(tasks)
    assert len(weighted) == len(tasks) + len(LAYERS)
    for t in with_alternative:  # both alternatives in one group, with the layer's occurrences
        assert [(w.weight, w.group) for w in weighted if w.task in t.tasks] == [(t.occurrences, t.workload)] * 2
    assert sum(w.group is not None for w in weighted) == 2 * len(LAYERS)


def test_compiling_runs_the_faster_alternative_of_each_layer(resnet, tasks, tmp_path):
    first, second = [t for t in tasks if t.alternatives][:2]
    log = tmp_path / "log.jsonl"
    rng = random.Random(1)
    append_records(log, [  # layer 1: Winograd is faster; layer 2: the direct convolution is
        record(first.task, first.task.space.sample(1, rng)[0], 2e-3),
        record(first.alternatives[0], config_of_tile(first.alternatives[0], 4), 1e-3),
        record(second.task, second.task.space.sample(1, rng)[0], 1e-3),
        record(second.alternatives[0], config_of_tile(second.alternatives[0], 2), 2e-3)])
    module = tt.compile(resnet, log=log)
    template = {n: k.template for k in module.manifest.kernels for n in k.nodes}
    assert {template[n] for n in first.nodes} == {WINOGRAD_TEMPLATE}
    assert {template[n] for n in second.nodes} == {CONV_TEMPLATE}
    assert sum(1 for t in template.values() if t) == len(first.nodes) + len(second.nodes)
    x = rand((1, 3, 32, 32), 4)
    assert_close(module(x), ort_run(resnet, {"input": x})[0], "resnet18 with Winograd layers")
    choose = TunedKernels(log, TARGET)
    assert choose.best_index(first.alternatives[0]) == config_of_tile(first.alternatives[0], 4)


def residual_block(c: int, o: int, size: int):
    """``relu(conv3x3(x) + bias + r)``: one node after fusion, its epilogue a bias, a residual add and a ReLU."""
    w, b = rand((o, c, 3, 3), 1), rand((o,), 2)
    nodes = [node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node("Add", ["y", "r"], ["s"]), node("Relu", ["s"], ["out"])]
    return model(nodes, {"x": (1, c, size, size), "r": (1, o, size, size)}, ["out"], {"w": w, "b": b}), w, b


@pytest.mark.parametrize("tile", [2, 4, 6])
def test_a_fused_winograd_kernel_equals_numpy(tile, tmp_path):
    m, w, b = residual_block(16, 32, 9)
    (conv,) = [n for n in optimized_graph(m, TARGET).nodes if n.op.kind == "Conv"]
    assert [s.op.fn.value for s in conv.op.epilogue] == ["add", "relu"] and conv.op.has_bias
    (t,) = extract_tasks(optimized_graph(m, TARGET), TARGET)
    (wino,) = t.alternatives
    log = tmp_path / "log.jsonl"
    direct = t.task.space.sample(1, random.Random(tile))[0]
    append_records(log, [record(t.task, direct, 2e-3), record(wino, config_of_tile(wino, tile, tile), 1e-3)])
    module = tt.compile(m, log=log)
    (kernel,) = [k for k in module.manifest.kernels if k.template]
    assert kernel.template == WINOGRAD_TEMPLATE and kernel.nodes == (conv.name,)
    x, r = rand((1, 16, 9, 9), 3), rand((1, 32, 9, 9), 5)
    expected = np.maximum(conv2d_nchw(1, 16, 9, 9, 32, 3, pad=1, dtype="float64").reference(x, w)
                          + b[:, None, None] + r, 0)
    assert_close(module.run({"x": x, "r": r})["out"], expected, f"F({tile}x{tile}, 3x3) with bias, residual, relu")


def test_tasks_on_the_command_line_lists_the_alternatives(resnet, tmp_path, capsys):
    path = tmp_path / "resnet18.onnx"
    path.write_bytes(resnet.SerializeToString())
    assert main(["tasks", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["tasks"]
    assert [tuple(r["args"][1:4]) for r in rows if r["alternatives"]] == LAYERS
    assert {a["template"] for r in rows for a in r["alternatives"]} == {WINOGRAD_TEMPLATE}
    assert main(["tasks", str(path)]) == 0
    out = capsys.readouterr().out
    assert "12 tuning tasks (and 4 alternatives)" in out
    assert [line.split()[:2] for line in out.splitlines() if WINOGRAD_TEMPLATE in line] == [
        ["alternative", WINOGRAD_TEMPLATE]] * 4

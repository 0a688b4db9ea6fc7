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
from onnx_models import assert_close, default_blocks, model, node, ort_run, rand
from tensortune.network.tasks import Search
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import append_records
from tensortune.autotvm.task import Task
from tensortune.cli import main
from tensortune.operators.conv_tasks import default_task, node_tasks
from network_logs import CONV_TEMPLATE, DEFAULT_TEMPLATE, WINOGRAD_TEMPLATE
from tensortune.network.tasks import extract_tasks
from tensortune.network import optimized_graph, zoo
from tensortune.network.compile_model import load_program
from tensortune.operators.conv_kernels import default_winograd_tile, winograd_kernel
from tensortune.network.program import default_kernel as declare
from tensortune.network.program import build_program
from tensortune.network.tuned import TunedKernels
from tensortune.network.tuning import weighted_tasks
from tensortune.ops import conv2d_nchw

TARGET = tt.Target.host()
LANES = TARGET.lanes("float32")
#: the 3x3, stride-1 workloads of ResNet-18 on 32x32 images: (C, H, W) of each stage
LAYERS = [(64, 8, 8), (128, 4, 4), (256, 2, 2), (512, 1, 1)]


@pytest.fixture(scope="module")
def resnet():
    return zoo.resnet18(image=32)


@pytest.fixture(scope="module")
def tasks(resnet):
    return extract_tasks(optimized_graph(resnet, TARGET), TARGET, search=Search.TEMPLATES)


def config_of_tile(task: Task, tile: int, seed: int = 0) -> int:
    """A random config of a Winograd task with output tiles of ``tile`` x ``tile``."""
    rng = random.Random(seed)
    return next(i for i in task.space.sample(200, rng) if task.config(i)["tile_size"] == tile)


def record(task: Task, index: int, seconds: float) -> tuple[MeasureInput, MeasureResult]:
    return MeasureInput(task, index), MeasureResult((seconds,), ErrorKind.NONE, "", 0.1, time.time())


def winograd_layers(tasks):
    return [t for t in tasks if any(a.name == WINOGRAD_TEMPLATE for a in t.alternatives)]


def test_3x3_stride_1_convolutions_have_a_winograd_alternative(tasks):
    with_winograd = winograd_layers(tasks)
    assert [t.task.args[1:4] for t in with_winograd] == LAYERS
    for t in tasks:  # every layer with a task also has its default kernel as the last alternative
        *alts, default = t.alternatives
        assert default == default_task(t.task) and default.args == (t.task.name, *t.task.args)
        assert [a.name for a in alts] == ([WINOGRAD_TEMPLATE] if t in with_winograd else [])
        assert t.tasks == (t.task, *alts, default)
        assert all(a.flops == t.task.flops == t.flops for a in t.alternatives)
    weighted = weighted_tasks(tasks)
    assert len(weighted) == 2 * len(tasks) + len(LAYERS)
    for t in tasks:  # the alternatives in one group, with the layer's occurrences
        assert [(w.weight, w.group) for w in weighted if w.task in t.tasks] == [(t.occurrences, t.workload)] * len(
            t.tasks)


@pytest.mark.slow
def test_compiling_runs_the_faster_alternative_of_each_layer(resnet, tasks, tmp_path):
    first, second = winograd_layers(tasks)[:2]
    log = tmp_path / "log.jsonl"
    rng = random.Random(1)
    append_records(log, [  # layer 1: Winograd is faster; layer 2: the direct convolution is
        record(first.task, default_blocks(first.task, first.task.space.sample(1, rng)[0]), 2e-3),
        record(first.alternatives[0], config_of_tile(first.alternatives[0], 4), 1e-3),
        record(second.task, default_blocks(second.task, second.task.space.sample(1, rng)[0]), 1e-3),
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


@pytest.mark.slow
@pytest.mark.parametrize("tile", [2, 4, 6])
def test_a_fused_winograd_kernel_equals_numpy(tile, tmp_path):
    m, w, b = residual_block(16, 32, 9)
    (conv,) = [n for n in optimized_graph(m, TARGET).nodes if n.op.kind == "Conv"]
    assert [s.op.name for s in conv.op.epilogue] == ["add", "relu"] and conv.op.has_bias
    (t,) = extract_tasks(optimized_graph(m, TARGET), TARGET, search=Search.TEMPLATES)
    wino, _ = t.alternatives
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
    assert main(["tasks", str(path), "--json", "--search", "templates"]) == 0
    rows = json.loads(capsys.readouterr().out)["tasks"]
    winograd = [[a for a in r["alternatives"] if a["template"] == WINOGRAD_TEMPLATE] for r in rows]
    assert [tuple(r["args"][1:4]) for r, w in zip(rows, winograd) if w] == LAYERS
    assert all(r["alternatives"][-1]["template"] == DEFAULT_TEMPLATE for r in rows)
    assert main(["tasks", str(path), "--search", "templates"]) == 0
    out = capsys.readouterr().out
    assert "12 tuning tasks (and 4 alternatives)" in out and f"untuned kernel ({DEFAULT_TEMPLATE})" in out
    assert [line.split()[:2] for line in out.splitlines() if WINOGRAD_TEMPLATE in line] == [
        ["alternative", WINOGRAD_TEMPLATE]] * 4


# ------------------------------------------------------------------ fused epilogues against the unfused graph

#: ResNet-18's 3x3, stride-1 layers (resnet18:C2, C6, C9, C12 at 224x224): (C, H, W), each with a tile size
RESNET18_LAYERS = [((64, 56, 56), 4), ((128, 28, 28), 2), ((256, 14, 14), 6), ((512, 7, 7), 4)]


def basic_block(c: int, size: int):
    """A ResNet basic block with a ReLU6 in the middle: ``relu(bn(conv(clip(bn(conv(x)), 0, 6)) + b) + x)``. After
    the graph passes: two fused 3x3 convolutions, the batch norms folded into their weights and biases, the first
    with a Clip epilogue, the second with a residual Add and a ReLU."""
    rng = np.random.default_rng(c)

    def bn(k):
        params = [rng.uniform(0.5, 1.5, c), rng.uniform(-0.1, 0.1, c), rng.uniform(-0.1, 0.1, c),
                  rng.uniform(0.5, 1.5, c)]
        return {f"{name}{k}": p.astype(np.float32) for name, p in zip(("gamma", "beta", "mean", "var"), params)}

    scale = np.sqrt(2.0 / (9 * c))
    consts = {"w1": (rng.standard_normal((c, c, 3, 3)) * scale).astype(np.float32),
              "w2": (rng.standard_normal((c, c, 3, 3)) * scale).astype(np.float32),
              "b2": rng.uniform(-0.1, 0.1, c).astype(np.float32), "lo": np.float32(0), "hi": np.float32(6),
              **bn(1), **bn(2)}
    conv = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    nodes = [node("Conv", ["x", "w1"], ["c1"], **conv),
             node("BatchNormalization", ["c1", "gamma1", "beta1", "mean1", "var1"], ["n1"]),
             node("Clip", ["n1", "lo", "hi"], ["a1"]),
             node("Conv", ["a1", "w2", "b2"], ["c2"], **conv),
             node("BatchNormalization", ["c2", "gamma2", "beta2", "mean2", "var2"], ["n2"]),
             node("Add", ["n2", "x"], ["s"]), node("Relu", ["s"], ["out"])]
    return model(nodes, {"x": (1, c, size, size)}, ["out"], consts)


def compile_winograd(m, tile: int):
    """``m`` compiled with every 3x3, stride-1 convolution a Winograd F(tile x tile) kernel (default schedule);
    the module and the names of those nodes."""
    g = optimized_graph(m, TARGET)
    winograd: list[str] = []

    def choose(g, n, target):
        if n.op.kind == "Conv" and any(t.name == WINOGRAD_TEMPLATE for t in node_tasks(g, n, target)):
            winograd.append(n.name)
            return winograd_kernel(g, n, target, LANES, tile)
        return declare(g, n, target)

    return load_program(build_program(g, TARGET, choose), TARGET), g, winograd


@pytest.mark.slow
@pytest.mark.parametrize("shape, tile", RESNET18_LAYERS, ids=["C2", "C6", "C9", "C12"])
def test_fused_winograd_kernels_equal_the_unfused_graph_on_resnet18_layers(shape, tile):
    """Folded batch norm (bias), Clip, residual Add and ReLU in the output transform, against onnxruntime running
    the unfused ONNX graph (7 nodes)."""
    c, h, w = shape
    m = basic_block(c, h)
    module, g, winograd = compile_winograd(m, tile)
    convs = [n for n in g.nodes if n.op.kind == "Conv"]
    assert winograd == [n.name for n in convs] and len(convs) == 2
    assert all(n.op.has_bias for n in convs)  # the batch norms, folded
    assert [[s.op.name for s in n.op.epilogue] for n in convs] == [["clip"], ["add", "relu"]]
    x = rand((1, c, h, w), c)
    assert_close(module(x), ort_run(m, {"x": x})[0], f"basic block {shape}, F({tile}x{tile}, 3x3)")


def test_untuned_3x3_stride_1_convolutions_run_winograd_by_the_measured_rule():
    """The largest tile of 6, 4, 2 that leaves at least 48 tiles (AVX2 only: the measured ISA)."""
    g = optimized_graph(zoo.resnet18(image=224), TARGET)
    convs = [n for n in g.nodes if n.op.kind == "Conv"]
    picked = {(tuple(g.values[n.inputs[0]].shape[1:]), default_winograd_tile(g, n, TARGET, LANES)) for n in convs
              if any(t.name == WINOGRAD_TEMPLATE for t in node_tasks(g, n, TARGET))}
    others = {default_winograd_tile(g, n, TARGET, LANES) for n in convs
              if not any(t.name == WINOGRAD_TEMPLATE for t in node_tasks(g, n, TARGET))}
    assert others == {None}  # 7x7, 1x1 and stride-2 convolutions stay direct
    if TARGET.isa is not tt.target.ISA.AVX2:
        assert {tile for _, tile in picked} == {None}
        return
    assert picked == {((64, 56, 56), 6), ((128, 28, 28), 4), ((256, 14, 14), 2), ((512, 7, 7), 2)}
    neon = tt.Target.parse("c -isa=neon -cores=4 -arch=aarch64")
    assert all(default_winograd_tile(g, n, neon, 4) is None for n in g.nodes if n.op.kind == "Conv")

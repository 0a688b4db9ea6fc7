"""Tasks of a network, and compiling with a tuning log: the best config of each task schedules its fused kernel."""
from __future__ import annotations

import time

import numpy as np
import pytest

import tensortune as tt
from tensortune.network.tasks import Search
from tensortune.target import Target
from onnx_models import assert_close, default_blocks, ort_run, rand
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import append_records
from tensortune.dtype import DType
from tensortune.graph.ir import GraphBuilder, TensorType, Value
from tensortune.network.tasks import extract_tasks
from tensortune.network import optimized_graph, zoo
from tensortune.network.tuned import TunedLayoutWarning
from tensortune.operators import Conv, Dense


@pytest.fixture
def template_lanes(monkeypatch):
    """The conv template's channel block set to this machine's vector length, as the target-derived blocks of the
    templates will give it (a no-op once the templates read the block from the target)."""
    from tensortune.autotvm.templates import conv2d

    lanes = tt.Target.host().lanes(DType.float32)
    monkeypatch.setattr(conv2d, "LANES", lanes, raising=False)
    return lanes


def test_resnet18_tasks_share_workloads():
    target = tt.Target.host()
    tasks = extract_tasks(optimized_graph(zoo.resnet18(image=32), target), target, search=Search.TEMPLATES)
    assert len(tasks) == 12 and sum(t.occurrences for t in tasks) == 21
    assert [t.occurrences for t in tasks if t.task and t.task.args[1:] == (64, 8, 8, 64, 3, 1, 1)] == [4]
    assert tasks[-1].kind == "dense" and tasks[-1].task.args == (1, 512, 1, 1, 1000, 1, 1, 0)
    keys = [t.workload for t in tasks]
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_layers_no_template_computes_are_named_by_their_shapes_and_dtype(dtype):
    """A dense layer and a convolution of a dtype no template tunes (and a grouped convolution) are tasks of no
    template, each named by its readable workload."""
    b = GraphBuilder("g")
    b.inputs = ["x", "img"]
    b.values["x"] = Value("x", TensorType((4, 8), dtype))
    b.values["img"] = Value("img", TensorType((1, 4, 6, 6), dtype))
    (fc,) = b.add(Dense(), ["x", b.add_constant("w", np.ones((16, 8), DType.of(dtype).numpy))], "fc")
    (cv,) = b.add(Conv(strides=(2, 2), pads=(1, 1, 1, 1), groups=2),
                  ["img", b.add_constant("k", np.ones((8, 2, 3, 3), DType.of(dtype).numpy))], "cv")
    b.outputs = [fc, cv]
    tasks = extract_tasks(b.build(), tt.Target.host(), search=Search.TEMPLATES)
    assert [(t.task, t.workload, t.kind) for t in tasks] == [
        (None, f"[4,8]->16 dense {dtype}", "dense"),
        (None, f"[1,4,6,6]->8 k3x3 s2x2 p1,1,1,1 d1x1 g2 {dtype}", "grouped_conv2d")]


@pytest.mark.slow
def test_depthwise_tasks_and_their_tuned_configs(tmp_path):
    m = zoo.mobilenet_v2(image=32)
    target = tt.Target.host()
    tasks = extract_tasks(optimized_graph(m, target), target, search=Search.TEMPLATES)
    depthwise = [t for t in tasks if t.kind == "depthwise_conv2d"]
    assert depthwise and all(t.task.name == "depthwise_conv2d_nchwc_packed" for t in depthwise)
    _log(tmp_path / "log.jsonl", [t.task for t in depthwise[:3]])
    module = tt.compile(m, log=tmp_path / "log.jsonl")
    tuned = [k for k in module.manifest.kernels if k.template]
    assert tuned and {k.kind for k in tuned} == {"depthwise_conv2d"}
    x = rand((1, 3, 32, 32), 6)
    assert_close(module(x), ort_run(m, {"input": x})[0])


def _log(path, tasks, seed=0):
    rng = np.random.default_rng(seed)
    pairs = []
    for t in tasks:
        for k in range(2):  # the faster of two records is the best
            index = default_blocks(t, int(rng.integers(len(t.space))))
            pairs.append((MeasureInput(t, index), MeasureResult((1e-3 * (k + 1),), ErrorKind.NONE, "", 0.1,
                                                                time.time())))
    append_records(path, pairs)
    return pairs


@pytest.mark.slow
def test_compile_with_a_log_uses_its_best_configs(tmp_path, template_lanes):
    m = zoo.resnet18(image=32)
    target = tt.Target.host()
    tasks = [t.task for t in extract_tasks(optimized_graph(m, target), target, search=Search.TEMPLATES)]
    chosen = [tasks[1], tasks[4], tasks[-1]]  # 3x3 convolutions (with and without residual), the dense layer
    pairs = _log(tmp_path / "log.jsonl", chosen)
    module = tt.compile(m, log=tmp_path / "log.jsonl")
    tuned = {k.function: k.template for k in module.manifest.kernels if k.template}
    assert set(tuned.values()) == {"conv2d_nchwc_packed"} and "dense" in {k.kind for k in module.manifest.kernels
                                                                          if k.template}
    assert sum(len(k.nodes) for k in module.manifest.kernels if k.template) == 4 + 3 + 1
    x = rand((1, 3, 32, 32), 5)
    assert_close(module(x), ort_run(m, {"input": x})[0])
    from tensortune.network.tuned import TunedKernels

    best = TunedKernels(tmp_path / "log.jsonl", target)
    assert best.best_index(chosen[0]) == pairs[0][0].config_index


def test_tuned_config_with_other_channel_blocks_is_left_out(tmp_path):
    from tensortune.frontend import import_onnx
    from tensortune.passes import optimize
    from tensortune.network.program import build_program
    from tensortune.network.tuned import TunedKernels

    m = zoo.resnet18(image=32)
    target = tt.Target.host()
    blocks_of_4 = Target.parse("c -isa=neon -cores=2 -arch=aarch64")  # 4 floats per vector
    graph = optimize(import_onnx(m), blocks_of_4)  # a layout of 4-channel blocks, which no template of the host uses
    tasks = [t.task for t in extract_tasks(graph, target, search=Search.TEMPLATES)]
    _log(tmp_path / "log.jsonl", [tasks[1]])
    choose = TunedKernels(tmp_path / "log.jsonl", target)
    lanes = target.lanes("float32")
    with pytest.warns(TunedLayoutWarning, match=f"block channels by {lanes}/{lanes}, the network.s layout by 4/4"):
        program = build_program(graph, target, choose)
    assert not choose.applied and not any(k.template for k in program.kernels)


@pytest.mark.parametrize("parallel", ["fuse2", "fuse3", "rows"])
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_packed_template_splits_among_threads_as_its_knob_says(parallel, stride):
    """Each way of splitting the work among threads (channel blocks, channel blocks and row tiles, row tiles
    first) computes the reference on two threads, timed on an input its threads rewrite in bands of rows too."""
    from tensortune.autotvm.catalog import create_task

    task = create_task("depthwise_conv2d", {"C": 32, "H": 11, "W": 9, "K": 3, "stride": stride, "pad": 1},
                       template="depthwise_conv2d_nchwc_packed")
    x, w = task.make_inputs()
    rng = np.random.default_rng(len(parallel) + stride)
    indices = [i for i in rng.permutation(len(task.space))[:400] if task.space.get(int(i))["parallel"] == parallel]
    for index in indices[:3]:
        s, op = task.instantiate(int(index))
        module = tt.build(s, list(op.args), num_threads=2)
        inputs = task.kernel_inputs(int(index), [x, w])
        before = inputs[0].copy()
        y = op.empty_output()
        module(*inputs, y)
        np.testing.assert_allclose(y, task.reference([x, w], int(index)), rtol=1e-4, atol=1e-4)
        y[...] = 0
        module.time_evaluator(number=2, repeat=1, fresh_input=True)(*inputs, y)
        np.testing.assert_array_equal(inputs[0], before)
        np.testing.assert_allclose(y, task.reference([x, w], int(index)), rtol=1e-4, atol=1e-4)
    assert indices


def test_a_first_layers_padded_input_is_copied_by_all_threads():
    """A network's first convolution (three channels, one block) pads its input in a copy parallel over rows as
    well (not one thread copying the whole image), and computes the reference on two threads."""
    from tensortune.autotvm.catalog import create_task

    task = create_task("conv2d", {"IC": 3, "H": 16, "W": 16, "OC": 16, "K": 3, "stride": 2, "pad": 1},
                       template="conv2d_nchwc_packed")
    x, w = task.make_inputs()
    for index in np.random.default_rng(3).choice(len(task.space), size=3, replace=False):
        s, op = task.instantiate(int(index))
        text = str(tt.lower(s, list(op.args)))
        pad_loop = next(line for line in text.splitlines() if "range(" in line)  # the copy comes first
        assert pad_loop.strip().endswith("in range(18):  # parallel"), pad_loop
        module = tt.build(s, list(op.args), num_threads=2)
        y = op.empty_output()
        module(*task.kernel_inputs(int(index), [x, w]), y)
        np.testing.assert_allclose(y, task.reference([x, w], int(index)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_packed_template_configs_equal_the_reference(stride):
    from tensortune.autotvm.catalog import create_task

    task = create_task("depthwise_conv2d", {"C": 16, "H": 9, "W": 9, "K": 3, "stride": stride, "pad": 1},
                       template="depthwise_conv2d_nchwc_packed")
    x, w = task.make_inputs()
    blocks = set()
    for index in np.random.default_rng(stride).choice(len(task.space), size=min(6, len(task.space)), replace=False):
        s, op = task.instantiate(int(index))
        module = tt.build(s, list(op.args))
        y = op.empty_output()
        module(*task.kernel_inputs(int(index), [x, w]), y)
        blocks.add(y.shape[-1])
        np.testing.assert_allclose(y, task.reference([x, w], int(index)), rtol=1e-4, atol=1e-4)
    lanes = tt.Target.host().lanes(DType.float32)
    assert blocks <= {lanes, 2 * lanes}

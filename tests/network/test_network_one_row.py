"""1x1 convolutions of short rows seen as one row of their pixels: the ``flat_args`` alternative of a layer, its
fused kernel computing the network (epilogue operands seen the same way), and the records that choose it."""
from __future__ import annotations

import json
import time

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensortune as tt
import tensortune.cli
from onnx_models import assert_close, default_blocks, model, node, ort_run, rand
from tensortune.network.tasks import Search
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import append_records
from tensortune.operators.conv_tasks import FLAT_MAX_WIDTH, flat_shape, is_flat, node_tasks
from tensortune.network.tasks import extract_tasks
from tensortune.network import optimized_graph, zoo
from tensortune.network.program import build_program
from tensortune.network.tuned import TunedKernels
from tensortune.target import ISA, Target

#: the view is offered on targets of 16 vector registers: AVX2 code, which x86-64 hosts with AVX2 run
AVX2 = Target(ISA.AVX2, 2, "x86_64")
needs_avx2 = pytest.mark.skipif(Target.host().isa not in (ISA.AVX2, ISA.AVX512),
                                reason="AVX2 code runs on x86-64 hosts with AVX2 only")


@settings(max_examples=60, deadline=None)
@given(h=st.integers(2, 6), w=st.integers(2, 6), lead=st.sampled_from([(), (1,), (3,), (1, 3), (2, 3), (2, 1)]),
       tail=st.sampled_from(["both", "none", "rows", "cols"]), seed=st.integers(0, 99))
def test_flat_shape_sees_the_same_broadcast_elements_in_one_row(h, w, lead, tail, seed):
    """An operand broadcast to an [N, C, h, w] output and laid over its pixels as one row is the operand seen with
    ``flat_shape`` broadcast to [N, C, 1, h*w]; an operand broadcast along one of the two axes only has no such
    view."""
    trailing = {"both": (h, w), "none": (1, 1), "rows": (h, 1), "cols": (1, w) if lead else (w,)}[tail]
    shape = lead + trailing if tail != "none" or lead else ()
    out = (2, 3, h, w)
    x = np.random.default_rng(seed).standard_normal(shape)
    view = flat_shape(shape, h, w)
    if tail in ("rows", "cols"):
        assert view is None
        return
    expected = np.broadcast_to(x, out).reshape(2, 3, 1, h * w)
    np.testing.assert_array_equal(np.broadcast_to(x.reshape(view), (2, 3, 1, h * w)), expected)


def _conv(name, x, channels, k=1, stride=1, pad=0, rng_seed=0):
    rng = np.random.default_rng(rng_seed)
    c = {"w": rng.uniform(-0.5, 0.5, (channels[1], channels[0], k, k)).astype(np.float32),
         "b": rng.uniform(-0.5, 0.5, channels[1]).astype(np.float32)}
    inits = {f"{name}_w": c["w"], f"{name}_b": c["b"]}
    n = node("Conv", [x, f"{name}_w", f"{name}_b"], [name], kernel_shape=[k, k], strides=[stride, stride],
             pads=[pad] * 4)
    return n, inits


def _epilogue_model(h, w):
    """Three 1x1 convolutions of 16 -> 16 channels on an h x w image: with a full-shape constant added and a
    per-channel constant multiplied in (both views exist), then a ReLU; with a per-column constant added (no view);
    with the first one's output added (a residual, a value of the network)."""
    a, ia = _conv("a", "x", (16, 16), rng_seed=1)
    b, ib = _conv("b", "x", (16, 16), rng_seed=2)
    c, ic = _conv("c", "a_relu", (16, 16), rng_seed=3)
    rng = np.random.default_rng(4)
    consts = {"full": rng.uniform(-1, 1, (1, 16, h, w)).astype(np.float32),
              "per_channel": rng.uniform(0.5, 1.5, (16, 1, 1)).astype(np.float32),
              "per_column": rng.uniform(-1, 1, (w,)).astype(np.float32)}
    nodes = [a, node("Add", ["a", "full"], ["a_full"]), node("Mul", ["a_full", "per_channel"], ["a_mul"]),
             node("Relu", ["a_mul"], ["a_relu"]),
             b, node("Add", ["b", "per_column"], ["b_col"]),
             c, node("Add", ["c", "a_relu"], ["c_res"]),
             node("Add", ["c_res", "b_col"], ["y"])]
    return model(nodes, {"x": (1, 16, h, w)}, ["y"], {**ia, **ib, **ic, **consts})


def _conv_node(graph, name):
    return next(n for n in graph.nodes if n.inputs[1:2] == (f"{name}_w",))


def test_one_row_alternative_is_offered_where_rows_are_short_and_operands_have_the_view(tmp_path, capsys):
    target = AVX2
    graph = optimized_graph(_epilogue_model(5, 7), target)
    flat = {}
    for name in "abc":
        n = _conv_node(graph, name)
        flat[name] = [t.args for t in node_tasks(graph, n, target) if is_flat(graph, n, t)]
    assert flat == {"a": [(1, 16, 1, 35, 16, 1, 1, 0)], "b": [], "c": [(1, 16, 1, 35, 16, 1, 1, 0)]}
    # `tensortune tasks --json` marks the view (layers a and c, one workload, are one task)
    path = tmp_path / "m.onnx"
    onnx.save(_epilogue_model(5, 7), path)
    assert tt.cli.main(["tasks", str(path), "--target", str(target), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["tasks"]
    assert sorted(tuple(a["args"]) for r in rows for a in r["alternatives"] if a["one_row"]) == \
        [(1, 16, 1, 35, 16, 1, 1, 0)]
    # a 3x3 convolution, a strided 1x1 and rows as long as FLAT_MAX_WIDTH get no view
    m = model([_conv("p", "x", (16, 16), 3, 1, 1)[0], _conv("q", "p", (16, 16), 1, 2, 0)[0],
               _conv("r", "x", (16, 16))[0], node("Add", ["q", "q"], ["y"]), node("Relu", ["r"], ["z"])],
              {"x": (1, 16, 4, FLAT_MAX_WIDTH)}, ["y", "z"],
              {**_conv("p", "x", (16, 16), 3, 1, 1)[1], **_conv("q", "p", (16, 16), 1, 2, 0)[1],
               **_conv("r", "x", (16, 16))[1]})
    g = optimized_graph(m, target)
    for t in extract_tasks(g, target, search=Search.TEMPLATES):
        assert not any(a.name == "conv2d_nchwc_packed" for a in t.alternatives), t
    # targets of 32 vector registers fit a short row in one tile: no view
    for wide in (Target(ISA.AVX512, 2, "x86_64"), Target(ISA.NEON, 2, "aarch64")):
        g = optimized_graph(_epilogue_model(5, 7), wide)
        assert not any(a.name == "conv2d_nchwc_packed" for t in extract_tasks(g, wide, search=Search.TEMPLATES) for a in t.alternatives)


def test_a_view_equal_to_another_layers_task_is_tuned_once():
    """A 5x7 layer's view (1, 16, 1, 35, 16) is the direct task of a layer on a 1x35 image: the scheduler gets it
    once, in that layer's group (it rejects a task listed twice), and both networks' layers still compute it."""
    from tensortune.autotvm.scheduler import TaskScheduler
    from tensortune.network.tuning import weighted_tasks

    a, ia = _conv("a", "x", (16, 16), rng_seed=1)
    b, ib = _conv("b", "x2", (16, 16), rng_seed=2)
    m = model([a, b, node("Relu", ["a"], ["y"]), node("Relu", ["b"], ["z"])],
              {"x": (1, 16, 5, 7), "x2": (1, 16, 1, 35)}, ["y", "z"], {**ia, **ib})
    tasks = extract_tasks(optimized_graph(m, AVX2), AVX2, search=Search.TEMPLATES)
    keys = [t.workload_key for nt in tasks for t in nt.tasks]
    assert len(keys) == len(set(keys))
    row = next(nt for nt in tasks if nt.task.args == (1, 16, 1, 35, 16, 1, 1, 0))
    square = next(nt for nt in tasks if nt.task.args == (1, 16, 5, 7, 16, 1, 1, 0))
    assert not any(t.args == row.task.args for t in square.alternatives)
    TaskScheduler(weighted_tasks(tasks), 0, progress=False)  # accepted: no task twice


def _flat_log(path, tasks, seed):
    """Records of random configs of ``tasks`` (the channel blocks the network's default layout keeps), each faster
    than any other record of its layer."""
    rng = np.random.default_rng(seed)
    pairs = [(MeasureInput(t, default_blocks(t, int(rng.integers(len(t.space))))),
              MeasureResult((1e-6,), ErrorKind.NONE, "", 0.1, time.time())) for t in tasks]
    append_records(path, pairs)
    return {t.workload_key: inp.config_index for t, (inp, _) in zip(tasks, pairs)}


@needs_avx2
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_one_row_kernels_with_epilogue_operands_compute_the_model(tmp_path, seed):
    """The one-row kernels of random configs, fused with a full-shape and a per-channel constant, a ReLU and a
    residual value, compute what onnxruntime computes; the layer without the view keeps its own kernel."""
    m = _epilogue_model(5, 7)
    target = AVX2
    graph = optimized_graph(m, target)
    flat = [a for t in extract_tasks(graph, target, search=Search.TEMPLATES) for a in t.alternatives if a.args[2] == 1 and a.args[3] == 35]
    assert len(flat) == 1  # the two layers with the view share one workload
    _flat_log(tmp_path / "log.jsonl", flat, seed)
    choose = TunedKernels(tmp_path / "log.jsonl", target)
    build_program(graph, target, choose)
    assert {n for n, t in choose.applied_task.items() if t == flat[0]} == {_conv_node(graph, "a").name,
                                                                          _conv_node(graph, "c").name}
    module = tt.compile(m, target, log=tmp_path / "log.jsonl")
    x = rand((1, 16, 5, 7), seed)
    assert_close(module(x), ort_run(m, {"x": x})[0])


@pytest.mark.slow
@needs_avx2
def test_mobilenet_runs_one_row_kernels_where_its_log_says(tmp_path):
    """MobileNetV2 at 64x64 (residual adds fused into projections): every one-row alternative (the 1x1 layers at
    8x8 and below) with a record faster than the rest runs, and the network computes onnxruntime's output."""
    m = zoo.mobilenet_v2(image=64)
    target = AVX2
    graph = optimized_graph(m, target)
    tasks = extract_tasks(graph, target, search=Search.TEMPLATES)
    flat = [a for t in tasks for a in t.alternatives if a.name == "conv2d_nchwc_packed"]
    widths = {t.task.args[3] for t in tasks if any(a in flat for a in t.alternatives)}
    assert widths == {w for w in (32, 16, 8, 4, 2) if w < FLAT_MAX_WIDTH} == {8, 4, 2}
    chosen = _flat_log(tmp_path / "log.jsonl", flat, 5)
    choose = TunedKernels(tmp_path / "log.jsonl", target)
    build_program(graph, target, choose)
    ran = {t.workload_key: choose.applied[n][1] for n, t in choose.applied_task.items()}
    assert ran == chosen
    module = tt.compile(m, target, log=tmp_path / "log.jsonl")
    x = rand((1, 3, 64, 64), 7)
    assert_close(module(x), ort_run(m, {"input": x})[0])

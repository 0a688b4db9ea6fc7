"""Network nodes as template-free tasks: a kernel's DAG as text and back, the expression tasks of a network's
nodes, their sketches against the default kernel, and a network tuned with them against onnxruntime."""
from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import tensortune as tt
import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune import te
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import append_records, load_records
from tensortune.build import generate_source
from tensortune.cli import main
from tensortune.errors import ExprError
from tensortune.lower import lower
from tensortune.network import optimized_graph
from tensortune.network.tasks import Search, extract_tasks, node_tasks
from tensortune.network.tuning import tune_model
from tensortune.operators.expression_tasks import is_expression, is_expression_default, sketched_kernel
from tensortune.ops import batch_matmul, conv2d_nchw, layer_norm, matmul_nn, softmax
from tensortune.schedule import Schedule
from tensortune.te.serialize import dumps, loads

HOST = tt.Target.host()
M, D, HEADS = 24, 32, 4


def c_of(schedule: Schedule, args) -> str:
    return generate_source(lower(schedule, list(args)), HOST)


def cumsum_relu(rows: int, cols: int):
    x = te.placeholder((rows, cols), "float32", "x")
    c = te.scan((rows, cols), "float32", 1, lambda own, i, j: te.select(j > 0, own[i, j - 1], te.const(0.0, "float32"))
                + x[i, j], "c")
    return [x], te.compute((rows, cols), lambda i, j: te.maximum(c[i, j], te.const(0.0, "float32")), "out")


OPERATORS = {
    "softmax": lambda a, b, c: softmax(a, b * 8),
    "layer_norm": lambda a, b, c: layer_norm(a, b * 8),
    "matmul": lambda a, b, c: matmul_nn(a, b, c, bias=True, relu=True),
    "batch_matmul": lambda a, b, c: batch_matmul(2, a, b, c, transpose_b=True),
    "conv2d": lambda a, b, c: conv2d_nchw(1, 2 * a, 6, 6, 4 * b, 3, 3, 1, 1, groups=2),
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(OPERATORS)), st.integers(1, 5), st.integers(1, 5), st.integers(1, 9))
def test_a_dag_round_trips_to_the_same_text_and_the_same_c(kind, a, b, c):
    op = OPERATORS[kind](a, b, c)
    text = dumps(op.args)
    again = loads(text)
    assert dumps(again) == text  # equal DAGs, equal text: the text is a key
    assert [t.name for t in again] == [t.name for t in op.args]
    assert [t.shape for t in again] == [t.shape for t in op.args]
    schedule = op.default_schedule(HOST)
    assert c_of(Schedule.replay(again[-1], schedule.steps), again) == c_of(schedule, op.args)


def test_a_scan_and_non_finite_constants_round_trip():
    inputs, out = cumsum_relu(3, 5)
    text = dumps([*inputs, out])
    again = loads(text)
    assert dumps(again) == text
    x = rand((3, 5), 1)
    module = tt.build(tt.create_schedule(again[-1]), list(again))
    y = np.zeros((3, 5), np.float32)
    module(x, y)
    np.testing.assert_allclose(y, np.maximum(np.cumsum(x, axis=1), 0), rtol=1e-5, atol=1e-6)
    v = te.placeholder((5,), "float32", "v")
    masked = te.compute((5,), lambda i: te.select(v[i] > 0.0, v[i], te.const(-math.inf, "float32")), "masked")
    text = dumps([v, masked])
    assert '"-inf"' in text and dumps(loads(text)) == text
    again = loads(text)
    assert c_of(tt.create_schedule(again[-1]), again) == c_of(tt.create_schedule(masked), [v, masked])


@pytest.mark.parametrize("text", ["not json", "{}", '{"vars": [], "tensors": [["x", [4], "float32"]], "args": [3]}',
                                  '{"vars": [], "tensors": [["x", [4], "float99"]], "args": [0]}'])
def test_malformed_text_is_an_expr_error(text):
    with pytest.raises(ExprError, match="malformed tensor-expression text"):
        loads(text)


@pytest.fixture(scope="module")
def attention():
    """LayerNorm, a dense layer, one head-split attention (Q K^T, Softmax, P V) and a ReduceMean: nodes that reduce,
    one of them with a template (the dense layer)."""
    nodes = [node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
             node("MatMul", ["ln", "w"], ["mm"]), node("Add", ["mm", "bias"], ["h"]),
             node("Reshape", ["h", "shape"], ["h3"]), node("Transpose", ["h3"], ["q"], perm=[1, 0, 2]),
             node("Transpose", ["h3"], ["kt"], perm=[1, 2, 0]), node("MatMul", ["q", "kt"], ["s"]),
             node("Softmax", ["s"], ["p"], axis=-1), node("MatMul", ["p", "q"], ["ctx"]),
             node("ReduceMean", ["ctx"], ["y"], axes=[2], keepdims=0)]
    return model(nodes, {"x": [M, D]}, ["y"], {"g": rand([D], 1), "b": rand([D], 2), "w": rand([D, D], 3),
                                               "bias": rand([D], 4), "shape": np.array([M, HEADS, D // HEADS])},
                 opset=17)


def test_every_reducing_node_is_an_expression_task_whose_default_is_the_nodes_kernel(attention):
    g = optimized_graph(attention, HOST)
    kinds = []
    for n in g.nodes:
        tasks = node_tasks(g, n, HOST)
        auto = [t for t in tasks if is_expression(t)]
        if not auto:
            continue
        kinds.append(n.op.kind)
        (task,) = auto
        kd = n.op.kernel(g, n, HOST)
        if not n.op.tasks(g, n, HOST):  # no template: the expression's default kernel is measured too
            (default,) = [t for t in tasks if is_expression_default(t)]
            assert len(default.space) == 1
            schedule, op = default.instantiate(0)
            assert c_of(schedule, op.args) == c_of(kd.schedule, kd.tensors)
        assert task.workload.name == kd.kind and task.flops > 0
    assert sorted(kinds) == sorted(["LayerNorm", "Dense", "MatMul", "Softmax", "MatMul", "Reduction"]), kinds
    # --search templates: only the dense layer, a template's; --search auto: every one, as expressions only
    assert [t.kind for t in extract_tasks(g, HOST, Search.TEMPLATES) if t.task] == ["dense"]
    auto = extract_tasks(g, HOST, Search.AUTO)
    assert len(auto) == 6 and all(is_expression(t.task) for t in auto)


def test_sketches_of_a_networks_nodes_match_their_default_kernel_and_replay_from_the_log(attention, tmp_path):
    g = optimized_graph(attention, HOST)
    sources = {}
    for t in extract_tasks(g, HOST, Search.AUTO):
        task = t.task
        inputs = task.make_inputs(seed=1)
        expected = task.reference(inputs)
        assert np.all(np.isfinite(expected))
        for index in task.space.sample(2, random.Random(len(t.nodes) + task.flops)):
            schedule, op = task.instantiate(index)
            out = np.full(op.output.shape, np.nan, op.output.dtype.numpy)
            tt.build(schedule, list(op.args))(*op.prepare(*inputs), out)
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5, err_msg=f"{t.workload} #{index}")
            # the node's own kernel under that config is the same program
            n = next(n for n in g.nodes if n.name == t.nodes[0])
            kd = sketched_kernel(n.op.kernel(g, n, HOST), task, index)
            assert c_of(kd.schedule, kd.tensors) == c_of(schedule, op.args)
        sources[task.workload_key] = c_of(schedule, op.args)
        append_records(tmp_path / "log.jsonl", [(MeasureInput(task, index), MeasureResult((1e-3,), ErrorKind.NONE,
                                                                                          "", 0.1))])
    for record in load_records(tmp_path / "log.jsonl"):  # a record alone gives the same program again
        again = record.task()
        assert is_expression(again)
        schedule, op = again.instantiate(record.config_index)
        assert c_of(schedule, op.args) == sources[record.workload]
    assert len(sources) == 6


def sketches_win(inputs):
    """A fake measurement: every sketch runs faster than its node's default kernel and than any template."""
    return [MeasureResult((1e-6 * (1 + i.config_index % 7) if is_expression(i.task) else 1e-3,), ErrorKind.NONE, "",
                          0.0) for i in inputs]


def test_a_network_tuned_with_sketches_runs_them_and_equals_onnxruntime(attention, tmp_path):
    log = tmp_path / "net.jsonl"
    result = tune_model(attention, 40, log, tuner="random", round_size=4, measure=sketches_win, seed=0,
                        progress=False)
    assert sum(result.trials) == 40
    module = nw.compile(attention, log=log)
    sketched = {n for k in module.manifest.kernels if k.template == "auto_expression" for n in k.nodes}
    assert len(sketched) == 6  # every reducing node, the dense layer's template beaten too
    x = rand((M, D), 5)
    assert_close(module(x), ort_run(attention, {"x": x})[0], "attention tuned template-free")


def test_a_sketch_slower_than_the_default_is_not_applied(attention, tmp_path):
    def defaults_win(inputs):
        return [MeasureResult((1e-3 if is_expression(i.task) else 1e-6,), ErrorKind.NONE, "", 0.0) for i in inputs]

    log = tmp_path / "net.jsonl"
    tune_model(attention, 24, log, tuner="random", round_size=4, measure=defaults_win, seed=0, progress=False,
               search=Search.AUTO)
    module = nw.compile(attention, log=log)
    assert not [k for k in module.manifest.kernels if k.template == "auto_expression"]


def test_tasks_and_tune_model_take_search(attention, tmp_path, capsys):
    path = tmp_path / "attn.onnx"
    path.write_bytes(attention.SerializeToString())
    assert main(["tasks", str(path), "--search", "auto", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["tasks"]
    assert [r["template"] for r in rows] == ["auto_expression"] * 6
    assert all(a["template"] == "expression_default" and a["default"] for r in rows for a in r["alternatives"])
    assert main(["tasks", str(path)]) == 0
    text = capsys.readouterr().out
    assert "auto_expression" in text and "softmax #" in text and '"vars"' not in text  # no DAG text in the table
    assert main(["tasks", str(path), "--search", "templates", "--json"]) == 0
    assert [r["template"] for r in json.loads(capsys.readouterr().out)["tasks"] if r["template"]] == \
        ["conv2d_nchwc_packed"]

"""Grouped convolutions of a network (ResNeXt's groups of 4 channels, RegNet's of 16) are tuning tasks of
``conv2d_nchwc_packed`` with the groups their kernels run (narrow groups merged into whole channel blocks): listed by
``tasks``, tuned by ``tune_model``, and run by the network compiled with the log, equal to onnxruntime."""
from __future__ import annotations

import json
from collections import Counter

import onnx
import pytest

import tensortune.network as nw
from network_logs import CONV_TEMPLATE, DEFAULT_TEMPLATE
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.network.tasks import Search
from tensortune.autotvm.measure.result import ErrorKind, MeasureResult
from tensortune.autotvm.record import load_records
from tensortune.cli import main
from tensortune.network import optimized_graph
from tensortune.network.tasks import extract_tasks
from tensortune.network.tuning import tune_model
from tensortune.operators.conv_kernels import group_merge
from tensortune.target import ISA, Target

HOST = Target.host()
#: AVX2 code (x86-64 hosts with AVX2 run it): blocks of 8 channels, narrow groups merged otherwise, and a 1x1
#: layer's pixels as one row (``conv_tasks.flat_workload``) an alternative
AVX2 = Target(ISA.AVX2, 2, "x86_64")
TARGETS = [HOST] + [pytest.param(AVX2, id="avx2", marks=pytest.mark.skipif(
    HOST.isa is not ISA.AVX512, reason="AVX2 code runs here only on an AVX-512 host (another than the host's)"))]
C = 128
#: the grouped layers: node -> (groups, kernel size)
LAYERS = {"Conv_c1": (32, 3), "Conv_y": (8, 1)}


def fake_measure(inputs):
    """Every config 'runs' at a speed drawn from its index, the untuned kernels slower than all: no hardware."""
    return [MeasureResult((1e-3 if i.task.name == DEFAULT_TEMPLATE else 1e-6 * (1 + (i.config_index * 7919) % 97),),
                          ErrorKind.NONE, "", 0.0) for i in inputs]


@pytest.fixture(scope="module")
def grouped():
    """32 groups of 4 channels (3x3, bias, ReLU), then 8 groups of 16 (1x1)."""
    (g1, k1), (g2, k2) = LAYERS.values()
    nodes = [node("Conv", ["x", "w1", "b1"], ["c1"], pads=[k1 // 2] * 4, group=g1),
             node("Relu", ["c1"], ["r1"]),
             node("Conv", ["r1", "w2"], ["y"], pads=[k2 // 2] * 4, group=g2)]
    return model(nodes, {"x": (1, C, 8, 8)}, ["y"], {"w1": rand((C, C // g1, k1, k1), 1), "b1": rand((C,), 2),
                                                      "w2": rand((C, C // g2, k2, k2), 3)})


def merged(groups: int, target: Target = HOST) -> int:
    """The groups a layer of ``groups`` runs as in the default layout (one vector per block)."""
    return groups // group_merge(groups, ((C, target.lanes("float32")),))


def test_grouped_layers_are_tasks_of_the_groups_their_kernels_run(grouped):
    tasks = extract_tasks(optimized_graph(grouped, HOST), HOST, search=Search.TEMPLATES)
    assert [t.kind for t in tasks] == ["grouped_conv2d"] * 2
    for t, (groups, k) in zip(tasks, LAYERS.values()):
        assert t.task.name == CONV_TEMPLATE and t.task.workload.groups == merged(groups)
        assert t.task.args == (1, C, 8, 8, C, k, 1, k // 2, "float32", merged(groups))
        assert DEFAULT_TEMPLATE in [a.name for a in t.alternatives]  # never Winograd: it computes no groups
        assert "winograd" not in " ".join(a.name for a in t.alternatives)
        assert t.flops == 2 * C * 64 * (C // groups) * k * k  # the layer's own work, not the merged kernel's


def test_the_tasks_command_lists_grouped_tasks(grouped, tmp_path, capsys):
    path = tmp_path / "grouped.onnx"
    onnx.save(grouped, path)
    assert main(["tasks", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["tasks"]
    assert [(r["kind"], r["template"], r["args"][-1]) for r in rows] == [
        ("grouped_conv2d", CONV_TEMPLATE, merged(g)) for g, _ in LAYERS.values()]


@pytest.mark.parametrize("target", TARGETS)
def test_a_tuned_grouped_network_runs_its_tuned_configs_and_equals_onnxruntime(grouped, tmp_path, target):
    log = tmp_path / "grouped.jsonl"
    result = tune_model(grouped, 24, log, target, tuner="random", round_size=4, measure=fake_measure, seed=0,
                        progress=False, search=Search.TEMPLATES)
    records = load_records(log)
    assert sum(result.trials) == len(records) == 24
    by_task = Counter(r.template for r in records)
    assert by_task[DEFAULT_TEMPLATE] == 2 and by_task[CONV_TEMPLATE] == 22
    assert {json.loads(r.workload)[1][-1] for r in records if r.template == CONV_TEMPLATE} == {
        merged(g, target) for g, _ in LAYERS.values()}
    module = nw.compile(grouped, target, log=log)
    templates = {n: k.template for k in module.manifest.kernels for n in k.nodes}
    assert all(templates[name] == CONV_TEMPLATE for name in LAYERS), templates
    x = rand((1, C, 8, 8), 4)
    assert_close(module(x), ort_run(grouped, {"x": x})[0])

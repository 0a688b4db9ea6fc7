"""Tuning a whole network within one budget, then compiling it with the log: tuned kernels, same answers."""
from __future__ import annotations

import json
from collections import Counter

import pytest

import tensortune.network as nw
from onnx_models import assert_close, ort_run, rand
from tensortune.network.tasks import Search
from tensortune.autotvm.measure.result import ErrorKind, MeasureResult
from tensortune.autotvm.record import load_records
from tensortune.cli import main
from network_logs import CONV_TEMPLATE, DEFAULT_TEMPLATE, WINOGRAD_TEMPLATE
from tensortune.network import zoo
from tensortune.network.tuning import network_tasks, tune_model, weighted_tasks
from tensortune.target import Target

IMAGE = 32


def fake_measure(inputs):
    """Every config 'runs' at a speed drawn from its index: no hardware, any valid config can win (a layer's
    untuned kernel 'runs' slower than all)."""
    return [MeasureResult((1e-3 if i.task.name == DEFAULT_TEMPLATE else 1e-6 * (1 + (i.config_index * 7919) % 97),),
                          ErrorKind.NONE, "", 0.0) for i in inputs]


@pytest.fixture(scope="module")
def resnet():
    return zoo.resnet18(image=IMAGE)


def test_the_networks_tasks_carry_their_occurrences(resnet):
    target = Target.host()
    tasks = network_tasks(resnet, target, search=Search.TEMPLATES)
    weighted = weighted_tasks(tasks)
    layers = {w.group_key: w.weight for w in weighted}  # a layer's alternatives count once
    assert sum(layers.values()) == sum(t.occurrences for t in tasks if t.task is not None)
    assert max(w.weight for w in weighted) > 1  # repeated layers share one task
    assert len({w.task.workload_key for w in weighted}) == len(weighted)
    groups = Counter(w.group for w in weighted)  # direct and the untuned kernel; 3x3, stride-1 layers: and Winograd
    assert None not in groups and set(groups.values()) == {2, 3}
    for group, n in groups.items():
        names = sorted(w.task.name for w in weighted if w.group == group)
        assert names == sorted([CONV_TEMPLATE, DEFAULT_TEMPLATE] + [WINOGRAD_TEMPLATE] * (n == 3))
    assert all(w.task.name == DEFAULT_TEMPLATE for w in weighted[:len(groups)])  # measured first
    # by default, each layer's template-free search too, and the poolings' (no template), with their untuned kernels
    every = weighted_tasks(network_tasks(resnet, target))
    for group, n in groups.items():  # (one sketch per distinct fused kernel: nodes of a workload differ in epilogues)
        names = [w.task.name for w in every if w.group == group]
        assert sorted(n for n in names if n != "auto_expression") == \
            sorted(w.task.name for w in weighted if w.group == group) and "auto_expression" in names
    pools = Counter(w.group for w in every if w.group not in groups)
    assert len(pools) == 2 and set(pools.values()) == {2}  # the max pooling, the global average pooling
    assert {w.task.name for w in every if w.group in pools} == {"auto_expression", "expression_default"}


@pytest.mark.slow
def test_a_tuned_network_uses_its_log_and_still_equals_onnxruntime(resnet, tmp_path):
    log = tmp_path / "net.jsonl"
    result = tune_model(resnet, 240, log, tuner="random", round_size=8, measure=fake_measure, seed=0,
                        progress=False)  # the templates' tasks and the template-free search of every node
    assert sum(result.trials) == 240 and len(load_records(log)) == 240
    tuned_tasks = sum(1 for n in result.trials if n > 0)
    assert tuned_tasks == len(result.tasks)  # every task had its first round (Winograd alternatives included)
    module = nw.compile(resnet, log=log)
    tuned = [k for k in module.manifest.kernels if k.template]
    layers = len({w.group_key for w in result.tasks})  # each runs one of its alternatives
    assert len(tuned) >= layers - 1  # (a config whose blocks differ from the layout falls back)
    x = rand((1, 3, IMAGE, IMAGE), 3)
    (expected,) = ort_run(resnet, {"input": x})
    assert_close(module(x), expected, "tuned resnet18")


@pytest.mark.slow
def test_tune_model_on_the_command_line_resumes(resnet, tmp_path, capsys):
    model = tmp_path / "resnet.onnx"
    model.write_bytes(resnet.SerializeToString())
    log, curve = tmp_path / "net.jsonl", tmp_path / "curve.json"
    args = ["tune-model", str(model), "--trials", "16", "--log", str(log), "--round-size", "8", "--tuner", "random",
            "--quiet", "--json", "--curve", str(curve), "--top", "1", "--rounds", "1", "--seed", "0",
            "--search", "templates"]
    # (seeded: unseeded, the round of 4 random configs once left no layer a tuned config for refine to time, in
    # a CI run of 2026-12-02; seeds 0-9 each give 2-4 refinement records)
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["trials"] == 16 and len(load_records(log)) == 16
    # then the layers with a tuned config were timed inside the network (those records are not trials)
    assert not first["refine"]["skipped"] and first["refine"]["records"] >= 2
    assert len(load_records(log, in_network=True)) == 16 + first["refine"]["records"]
    # the 12 layers' untuned kernels first, one trial each, then first rounds (of 4 to 8 trials, by the layer's
    # share of the untuned network) until the budget is spent
    totals = [c["trials"] for c in json.loads(curve.read_text())]
    assert totals[:12] == list(range(1, 13)) and totals[-1] == 16
    assert all(4 <= b - a <= 8 for a, b in zip(totals[11:], totals[12:])), totals
    assert main([*args[:3], "24", *args[4:]]) == 0  # more trials: the 16 logged ones are not measured again
    second = json.loads(capsys.readouterr().out)
    records = load_records(log)
    assert second["trials"] == 24 and len(records) == 24
    assert max(Counter((r.workload, r.config_index) for r in records).values()) == 1
    assert second["refine"]["records"] > 0  # new trials: refined again
    lines = len(load_records(log, in_network=True))
    assert main([*args[:3], "24", *args[4:]]) == 0  # nothing left to do: no trial, no refinement
    third = json.loads(capsys.readouterr().out)
    assert third["refine"]["skipped"] and len(load_records(log, in_network=True)) == lines
    assert main([*args[:3], "24", *args[4:], "--no-refine"]) == 0
    assert json.loads(capsys.readouterr().out)["refine"] is None


@pytest.mark.slow
@pytest.mark.parametrize("flag", [[], ["--no-pretrained"]])
def test_tune_model_no_pretrained_reaches_the_scheduler(resnet, tmp_path, capsys, monkeypatch, flag):
    from tensortune.autotvm.scheduler import TaskScheduler

    model = tmp_path / "resnet.onnx"
    model.write_bytes(resnet.SerializeToString())
    seen = []
    original = TaskScheduler.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("pretrained", True))
        original(self, *args, **kwargs)
    monkeypatch.setattr(TaskScheduler, "__init__", spy)
    # 12 trials: the layers' untuned kernels only (one config each), nothing for a model to rank
    assert main(["tune-model", str(model), "--trials", "12", "--log", str(tmp_path / "net.jsonl"), "--quiet",
                 "--no-refine", *flag]) == 0
    assert seen == [not flag]


@pytest.mark.slow
@pytest.mark.parametrize("flag", [[], ["--warm-input"]])
def test_tune_model_warm_input_reaches_the_measurement(resnet, tmp_path, monkeypatch, flag):
    import tensortune.network.tuning as tuning

    model = tmp_path / "resnet.onnx"
    model.write_bytes(resnet.SerializeToString())
    seen = []
    original = tuning.tune_model

    def spy(*args, **kwargs):
        seen.append(kwargs["fresh_input"])
        return original(*args, **kwargs)
    monkeypatch.setattr(tuning, "tune_model", spy)
    assert main(["tune-model", str(model), "--trials", "12", "--log", str(tmp_path / "net.jsonl"), "--quiet",
                 "--no-refine", *flag]) == 0
    assert seen == [not flag]


def test_tune_model_errors_are_one_line(tmp_path, capsys):
    assert main(["tune-model", str(tmp_path / "missing.onnx"), "--trials", "8", "--log", str(tmp_path / "l")]) == 2
    assert capsys.readouterr().err.count("\n") == 1



@pytest.mark.slow
def test_tune_model_times_kernels_on_fresh_inputs_unless_given_a_measure(resnet, tmp_path, monkeypatch):
    """Measuring here, tune_model times each kernel on an input its threads rewrite first (as inside the network);
    a caller's own measure is used as it is."""
    import tensortune.autotvm.measure as measure_module

    runners, original = [], measure_module.Measurer

    def measurer(options):
        runners.append(options.runner)
        return original(options)
    monkeypatch.setattr(measure_module, "Measurer", measurer)
    tasks = network_tasks(resnet, Target.host(), search=Search.TEMPLATES)
    layers = len({w.group_key for w in weighted_tasks(tasks)})
    result = tune_model(resnet, layers, tmp_path / "net.jsonl", tuner="random", seed=0, num_threads=2,
                        progress=False, search=Search.TEMPLATES)  # the layers' untuned kernels, one trial each
    assert sum(result.trials) == layers and all(r.ok for r in load_records(tmp_path / "net.jsonl"))
    assert [(r.fresh_input, r.num_threads) for r in runners] == [(True, 2)]
    tune_model(resnet, 4, tmp_path / "fake.jsonl", tuner="random", measure=fake_measure, seed=0, progress=False)
    assert len(runners) == 1


def test_a_network_with_nothing_to_tune_is_a_tune_error(tmp_path):
    from onnx_models import model, node
    from tensortune.autotvm.tune import TuneError

    relu = model([node("Relu", ["x"], ["y"])], {"x": (1, 8)}, ["y"])
    with pytest.raises(TuneError, match="no convolution or dense layer .*, and no node that reduces"):
        tune_model(relu, 8, tmp_path / "net.jsonl", progress=False)
    assert not (tmp_path / "net.jsonl").exists()


def test_a_transformer_layer_tunes_every_kind_and_still_equals_onnxruntime(tmp_path):
    """An encoder layer as exporters write it (``test_network_attention``): tune-model has tasks for its dense
    layers (with their bias, GELU and residual), its batched matmuls, softmax and LayerNorms; every one is tuned
    within the budget, and the network compiled with the log runs them and equals onnxruntime."""
    from test_network_attention import encoder_layer

    from tensortune.autotvm.templates.auto import expression_default_template

    m, feeds = encoder_layer(tokens=13, heads=2, head=8, ffn=32, mask="padding", gelu="erf")
    log = tmp_path / "encoder.jsonl"
    untuned = {DEFAULT_TEMPLATE, expression_default_template.name}

    def measure(inputs):  # fake_measure's, the untuned kernels of expression tasks slower than all too
        return [MeasureResult((1e-3 if i.task.name in untuned else 1e-6 * (1 + (i.config_index * 7919) % 97),),
                              ErrorKind.NONE, "", 0.0) for i in inputs]

    result = tune_model(m, 160, log, tuner="random", round_size=8, measure=measure, seed=0, progress=False)
    assert all(n > 0 for n in result.trials)
    kinds = {w.task.name for w in result.tasks}
    assert {CONV_TEMPLATE, "auto_expression"} <= kinds
    module = nw.compile(m, log=log)
    tuned = {k.kind for k in module.manifest.kernels if k.template}
    assert {"dense", "softmax", "layer_norm", "matmul"} <= tuned, tuned
    assert_close(module.run(feeds)["y"], ort_run(m, feeds)[0], "tuned encoder layer")

"""Choosing each layer's kernel by timing it inside the network: candidates, in-network records, compile's choice."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import tensortune as tt
from network_logs import timed, tuned_layers, valid_configs
from onnx_models import assert_close, ort_run, rand
from tensortune.network.tasks import Search
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.task import Task
from tensortune.autotvm.record import Record, append_records, load_records, pick_best, write_records
from tensortune.cli import main
from tensortune.errors import ArgumentError
from tensortune.operators.conv_tasks import default_task
from network_logs import CONV_TEMPLATE, DEFAULT_TEMPLATE, WINOGRAD_TEMPLATE
from tensortune.network.tasks import extract_tasks
from tensortune.network import optimized_graph, zoo
from tensortune.network.refine import config_kind, layer_candidates, refine
from tensortune.network.refinements import layer_tag, network_fingerprint
from tensortune.network.tuned import TunedKernels
from tensortune.target import Target

HOST = Target.host()
IMAGE = 32


@pytest.fixture(scope="module")
def resnet():
    return zoo.resnet18(image=IMAGE)


def _fake_log(m, path):
    """Records timed alone: per layer three direct configs (0.1, 0.2, 0.3 ms), one Winograd config where the layer
    has one (0.5 ms), the untuned kernel (1 ms). Returns {workload: (direct indices, winograd index or None)}."""
    g, layers = tuned_layers(m, HOST)
    pairs, layout = [], {}
    for t, node in layers:
        direct = valid_configs(g, node, t.task, 3)
        pairs += [timed(t.task, i, 1e-4 * (k + 1)) for k, i in enumerate(direct)]
        wino = next((a for a in t.alternatives if a.name == WINOGRAD_TEMPLATE), None)
        w = valid_configs(g, node, wino, 1)[0] if wino is not None else None
        if wino is not None:
            pairs.append(timed(wino, w, 5e-4))
        pairs.append(timed(default_task(t.task), 0, 1e-3))
        layout[t.workload] = (direct, w)
    append_records(path, pairs)
    return layout


@pytest.mark.slow
def test_refine_times_each_layers_candidates_in_the_network_and_compile_runs_its_choice(resnet, tmp_path):
    log = tmp_path / "net.jsonl"
    layout = _fake_log(resnet, log)
    alone = len(load_records(log))
    result = refine(resnet, log, HOST, top_k=2, rounds=3, runs=1)
    # candidates: the 2 fastest alone; the fastest of another thread split (the 3rd config, where its split is
    # not one of theirs) and of the other template (Winograd); the untuned kernel
    assert {l.workload for l in result.layers} == set(layout)
    for layer in result.layers:
        direct, wino = layout[layer.workload]
        task = layer.candidates[0].task
        split = [config_kind(task, task.config(i).to_json()) for i in direct]
        expected = [(CONV_TEMPLATE, direct[0], 1e-4), (CONV_TEMPLATE, direct[1], 2e-4)]
        expected += [(CONV_TEMPLATE, direct[2], 3e-4)] if split[2] not in split[:2] else []
        expected += [(WINOGRAD_TEMPLATE, wino, 5e-4)] if wino is not None else []
        expected += [(DEFAULT_TEMPLATE, 0, 1e-3)]
        assert [(c.task.name, c.index) for c in layer.candidates] == [e[:2] for e in expected]
        assert [c.alone for c in layer.candidates] == pytest.approx([e[2] for e in expected])
        assert all(len(s) == 3 and min(s) > 0 for s in layer.seconds)  # timed once per round
    # the timings are in the log, marked with the network; searches and `best` do not see them
    assert len(load_records(log)) == alone
    timed = [r for r in load_records(log, in_network=True) if r.network]
    assert len(timed) == result.records == sum(len(l.candidates) for l in result.layers)
    fp = network_fingerprint(optimized_graph(resnet, HOST), HOST)
    assert {r.network for r in timed} == {layer_tag(fp, layer.blocks) for layer in result.layers}
    assert set(result.check) == {"untuned", "fastest_alone", "chosen"}
    assert all(0 < s < 1 for s in result.check.values())
    # compiling with the log runs each layer's choice
    g = optimized_graph(resnet, HOST)
    choose = TunedKernels(log, HOST)
    for node in g.nodes:
        choose(g, node, HOST)
    for layer in result.layers:
        c = layer.candidates[layer.chosen]
        for n in layer.nodes:
            if c.is_default:
                assert n in choose.kept_default and n not in choose.applied
            else:
                assert choose.applied[n] == (c.task.name, c.index)
    assert sorted(choose.refined) == sorted(n for l in result.layers for n in l.nodes)
    module = tt.compile(resnet, log=log)
    x = rand((1, 3, IMAGE, IMAGE), 5)
    assert_close(module(x), ort_run(resnet, {"input": x})[0], "refined resnet18")
    # a rerun without force repeats nothing: the refinement is newer than every trial
    again = refine(resnet, log, HOST, top_k=2, rounds=3, runs=1, force=False)
    assert again.skipped and again.records == 0
    assert len(load_records(log, in_network=True)) == alone + result.records


def _fake_networks(monkeypatch, g, producer, first, readers) -> list[dict]:
    """Networks whose profiles are faked from the candidates they run: ``producer``'s first candidate (its fastest
    alone) takes 1 ms and makes every call reading its output 5 ms slower, any other takes 2 ms; every other call
    1 ms. Returns the list that gets each built network's picks (node -> (task name, config index), or None for a
    node of no candidates)."""
    import importlib

    refine_module = importlib.import_module("tensortune.network.refine")
    built: list[dict] = []

    class Fake:
        def __init__(self, picks):
            self.picks = picks
            built.append(picks)

        def profile(self, *inputs, repeat):
            mine = self.picks[producer]
            slow = mine == (first.candidates[0].task.name, first.candidates[0].index)
            return [{"node": n.name, "seconds": (1e-3 if slow else 2e-3) if n.name == producer else
                     1e-3 + (5e-3 if slow and n.name in readers[producer] else 0.0)} for n in g.nodes]

    def load_network(graph, target, choose, threads):
        return Fake({n.name: choose(graph, n, target) for n in graph.nodes})

    monkeypatch.setattr(refine_module, "kernel_of", lambda graph, node, c: (c.task.name, c.index))
    monkeypatch.setattr(refine_module, "default_kernel", lambda graph, node, target: None)
    monkeypatch.setattr(refine_module, "load_network", load_network)
    monkeypatch.setattr(refine_module, "random_inputs", lambda m: [])
    return built


def test_refine_counts_what_a_layers_readers_spend_and_never_varies_a_layer_and_its_reader_together(
        resnet, tmp_path, monkeypatch):
    """Profiles faked by the candidates each network runs: the first layer's fastest kernel (alone and inside) makes
    every call reading its output 5 ms slower, its second 1 ms slower than the first itself. Counting the readers,
    refine keeps the second; the layers varied in one network never read each other's output."""
    import importlib

    refine_module = importlib.import_module("tensortune.network.refine")
    log = tmp_path / "net.jsonl"
    _fake_log(resnet, log)
    g = optimized_graph(resnet, HOST)
    readers = refine_module._readers(g)
    first = next(l for l in layer_candidates(g, HOST, load_records(log), 2) if len(l.candidates) > 1)
    producer = first.nodes[0]
    assert readers[producer], "the first tuned layer's output is read"
    varied: list[set[str]] = []
    _fake_networks(monkeypatch, g, producer, first, readers)
    phases = refine_module._phases(g, layer_candidates(g, HOST, load_records(log), 2))
    for phase in phases:
        nodes = {n for layer in phase for n in layer.nodes}
        varied.append(nodes)
        assert not any(m in nodes for n in nodes for m in readers[n] if m not in
                       next(l.nodes for l in phase if n in l.nodes)), "a phase varies a layer and its reader"
    assert len(phases) >= 2 and set().union(*varied) == {n for l in phases for layer in l for n in layer.nodes}
    result = refine(resnet, log, HOST, top_k=2, rounds=2, runs=1, check=False)
    (layer,) = [l for l in result.layers if producer in l.nodes]
    assert layer.chosen == 1  # 2 ms + its readers at 1 ms each, not 1 ms + its readers at 6 ms
    assert layer.median(0) == pytest.approx(1e-3 + 6e-3 * len(readers[producer]))
    assert layer.median(1) == pytest.approx(2e-3 + 1e-3 * len(readers[producer]))
    choose = TunedKernels(log, HOST)
    choose(g, next(n for n in g.nodes if n.name == producer), HOST)
    assert choose.applied[producer] == (layer.candidates[1].task.name, layer.candidates[1].index)


def test_a_second_refine_starts_from_the_choices_of_the_first(resnet, tmp_path, monkeypatch):
    """A layer's neighbours run their choice so far while it is varied: in a first refinement their fastest alone,
    in a second the first's choices (a second step of the descent), and the second's records decide compile."""
    import importlib

    refine_module = importlib.import_module("tensortune.network.refine")
    log = tmp_path / "net.jsonl"
    _fake_log(resnet, log)
    g = optimized_graph(resnet, HOST)
    readers = refine_module._readers(g)
    # a layer of the second phase: the first phase's networks run it before any refinement has chosen for it
    first = next(l for l in refine_module._phases(g, layer_candidates(g, HOST, load_records(log), 2))[1]
                 if len(l.candidates) > 1 and readers[l.nodes[0]])
    producer = first.nodes[0]
    built = _fake_networks(monkeypatch, g, producer, first, readers)
    fastest, other = ((c.task.name, c.index) for c in first.candidates[:2])

    one = refine(resnet, log, HOST, top_k=2, rounds=1, runs=1, check=False)
    assert next(l for l in one.layers if producer in l.nodes).chosen == 1
    phases = refine_module._phases(g, one.layers)
    producer_phase = next(k for k, phase in enumerate(phases) if any(producer in l.nodes for l in phase))
    per_phase = [len(max(phase, key=lambda l: len(l.candidates)).candidates) for phase in phases]
    starts = [sum(per_phase[:k]) for k in range(len(phases))]

    def producer_kernels(networks: list[dict]) -> list[set]:
        """Per phase, the producer's kernels in its networks."""
        return [{networks[starts[k] + i][producer] for i in range(per_phase[k])} for k in range(len(phases))]

    kernels = producer_kernels(built)
    later = [k for k in range(len(phases)) if k != producer_phase]
    assert producer_phase == 1 and all(kernels[k] == ({other} if k > producer_phase else {fastest}) for k in later)
    built.clear()
    refine(resnet, log, HOST, top_k=2, rounds=1, runs=1, check=False)
    kernels = producer_kernels(built)
    assert all(kernels[k] == {other} for k in later)  # every phase that does not vary it: the first's choice, also
    # the phase before its own
    assert kernels[producer_phase] == {(c.task.name, c.index) for c in first.candidates}
    choose = TunedKernels(log, HOST)
    choose(g, next(n for n in g.nodes if n.name == producer), HOST)
    assert choose.applied[producer] == other


def _timed_inside(task, index, seconds, network, stamp):
    return Record(str(task.target), task.workload_key, task.name, tuple(task.args), index,
                  json.loads(json.dumps(task.config(index).to_json())), tuple(seconds), ErrorKind.NONE, "", 1.0,
                  stamp, tt.__version__, network=network)


def test_compile_chooses_by_the_latest_refinement_of_this_network_only(tmp_path):
    m = zoo.mobilenet_v2(image=32)
    g = optimized_graph(m, HOST)
    layer = next(t for t in extract_tasks(g, HOST, search=Search.TEMPLATES) if t.task is not None and t.kind == "conv2d")
    (index,) = valid_configs(g, next(n for n in g.nodes if n.name == layer.nodes[0]), layer.task, 1)
    default = default_task(layer.task)
    log = tmp_path / "log.jsonl"
    append_records(log, [(MeasureInput(layer.task, index), MeasureResult((1e-4,), ErrorKind.NONE, "", 0.1, 1.0)),
                         (MeasureInput(default, 0), MeasureResult((1e-3,), ErrorKind.NONE, "", 0.1, 1.0))])
    fp = network_fingerprint(g, HOST)

    def choice():
        choose = TunedKernels(log, HOST)
        for node in g.nodes:
            choose(g, node, HOST)
        return choose

    first = choice()  # alone, the tuned config wins
    assert {first.applied[n] for n in layer.nodes} == {(layer.task.name, index)} and not first.refined
    # inside the network the untuned kernel was faster (median, not mean: one outlier does not decide)
    write_records(log, [_timed_inside(layer.task, index, (3e-4, 3e-4, 9.0), fp, 10.0),
                        _timed_inside(default, 0, (2e-4, 2e-4, 2e-4), fp, 10.0),
                        _timed_inside(layer.task, index, (1e-9,), "another-network", 30.0)])
    second = choice()
    assert set(layer.nodes) <= set(second.kept_default) and set(second.refined) == set(layer.nodes)
    assert not any(n in second.applied for n in layer.nodes)
    # a later refinement decides again; the other network's records never count
    write_records(log, [_timed_inside(layer.task, index, (1e-4,), fp, 20.0), _timed_inside(default, 0, (2e-4,), fp,
                                                                                          20.0)])
    third = choice()
    assert {third.applied[n] for n in layer.nodes} == {(layer.task.name, index)}
    # what the searches read: only the kernels timed alone
    assert len(load_records(log)) == 2 and len(load_records(log, in_network=True)) == 7
    assert pick_best(log)[layer.task.workload_key].cost == pytest.approx(1e-4)


def test_a_record_timed_in_a_network_reads_back_and_older_lines_have_none():
    g = optimized_graph(zoo.mobilenet_v2(image=32), HOST)
    task = default_task(extract_tasks(g, HOST, search=Search.TEMPLATES)[1].task)
    r = _timed_inside(task, 0, (1e-3, 2e-3), "abc123", 5.0)
    line = json.loads(r.to_line())
    assert line["network"] == "abc123" and Record.from_json(line) == r
    del line["network"]
    assert Record.from_json(line).network == ""
    assert "network" not in json.loads(Record.from_json(line).to_line())


def test_refine_rejects_bad_arguments(resnet, tmp_path):
    with pytest.raises(ArgumentError, match="tune the network first"):
        refine(resnet, tmp_path / "missing.jsonl", HOST)
    (tmp_path / "log.jsonl").write_text("")
    with pytest.raises(ArgumentError, match="top_k"):
        refine(resnet, tmp_path / "log.jsonl", HOST, top_k=0)
    other = Target.parse("c -isa=neon -arch=aarch64") if HOST.arch != "aarch64" else Target.parse("c -isa=avx2 "
                                                                                                 "-arch=x86_64")
    with pytest.raises(ArgumentError, match="refine on a machine of that target"):
        refine(resnet, tmp_path / "log.jsonl", other)
    result = refine(resnet, tmp_path / "log.jsonl", HOST)  # an empty log: nothing to compare
    assert result.layers == () and result.records == 0


def test_config_kind_reads_the_parallel_loops_and_the_winograd_tile_size():
    """Each template says which of its knobs decide how its kernel shares work among threads."""
    from tensortune.autotvm.templates import (conv2d_nchwc_packed_template, conv2d_winograd_template,
                                              depthwise_conv2d_nchwc_packed_template)

    conv = Task(conv2d_nchwc_packed_template, (1, 16, 8, 8, 16, 3, 1, 1), HOST)
    winograd = Task(conv2d_winograd_template, (1, 16, 8, 8, 16, 3, 1, 1), HOST)
    depthwise = Task(depthwise_conv2d_nchwc_packed_template, (1, 16, 8, 8, 3, 1, 1), HOST)
    assert config_kind(conv, {"reorder_outer": [2, 0, 1], "parallel": "fuse2", "tile_oc": [4, 2]}) == (2, "fuse2")
    assert config_kind(conv, {"tile_oc": [4, 2]}) == ()  # a record from before the knob
    # a Winograd config: the product's parallel loop and the tile size
    assert config_kind(winograd, {"tile_size": 4, "reorder_product": [2, 0, 1], "parallel_output_rows": True}) == (2, 4)
    # a depthwise config: the loops fused into the parallel one
    assert config_kind(depthwise, {"tile_oh": [7, 2], "parallel": "fuse3", "block": 16}) == ("fuse3",)


def test_layer_candidates_skip_failed_and_duplicate_records(resnet):
    g = optimized_graph(resnet, HOST)
    t = next(t for t in extract_tasks(g, HOST, search=Search.TEMPLATES) if t.task is not None)
    direct = valid_configs(g, next(n for n in g.nodes if n.name == t.nodes[0]), t.task, 2)
    records = [Record.from_measurement(MeasureInput(t.task, i), MeasureResult(c, kind, "", 0.1, 1.0))
               for i, c, kind in [(direct[0], (1e-4,), ErrorKind.NONE), (direct[0], (1.1e-4,), ErrorKind.NONE),
                                  (direct[1], (1e9,), ErrorKind.RUNTIME_CRASH)]]
    (layer,) = [l for l in layer_candidates(g, HOST, records, 3) if l.workload == t.workload]
    assert [(c.task.name, c.index) for c in layer.candidates] == [(CONV_TEMPLATE, direct[0]), (DEFAULT_TEMPLATE, 0)]
    assert layer.candidates[-1].alone is None and math.isinf(layer.median(0))  # not timed yet


def test_layer_candidates_keep_the_fastest_winograd_config_of_each_kind(resnet):
    # Winograd configs alone rank apart from their ranks inside a network by how they split the product among
    # threads: beyond the top_k, a layer gets the fastest Winograd config of each other split
    g = optimized_graph(resnet, HOST)
    t = next(t for t in extract_tasks(g, HOST, search=Search.TEMPLATES) if any(a.name == WINOGRAD_TEMPLATE for a in t.alternatives))
    node = next(n for n in g.nodes if n.name == t.nodes[0])
    wino = next(a for a in t.alternatives if a.name == WINOGRAD_TEMPLATE)
    by_split: dict[tuple, list[int]] = {}
    for i in np.random.default_rng(0).permutation(len(wino.space))[:300].tolist():
        split = config_kind(wino, wino.config(i).to_json())
        if len(by_split.get(split, [])) < 2 and valid_configs(g, node, wino, 1, start=i) == [i]:
            by_split.setdefault(split, []).append(i)
    splits = [k for k, v in by_split.items() if len(v) == 2][:3]
    assert len(splits) == 3, "the space should offer several product splits"
    (a, b, c), (first, second, third) = splits, [by_split[k] for k in splits]
    timed = [(first[0], 1e-4), (first[1], 1.1e-4), (second[0], 2e-4), (second[1], 2.1e-4), (third[0], 3e-4)]
    records = [Record.from_measurement(MeasureInput(wino, i), MeasureResult((s,), ErrorKind.NONE, "", 0.1, 1.0))
               for i, s in timed]
    (layer,) = [l for l in layer_candidates(g, HOST, records, 1) if l.workload == t.workload]
    assert [(c.task.name, c.index) for c in layer.candidates] == [
        (WINOGRAD_TEMPLATE, first[0]), (WINOGRAD_TEMPLATE, second[0]), (WINOGRAD_TEMPLATE, third[0]),
        (DEFAULT_TEMPLATE, 0)]
    assert [config_kind(wino, wino.config(c.index).to_json()) for c in layer.candidates[:3]] == [a, b, c]


@pytest.mark.slow
def test_refine_on_the_command_line(resnet, tmp_path, capsys):
    model = tmp_path / "resnet.onnx"
    model.write_bytes(resnet.SerializeToString())
    log = tmp_path / "net.jsonl"
    assert main(["refine", str(model), "--log", str(log)]) == 2
    assert "tune-model" in capsys.readouterr().err
    _fake_log(resnet, log)
    assert main(["refine", str(model), "--log", str(log), "--top", "1", "--rounds", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert not out["skipped"] and out["records"] > 0 and len(out["layers"]) == 12
    assert all(l["chosen"] in [c["kernel"] for c in l["candidates"]] for l in out["layers"])
    assert set(out["whole_network_s"]) == {"untuned", "fastest_alone", "chosen"}
    assert main(["refine", str(model), "--log", str(log), "--top", "1", "--rounds", "2"]) == 0
    text = capsys.readouterr().out
    assert "12 layers timed inside the network" in text and "compile with" in text


class _FakeProbe:
    """A speed probe that reports the slowdowns it is given, then 1.0."""

    def __init__(self, slowdowns):
        self.slowdowns = list(slowdowns)

    def __call__(self, threads):  # stands in for the SpeedProbe class
        return self

    def slowdown(self) -> float:
        return self.slowdowns.pop(0) if self.slowdowns else 1.0


def test_refine_rounds_timed_in_a_slow_spell_are_timed_again(monkeypatch):
    """A round whose speed probes (before and after it) show the machine 2x slower is timed again after a pause and
    the steady timing kept; a round never steady is kept (nothing measured is lost) and said; with no retries there
    is no probe."""
    import importlib

    refine_module = importlib.import_module("tensortune.network.refine")  # the package exports the function by its name

    said = []
    monkeypatch.setattr(refine_module, "SpeedProbe", _FakeProbe([2.0, 2.0]))
    steady = refine_module._steady_rounds(3, 2, said.append)
    timings = iter([("slow round",), ("steady round",)])
    assert steady(lambda: next(timings)) == ("steady round",)
    assert not said
    monkeypatch.setattr(refine_module, "SpeedProbe", _FakeProbe([2.0] * 20))
    steady = refine_module._steady_rounds(1, 2, said.append)
    calls = []
    assert steady(lambda: calls.append(1) or len(calls)) in (1, 2) and len(calls) == 2
    assert said and "slower" in said[0]
    monkeypatch.setattr(refine_module, "SpeedProbe", lambda threads: pytest.fail("no probe without retries"))
    assert refine_module._steady_rounds(0, 2, said.append)(lambda: 7) == 7


def test_whole_network_timings_keep_the_steady_round(monkeypatch):
    """``whole_network_seconds`` takes each round through ``steady``: the networks' seconds come from the round it
    returns, every network once per round, in turn."""
    from tensortune.network.refine import whole_network_seconds

    class Net:
        def __init__(self, seconds):
            self.seconds = iter(seconds)

        def time_evaluator(self, number, repeat):
            return lambda *inputs: type("T", (), {"mean": next(self.seconds)})()

    nets = {"a": Net([9.0, 1.0, 1.0]), "b": Net([9.0, 2.0, 2.0])}

    def steady(timing):
        timing()  # the first attempt ran in a spell: thrown away
        return timing()

    assert whole_network_seconds(nets, [], rounds=1, steady=steady) == {"a": 1.0, "b": 2.0}
    with pytest.raises(ArgumentError, match="slow_spell_retries"):
        refine(zoo.resnet18(image=IMAGE), "missing.jsonl", HOST, slow_spell_retries=-1)

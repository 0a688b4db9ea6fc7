"""Profiling a compiled network: each call timed inside it, named by the config that runs it, beside its time alone."""
from __future__ import annotations

import json

import pytest

import tensortune as tt
from network_logs import timed, tuned_layers, valid_configs
from tensortune.autotvm.record import append_records
from tensortune.cli import main
from tensortune.errors import ArgumentError
from tensortune.operators.conv_tasks import default_task
from network_logs import CONV_TEMPLATE
from tensortune.network.tasks import extract_tasks
from tensortune.network import optimized_graph, refine, zoo
from tensortune.network.profiling import profile_network
from tensortune.target import Target

HOST = Target.host()


@pytest.fixture(scope="module")
def resnet():
    return zoo.resnet18(image=32)


def _log(m, path) -> dict[str, int]:
    """Per task: its first config the layout runs, timed alone at 0.1 ms, and its untuned kernel at 1 ms. Returns
    {node: config index}."""
    g, layers = tuned_layers(m, HOST)
    pairs, chosen = [], {}
    for t, node in layers:
        index = valid_configs(g, node, t.task, 1)[0]
        pairs += [timed(t.task, index, 1e-4), timed(default_task(t.task), 0, 1e-3)]
        chosen.update({n: index for n in t.nodes})
    append_records(path, pairs)
    return chosen


def test_an_untuned_profile_has_every_call_in_order(resnet):
    p = profile_network(resnet, rounds=2, repeat=2)
    module = tt.compile(resnet)
    assert [c.node for c in p.calls] == list(module.manifest.call_order)
    assert all(c.seconds > 0 and c.alone is None and not c.refined for c in p.calls)
    flops = {n: k.flops for k in module.manifest.kernels for n in k.nodes}
    assert [c.flops for c in p.calls] == [flops[c.node] for c in p.calls]
    g = optimized_graph(resnet, HOST)
    tunable = {n for t in extract_tasks(g, HOST) if t.task is not None for n in t.nodes}  # poolings too
    assert {c.node for c in p.calls if c.kernel == "default"} == tunable
    assert all(c.kernel == "-" for c in p.calls if c.node not in tunable)  # elementwise kernels, layout copies
    assert p.whole_s > 0 and p.threads == module.num_threads
    out = p.to_json()
    assert sum(c["share"] for c in out["calls"]) == pytest.approx(1.0)
    assert out["calls_s"] == pytest.approx(p.calls_s)


@pytest.mark.slow
def test_a_profile_with_a_log_names_each_calls_config_and_its_time_alone(resnet, tmp_path):
    log = tmp_path / "net.jsonl"
    chosen = _log(resnet, log)
    p = profile_network(resnet, log, rounds=1, repeat=1)
    by_node = {c.node: c for c in p.calls}
    for node, index in chosen.items():
        assert by_node[node].kernel == f"{CONV_TEMPLATE} #{index}"
        assert by_node[node].alone == pytest.approx(1e-4)
        assert not by_node[node].refined
    # after refining, the calls it chose are marked, each with the time alone of the config it runs
    refine(resnet, log, HOST, top_k=1, rounds=1, runs=1, check=False)
    p = profile_network(resnet, log, rounds=1, repeat=1)
    tuned = [c for c in p.calls if c.node in chosen]
    assert tuned and all(c.refined for c in tuned)
    assert all(c.alone == pytest.approx(1e-4 if c.kernel != "default" else 1e-3) for c in tuned)


def test_profile_rejects_bad_counts_and_other_machines(resnet):
    with pytest.raises(ArgumentError, match="rounds and repeat"):
        profile_network(resnet, rounds=0)
    other = "c -isa=neon -arch=aarch64" if HOST.arch != "aarch64" else "c -isa=avx2 -arch=x86_64"
    with pytest.raises(ArgumentError, match="profile on a machine of that target"):
        profile_network(resnet, target=other)


def test_profile_on_the_command_line(resnet, tmp_path, capsys):
    model = tmp_path / "resnet.onnx"
    model.write_bytes(resnet.SerializeToString())
    assert main(["profile", str(model), "--log", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such tuning log" in capsys.readouterr().err
    assert main(["profile", str(model), "--rounds", "1", "--repeat", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["whole_s"] > 0 and len(out["calls"]) == len(tt.compile(resnet).manifest.call_order)
    assert main(["profile", str(model), "--rounds", "1", "--repeat", "1", "--top", "3"]) == 0
    text = capsys.readouterr().out.splitlines()
    rows = [line for line in text if line.strip()[:1].isdigit()]
    assert len(rows) == 3 and text[0].startswith("network") and text[-1].startswith("by kind")

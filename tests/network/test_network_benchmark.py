"""The whole-network benchmark scripts without timing anything: ``e2e.py``'s table and BENCHMARKS.md section from a
fake report, its timing in sets of processes with fake children, the PyTorch executor of the graph IR that it times
against the reference interpreter; ``refine_compare.py`` with fakes for compiling, refining and timing; and how
``layers_vs_onnxruntime.py`` maps onnxruntime's nodes back to the graph's layers."""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def e2e(script):
    return script("e2e")


def _report():
    row = {"tensortune": {"median_s": 0.012}, "tensortune_tuned": {"unavailable": "no --log given"},
           "onnxruntime": {"median_s": 0.010}, "torch": {"unavailable": "torch is not installed"},
           "torch_compile": {"error": "boom"}, "tensortune_passive": {"median_s": 0.011},
           "onnxruntime_no_spin": {"median_s": 0.009}}
    return {"machine": "a test machine", "repeat": 3, "min_repeat_ms": 5.0, "log": None,
            "models": {"resnet18": {"compile_cold_s": 10.0, "compile_warm_s": 0.5, "calls": 24,
                                    "threads": {"1": row}, "peak_rss_mib": {"tensortune": 90.0, "onnxruntime": 200.0}}}}


def test_table_and_section(e2e, tmp_path):
    text = e2e.table(_report())
    assert "| tensortune, default schedules | 12.00 ms (1.20x) |" in text
    assert "| torch.compile | boom |" in text and "(0.45x)" in text
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n\n## Other\n\nkept\n")
    e2e.write_section(md, text)
    e2e.write_section(md, text.replace("12.00", "13.00"))  # replaced, not appended twice
    out = md.read_text()
    assert out.count(e2e.SECTION) == 1 and "13.00 ms" in out and "kept" in out


def test_the_alone_row_compiles_with_the_log_less_its_in_network_timings(e2e, tmp_path):
    log = tmp_path / "net.jsonl"
    lines = ['{"v":1,"workload":"a"}\n', '{"v":1,"workload":"a","network":"f00"}\n', '{"v":1,"workload":"b"}\n']
    log.write_text("".join(lines[::2]))
    assert e2e.alone_log(str(log), tmp_path / "alone.jsonl") is None  # nothing to leave out: no such row
    log.write_text("".join(lines))
    assert e2e.alone_log(str(log), tmp_path / "alone.jsonl") == str(tmp_path / "alone.jsonl")
    assert (tmp_path / "alone.jsonl").read_text() == lines[0] + lines[2]
    assert "| tensortune, with the log, kernels chosen by their timings alone | not measured |" in e2e.table(_report())


def test_timing_in_several_sets_of_processes_takes_the_median_of_their_medians(e2e, monkeypatch):
    """Fake timing children: process k of peer "a" times 1+k, 1+k, 10 (its median 1+k); "b" is 2 in every process;
    "c" fails to start. Three sets of processes, each started in a rotated order."""
    started: list[str] = []

    class FakePeer:
        def __init__(self, spec, env):
            self.name = spec["name"]
            self.ok = self.name != "c"
            self.status = {"ready": True} if self.ok else {"error": "child failed (exit 1): boom"}
            self.k = sum(n == self.name for n in started)
            self.times = iter([1.0 + self.k, 1.0 + self.k, 10.0] if self.name == "a" else [2.0] * 3)
            started.append(self.name)

        def next(self):
            return next(self.times)

        def close(self):
            pass

    monkeypatch.setattr(e2e, "_Peer", FakePeer)
    monkeypatch.setattr(e2e.time, "sleep", lambda s: None)
    out = e2e.time_interleaved({n: {"name": n} for n in "abc"}, repeat=3, processes=3)
    assert started == list("abc") + list("bca") + list("cab")
    assert out["a"]["process_medians_s"] == [1.0, 2.0, 3.0] and out["a"]["median_s"] == 2.0
    assert out["a"]["runs_s"] == [1.0, 1.0, 10.0, 2.0, 2.0, 10.0, 3.0, 3.0, 10.0]
    assert out["b"]["median_s"] == 2.0
    assert out["c"] == {"error": "child failed (exit 1): boom"}
    with pytest.raises(ValueError, match="processes=0"):
        e2e.time_interleaved({"a": {"name": "a"}}, repeat=3, processes=0)
    single = e2e.time_interleaved({"a": {"name": "a"}}, repeat=3)
    assert single["a"]["median_s"] == 4.0 and "process_medians_s" not in single["a"]  # the 4th process of "a"


@pytest.mark.parametrize("faulting", [True, False], ids=["cpuid-capped", "no-cpuid-faulting"])
def test_a_narrower_target_caps_the_peers_but_not_tensortune(e2e, monkeypatch, faulting):
    """``--target`` with a narrower ISA than this machine's: PyTorch's processes get the caps, onnxruntime's the
    CPUID cap where the machine can, tensortune's none, and the table says which target and caps it ran with."""
    import tensortune.benchmarking.cpuid_cap as cpuid_cap
    from tensortune.target import ISA, Target

    if Target.host().isa != ISA.AVX512:
        pytest.skip("needs an AVX-512 host (a narrower ISA to cap to)")
    monkeypatch.setattr(cpuid_cap, "cpuid_cap_problem", lambda: None if faulting else "no CPUID faulting here")
    caps = e2e.isa_caps("c -isa=avx2 -cores=2 -arch=x86_64")
    assert caps["ATEN_CPU_CAPABILITY"] == "avx2" and caps["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert e2e.isa_caps(None) == {} and e2e.isa_caps(str(Target.host())) == {}
    envs = {}

    class FakePeer:  # reports the ISA it capped CPUID to, as e2e's child does
        def __init__(self, spec, env):
            envs[spec["name"]] = env
            self.ok, self.status = True, {"ready": True, "cpuid_isa": env.get(cpuid_cap.ENV_VAR)}

        def next(self):
            return 1.0

        def close(self):
            pass

    monkeypatch.setattr(e2e, "_Peer", FakePeer)
    monkeypatch.setattr(e2e.time, "sleep", lambda s: None)
    out = e2e.time_interleaved({n: {"name": n} for n in ("torch", "torch_compile", "onnxruntime", "tensortune")},
                               1, caps=caps)
    assert all((out[n].get("cpuid_isa") == "avx2") == faulting for n in ("torch", "onnxruntime"))
    assert "cpuid_isa" not in out["tensortune"]
    assert all(envs[n].get("ATEN_CPU_CAPABILITY") == "avx2" for n in ("torch", "torch_compile"))
    assert all((envs[n].get(cpuid_cap.ENV_VAR) == "avx2") == faulting for n in ("torch", "onnxruntime"))
    assert cpuid_cap.ENV_VAR not in envs["tensortune"] and envs["tensortune"].get("ATEN_CPU_CAPABILITY") != "avx2"
    report = dict(_report(), target="c -isa=avx2 -cores=2 -arch=x86_64", peer_caps=caps)
    text = e2e.table(report)
    if faulting:
        assert ("compiled for `c -isa=avx2 -cores=2 -arch=x86_64`; PyTorch and onnxruntime capped to it: CPUID "
                "answers as on a `avx2` machine" in text) and "`OPENBLAS_CORETYPE=Haswell`" in text
    else:
        assert ("compiled for `c -isa=avx2 -cores=2 -arch=x86_64`; PyTorch capped to it (`OPENBLAS_CORETYPE=Haswell`"
                in text) and "onnxruntime cannot be capped on this machine" in text
    assert "compiled for" not in e2e.table(_report())


def test_a_bad_target_is_a_usage_error(e2e, monkeypatch, capsys):
    from tensortune.target import Target

    monkeypatch.setattr(e2e.sys, "argv", ["e2e.py", "--target", "c -isa=bogus", "--models", "resnet18"])
    with pytest.raises(SystemExit) as exit_info:
        e2e.main()
    assert exit_info.value.code == 2 and "--target: unknown isa 'bogus'" in capsys.readouterr().err
    monkeypatch.setattr(e2e.sys, "argv", ["e2e.py", "--target", "c -isa=neon -cores=2 -arch=aarch64"]
                        if Target.host().arch != "aarch64" else ["e2e.py", "--target", "c -isa=avx2 -arch=x86_64"])
    with pytest.raises(SystemExit) as exit_info:
        e2e.main()
    assert exit_info.value.code == 2 and "cannot run code for" in capsys.readouterr().err


def test_counts_of_rounds_and_processes_must_be_positive(script):
    import argparse

    positive_int = script("common").positive_int
    assert positive_int("3") == 3
    for bad in ("0", "-2", "two"):
        with pytest.raises(argparse.ArgumentTypeError, match="positive integer"):
            positive_int(bad)


def test_the_table_says_how_many_sets_of_processes_timed_it(e2e):
    report = _report()
    assert "sets of fresh processes" not in e2e.table(report)
    report["processes"] = 3
    assert "in each of 3 sets of fresh processes (the median of their medians), each peer in" in e2e.table(report)


def test_torch_executor_equals_the_interpreter(script):
    torch = pytest.importorskip("torch")
    GraphModule = script("torch_graph").GraphModule

    from tensortune.frontend import import_onnx
    from tensortune.graph import interpret
    from tensortune.passes import fold_constants
    from tensortune.network import zoo

    g = fold_constants(import_onnx(zoo.mobilenet_v2(image=32)))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    with torch.inference_mode():
        got = GraphModule(g)(torch.from_numpy(x)).numpy()
    expected = interpret(g, {"input": x})[g.outputs[0]]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(expected).max())))


def test_refine_compare_times_the_logs_as_logged_or_refined_again_on_copies(script, monkeypatch, tmp_path):
    """``refine_compare.py`` with fakes for compiling, refining and timing: ``--as-logged`` refines nothing and
    times each log's network as logged; otherwise each log is refined on a copy (the log itself is untouched) and
    both networks of each log are timed in turns, in ``--processes`` sets."""
    import json
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    import tensortune.network

    rc = script("refine_compare")
    logs = {name: tmp_path / f"{name}.jsonl" for name in ("gradient", "round-robin")}
    for log in logs.values():
        log.write_text('{"a": "record"}\n')
    compiled, refined, timed = {}, [], []

    def fake_refine(model, log, **kw):
        refined.append(Path(log))
        Path(log).write_text(Path(log).read_text() + '{"a": "refinement"}\n')
        return SimpleNamespace(layers=[1, 2], check={"refined": 0.01})

    def fake_measure(model, networks, work, threads, repeat, min_ms, processes=1, details=None):
        timed.append((sorted(networks), processes))
        details.update({name: [0.01] * processes for name in networks})
        return {**{name: 0.01 for name in networks}, "onnxruntime": 0.02}

    monkeypatch.setattr(rc, "prepare", lambda work, model: work / "model.onnx")
    monkeypatch.setattr(rc, "compile_network", lambda model, out, cache, log: compiled.update({out.name: log}))
    monkeypatch.setattr(rc, "measure", fake_measure)
    monkeypatch.setattr(tensortune.network, "refine", fake_refine)
    argv = ["refine_compare.py", "--logs", *(f"{k}={v}" for k, v in logs.items()), "--processes", "3"]

    monkeypatch.setattr(sys, "argv", [*argv, "--as-logged", "--json", str(tmp_path / "as_logged.json")])
    assert rc.main() == 0
    assert refined == [] and timed == [(["gradient (as logged)", "round-robin (as logged)"], 3)]
    assert compiled == {"gradient-before.tt": str(logs["gradient"]), "round-robin-before.tt": str(logs["round-robin"])}
    report = json.loads((tmp_path / "as_logged.json").read_text())
    assert report["process_medians_s"]["gradient (as logged)"] == [0.01] * 3 and report["refined"] == {}

    timed.clear()
    monkeypatch.setattr(sys, "argv", argv)
    assert rc.main() == 0
    assert [p.name for p in refined] == ["gradient.jsonl", "round-robin.jsonl"]
    assert all(p.parent != tmp_path for p in refined)  # copies, in the benchmark's temporary folder
    assert all(log.read_text() == '{"a": "record"}\n' for log in logs.values())
    assert timed == [(["gradient", "gradient (as logged)", "round-robin", "round-robin (as logged)"], 3)]
    assert compiled["gradient.tt"] == str(refined[0]) and compiled["round-robin.tt"] == str(refined[1])


def test_onnxruntime_nodes_are_mapped_back_to_the_layer_they_compute(script):
    """onnxruntime's fused nodes are named after the last operator of the fusion (``_nchwc`` added in its blocked
    layout): each is mapped up the chain of first inputs to its convolution, matrix product or pooling node; its
    own copies (``ReorderOutput``) to none. The layers tensortune times get onnxruntime's time beside theirs."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    lvo = script("layers_vs_onnxruntime")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["conv_1"], name="conv_1_node"),
             helper.make_node("BatchNormalization", ["conv_1", "s", "b", "m", "v"], ["bn_2"], name="bn_2_node"),
             helper.make_node("Clip", ["bn_2", "lo", "hi"], ["relu6_3"], name="relu6_3_node"),
             helper.make_node("Conv", ["relu6_3", "w2"], ["conv_4"], name="conv_4_node"),
             helper.make_node("Add", ["conv_4", "relu6_3"], ["add_5"], name="add_5_node"),
             helper.make_node("GlobalAveragePool", ["add_5"], ["gap_6"], name="gap_6_node")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("gap_6", TensorProto.FLOAT, [1, 3, 1, 1])])
    layer_of = lvo.Layers(graph).layer_of
    assert layer_of("relu6_3_nchwc") == "conv_1_node"  # Conv + BN + Clip, blocked
    assert layer_of("bn_2") == "conv_1_node"
    assert layer_of("add_5_nchwc") == "conv_4_node"  # Conv + residual Add
    assert layer_of("relu6_3_nchwc_token_2") == "conv_1_node"  # a name onnxruntime made unique
    assert layer_of("conv_4_node") == "conv_4_node"
    assert layer_of("gap_6_node") == "gap_6_node"
    assert layer_of("ReorderOutput") is None
    calls = [{"node": "relayout_input", "kind": "copy", "kernel": "-", "seconds": 2e-6},
             {"node": "conv_1_node", "kind": "conv2d", "kernel": "default", "seconds": 5e-6},
             {"node": "conv_4_node", "kind": "conv2d", "kernel": "default", "seconds": 7e-6}]
    rows, unmapped = lvo.compare(graph, calls, {"relu6_3_nchwc": 6e-6, "add_5_nchwc": 3e-6, "ReorderOutput": 1e-6,
                                                "gap_6_node": 4e-6})
    assert [(r["node"], r["onnxruntime_s"]) for r in rows] == [("relayout_input", None), ("conv_1_node", 6e-6),
                                                               ("conv_4_node", 3e-6)]
    assert unmapped == {"ReorderOutput": 1e-6, "gap_6_node": 4e-6}  # tensortune ran no call of its own for the pool

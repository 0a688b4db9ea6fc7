"""The benchmark scripts' shared helpers, and their promise to write results before any plot.

The scripts are run as ``python benchmarks/NAME.py``; here their folder is put on ``sys.path`` and
their functions are called with fakes, so nothing is tuned or timed.
"""
from __future__ import annotations

import importlib
import json
import sys

import numpy as np

import tensortune.target as tt_target
import pytest

from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import append_records
from tensortune.autotvm.catalog import create_task

@pytest.fixture
def no_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError


def test_best_curve_and_trials_to_reach(script, tmp_path):
    common = script("common")
    task = create_task("matmul", {"M": 8, "N": 8, "K": 8})
    seconds = [2e-6, None, 1e-6, 4e-6]  # None: a failed trial
    log = tmp_path / "log.json"
    append_records(log, [(MeasureInput(task, i), MeasureResult((s,), ErrorKind.NONE, "", 0.1) if s else
                          MeasureResult((), ErrorKind.RUNTIME_CRASH, "crash", 0.1)) for i, s in enumerate(seconds)])
    g = task.flops / 1e9
    np.testing.assert_allclose(common.best_curve(log, task), [g / 2e-6, g / 2e-6, g / 1e-6, g / 1e-6])
    np.testing.assert_allclose(common.best_curve(log, task, trials=2), [g / 2e-6] * 2)
    curve = common.best_curve(log, task)
    assert common.trials_to_reach(curve, curve[0]) == 1
    assert common.trials_to_reach(curve, curve[-1]) == 3
    assert common.trials_to_reach(curve, 2 * curve[-1]) is None


def test_write_json(script, tmp_path):
    path = tmp_path / "out.json"
    script("common").write_json(path, {"a": [1, 2]})
    assert json.loads(path.read_text()) == {"a": [1, 2]} and path.read_text().endswith("\n")


def test_search_curves_skips_its_plots_without_matplotlib(script, no_matplotlib, tmp_path, capsys):
    search_curves = script("search_curves")
    search_curves.plot({"matmul:512": {"random": [np.array([1.0, 2.0])]}}, tmp_path)
    assert capsys.readouterr().out.splitlines() == ['no plot: matplotlib is not installed (pip install -e ".[bench]")']
    assert list(tmp_path.iterdir()) == []


def test_vs_libraries_writes_its_results_before_the_plot(script, no_matplotlib, monkeypatch, tmp_path, capsys):
    vs_libraries = script("vs_libraries")
    row = {"workload": "matmul:512", "threads": 1, "flops": 2 * 512 ** 3, "errors": {}, "configs": {"matmul": 7},
           "gflops": {"tensortune_matmul": 110.0, "numpy": 100.0}, "best_peer": "numpy", "ratio_matmul": 1.1,
           "ratio_vs_numpy": 1.1}
    monkeypatch.setattr(vs_libraries, "time_all", lambda *args: [row])
    import tensortune.benchmarking.peak as peak

    monkeypatch.setattr(peak, "fma_peak_gflops", lambda target, threads: 100.0 * threads)
    md = tmp_path / "BENCHMARKS.md"
    md.write_text("# Benchmarks\n")
    argv = ["vs_libraries.py", "--skip-tune", "--workloads", "matmul:512", "--threads", "1", "--out",
            str(tmp_path / "logs"), "--json", str(tmp_path / "r.json"), "--benchmarks-md", str(md),
            "--png", str(tmp_path / "fig" / "vs.png")]
    monkeypatch.setattr(sys, "argv", argv)
    vs_libraries.main()
    assert json.loads((tmp_path / "r.json").read_text())["rows"] == [row]
    text = md.read_text()
    isa = tt_target.Target.host().isa.value
    assert vs_libraries.MARKER.format(isa=isa, end="begin") in text and "| matmul:512 |" in text
    assert "FMA peak of the target's vectors measured on this machine: 100" in text
    assert capsys.readouterr().out.rstrip().endswith("matplotlib is not installed (pip install -e \".[bench]\")")
    assert not (tmp_path / "fig").exists()


def test_vs_libraries_views_share_trials_among_templates_and_time_the_fastest_logged(script, monkeypatch, tmp_path,
                                                                                     capsys):
    vs_libraries = script("vs_libraries")
    host = tt_target.Target.host()
    names = lambda key: {v: [t.name for t in ts] for v, ts in vs_libraries.tasks_of(key, host).items()}
    assert names("resnet18:C12") == {"nchw": ["conv2d_nchw_spatial_pack", "conv2d_nchwc", "conv2d_winograd_nchw"],
                                     "packed": ["conv2d_nchwc_packed", "conv2d_winograd_nchwc_packed"]}
    assert names("resnet18:C10") == {"nchw": ["conv2d_nchw_spatial_pack", "conv2d_nchwc"],
                                     "packed": ["conv2d_nchwc_packed"]}  # stride 2: no Winograd
    assert names("matmul:512") == {"matmul": ["matmul"]}

    rng = np.random.default_rng(0)
    tasks = vs_libraries.tasks_of("resnet18:C12", host)
    logged = {}
    for view, seconds in (("nchw", (2e-3, 1e-3, 4e-3)), ("packed", (1e-3, 3e-3))):
        for k, (task, s) in enumerate(zip(tasks[view], seconds)):
            index = next(i for i in (int(x) for x in rng.integers(0, len(task.space), 500))
                         if task.space.is_valid(i))
            append_records(vs_libraries.log_path(tmp_path, "resnet18:C12", view, k),
                           [(MeasureInput(task, index), MeasureResult((s,), ErrorKind.NONE, "", 0.1))])
            logged[view, task.name] = index
    import tensortune.benchmarking.compare as compare
    import tensortune.benchmarking.peers as peers

    monkeypatch.setattr(compare, "time_module", lambda *args: {"median_s": 1e-3})
    monkeypatch.setattr(peers, "time_peers", lambda *args: {"onnxruntime": {"median_s": 2e-3}})
    (row,) = vs_libraries.time_all(["resnet18:C12"], tmp_path, [2], 3, 1.0, host)
    assert row["templates"] == {"nchw": "conv2d_nchwc", "packed": "conv2d_nchwc_packed"}
    assert row["configs"] == {"nchw": logged["nchw", "conv2d_nchwc"], "packed": logged["packed", "conv2d_nchwc_packed"]}
    assert row["best_peer"] == "onnxruntime" and row["ratio_nchw"] == pytest.approx(2.0)

    vs_libraries.log_path(tmp_path, "resnet18:C12", "nchw", 1).unlink()  # a template not tuned (--skip-tune)
    capsys.readouterr()
    (row,) = vs_libraries.time_all(["resnet18:C12"], tmp_path, [2], 3, 1.0, host)
    assert row["templates"]["nchw"] == "conv2d_nchw_spatial_pack"  # the fastest of the logs that are there
    assert "resnet18:C12 nchw: no log of conv2d_nchwc in" in capsys.readouterr().out


def test_plots_are_drawn_with_matplotlib(script, tmp_path):
    pytest.importorskip("matplotlib")
    script("search_curves").plot({"matmul:512": {"random": [np.array([1.0, 2.0])]}}, tmp_path)
    row = {"workload": "resnet18:C6", "threads": 2, "gflops": {"tensortune_nchw": 400.0, "torch": 380.0}}
    script("vs_libraries").plot([row], 2, tmp_path / "fig" / "vs.png")
    assert sorted(p.name for p in tmp_path.rglob("*.png")) == ["matmul_512.png", "vs.png"]


def test_vs_libraries_plot_marks_a_peer_that_ran_a_wider_isa(script, monkeypatch, tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    import matplotlib.figure

    legend = []
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda fig, *a, **k: legend.extend(
        t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()))
    row = {"workload": "resnet18:C6", "threads": 2, "gflops": {"tensortune_nchw": 400.0, "torch": 380.0,
                                                               "onnxruntime": 500.0},
           "uncapped": {"onnxruntime": "no ISA setting"}}
    script("vs_libraries").plot([row], 2, tmp_path / "vs.png")
    assert legend == ["tensortune nchw", "torch", "onnxruntime (not capped: wider ISA)"]


def test_cluster_scaling_rows_compare_each_cluster_with_one_worker(script):
    cluster_scaling = script("cluster_scaling")
    rows = cluster_scaling.scaling_rows({1: 60.0, 2: 30.0, 4: 20.0}, trials=120, device_s=0.4)
    assert [r["trials_per_min"] for r in rows] == [120.0, 240.0, 360.0]
    assert [r["speedup"] for r in rows] == [1.0, 2.0, 3.0]
    assert [r["efficiency"] for r in rows] == [1.0, 1.0, 0.75]
    # worker time per candidate (wall x workers / trials) beyond the device's 0.4 s
    assert [r["overhead_ms_per_candidate"] for r in rows] == [100.0, 100.0, 266.7]


def test_gpu_benchmark_without_a_gpu_says_so_and_summarises_rows(script, tmp_path, capsys):
    gpu = script("gpu")
    from tensortune.runtime.cuda import gpu_available

    if not gpu_available()[0]:
        assert gpu.main(["--quick", "--json", str(tmp_path / "g.json")]) == 2
        assert "no GPU to benchmark on" in capsys.readouterr().err
    rows = [{"name": "matmul 4096", "trials": 8, "ours_ms": 2.0, "torch_ms": 1.0, "ours_tflops": 1.0,
             "torch_tflops": 2.0, "speedup": 0.5},
            {"name": "resnet18:C1 b1", "trials": 8, "ours_ms": 1.0, "torch_ms": 1.0, "torch_eager_ms": 3.0,
             "ours_tflops": 1.0, "torch_tflops": 1.0, "speedup": 1.0},
            {"name": "resnet18:C2 b1", "trials": 8, "error": "none valid"}]
    summary = gpu.summary(rows)
    assert summary["matmul_4096_vs_cublas"] == 0.5 and summary["resnet18_b1_geomean_vs_cudnn"] == 1.0
    assert summary["targets"] == {"matmul_4096 >= 0.8": False, "resnet18_b1_geomean >= 0.8": True}
    text = gpu.table({"gpu": "NVIDIA H200", "target": "cuda -arch=sm_90", "protocol": "p", "results": rows,
                      "summary": summary})
    assert "NVIDIA H200" in text and "| matmul 4096 | 2.0000 | 1.0000 |  |" in text and "failed: none valid" in text
    assert "| resnet18:C1 b1 | 1.0000 | 1.0000 | 3.0000 | 1.00 |" in text


def test_pretrain_holds_a_shape_out_in_every_template_and_saves_a_loadable_model(script, tmp_path):
    import gzip
    import random

    from tensortune.autotvm.pretrained import load_pretrained

    pretrain = script("pretrain")
    shape = {"IC": 8, "OC": 8, "H": 8, "W": 8, "K": 3, "pad": 1}
    tasks = [create_task("matmul", {"M": 32, "N": 32, "K": 32}),
             create_task("conv2d", shape, template="conv2d_nchw_spatial_pack"),
             create_task("conv2d", shape, template="conv2d_nchwc_packed")]
    for n, task in enumerate(tasks):
        idx = task.space.sample(12, random.Random(n))
        log = tmp_path / f"{n}.jsonl"
        append_records(log, [(MeasureInput(task, i), MeasureResult((1e-6 * (1 + k),), ErrorKind.NONE, "", 0.1))
                             for k, i in enumerate(idx)])
        if n:  # the data source keeps logs gzipped; both kinds are read
            (tmp_path / f"{n}.jsonl.gz").write_bytes(gzip.compress(log.read_bytes()))
            log.unlink()
    records = pretrain.read_logs(tmp_path)
    assert len(records) == 36
    holdout = {pretrain.shape_of(tasks[1].name, tasks[1].args)}  # the conv shape, named by one template
    out = tmp_path / "model" / "avx2.json"
    info = pretrain.train(records, holdout, out, tasks[0].target, seed=0, num_rounds=5, max_depth=3)
    assert info["records"] == 12 and info["workloads"] == [tasks[0].workload_key]  # both conv templates left out
    model = load_pretrained(out)
    assert model is not None and model.metadata["records"] == "12" and model.metadata["rounds"] == "5"


def _one_logged_matmul(script, tmp_path):
    """vs_libraries, this host, and the matmul:512 task with one logged config in ``tmp_path``."""
    vs_libraries = script("vs_libraries")
    host = tt_target.Target.host()
    (task,) = vs_libraries.tasks_of("matmul:512", host)["matmul"]
    index = next(i for i in range(len(task.space)) if task.space.is_valid(i))
    append_records(vs_libraries.log_path(tmp_path, "matmul:512", "matmul"),
                   [(MeasureInput(task, index), MeasureResult((1e-3,), ErrorKind.NONE, "", 0.1))])
    return vs_libraries, host, task


def test_vs_libraries_times_in_rounds_and_pairs_ratios_within_each_round(script, monkeypatch, tmp_path):
    vs_libraries, host, task = _one_logged_matmul(script, tmp_path)
    import tensortune.benchmarking.compare as compare
    import tensortune.benchmarking.peers as peers

    ours, theirs, calls = iter([1e-3, 2e-3, 1e-3]), iter([2e-3, 4e-3, 3e-3]), []
    monkeypatch.setattr(compare, "time_module", lambda *a: calls.append("tt") or {"median_s": next(ours)})
    monkeypatch.setattr(peers, "time_peers", lambda *a: calls.append("peers") or
                        {"numpy": {"median_s": next(theirs)}, "torch": {"unavailable": "not installed"}})
    (row,) = vs_libraries.time_all(["matmul:512"], tmp_path, [2], 3, 1.0, host, rounds=3)
    assert calls == ["tt", "peers", "peers", "tt", "tt", "peers"]  # who goes first alternates
    g = task.flops / 1e9
    assert row["gflops"] == pytest.approx({"tensortune_matmul": g / 1e-3, "numpy": g / 3e-3})  # medians
    assert row["rounds"]["numpy"] == pytest.approx([round(g / s, 2) for s in (2e-3, 4e-3, 3e-3)])
    # ratios within each round are 2, 2 and 3: the median is 2 (the ratio of the medians would be 3)
    assert row["ratio_matmul"] == pytest.approx(2.0) and row["ratio_vs_numpy"] == pytest.approx(2.0)
    assert row["errors"] == {"torch": "not installed"} and row["best_peer"] == "numpy"
    # each kernel's fastest round: 1 ms against 2 ms
    assert row["gflops_best"] == pytest.approx({"tensortune_matmul": g / 1e-3, "numpy": g / 2e-3})
    assert row["best_ratio_matmul"] == pytest.approx(2.0)
    summary = vs_libraries.summarise([row], [2])[2]
    assert summary["best_of_rounds_geomean_packed"] is None  # no convolution rows


def test_vs_libraries_rejects_zero_rounds(script, monkeypatch, capsys):
    vs_libraries = script("vs_libraries")
    monkeypatch.setattr(sys, "argv", ["vs_libraries.py", "--rounds", "0", "--skip-tune"])
    with pytest.raises(SystemExit):
        vs_libraries.main()
    assert "--rounds and --top must be at least 1" in capsys.readouterr().err


def test_vs_libraries_chooses_among_the_top_logged_configs_by_timing_them_again(script, monkeypatch, tmp_path):
    vs_libraries = script("vs_libraries")
    host = tt_target.Target.host()
    (task,) = vs_libraries.tasks_of("matmul:512", host)["matmul"]
    valid = [i for i in range(0, len(task.space), 997) if task.space.is_valid(i)][:4]
    logged = dict(zip(valid, (1e-3, 2e-3, 3e-3, 4e-3)))  # the log's order: valid[0] fastest
    append_records(vs_libraries.log_path(tmp_path, "matmul:512", "matmul"),
                   [(MeasureInput(task, i), MeasureResult((s,), ErrorKind.NONE, "", 0.1)) for i, s in logged.items()])
    import tensortune.benchmarking.compare as compare
    import tensortune.benchmarking.peers as peers

    # timed again on 2 threads the second is fastest, on 1 thread the first; the third fails
    retimed = {2: {valid[0]: 3e-3, valid[1]: 1e-3, valid[2]: None}, 1: {valid[0]: 1e-3, valid[1]: 2e-3, valid[2]: None}}
    seen = []

    def fastest_of(candidates, threads):
        seen.append(([i for _, i in candidates], threads))
        return [{"task": t, "config_index": i} | ({"median_s": retimed[threads][i]} if retimed[threads][i]
                                                 else {"error": "wrong"}) for t, i in candidates]

    monkeypatch.setattr(compare, "fastest_of", fastest_of)
    monkeypatch.setattr(compare, "time_module", lambda *a: {"median_s": 1e-3})
    monkeypatch.setattr(peers, "time_peers", lambda *a: {"numpy": {"median_s": 1e-3}})
    row1, row2 = vs_libraries.time_all(["matmul:512"], tmp_path, [1, 2], 3, 1.0, host, top=3)
    assert seen == [(valid[:3], 1), (valid[:3], 2)]  # the three fastest logged, timed on each row's threads
    assert row1["configs"] == {"matmul": valid[0]} and row2["configs"] == {"matmul": valid[1]}
    g = task.flops / 1e9
    assert row2["retimed"]["matmul"] == [
        {"template": "matmul", "config": valid[0], "logged_gflops": pytest.approx(g / 1e-3), "gflops": pytest.approx(g / 3e-3)},
        {"template": "matmul", "config": valid[1], "logged_gflops": pytest.approx(g / 2e-3), "gflops": pytest.approx(g / 1e-3)},
        {"template": "matmul", "config": valid[2], "logged_gflops": pytest.approx(g / 3e-3), "error": "wrong"}]
    assert row1["retimed"]["matmul"][0]["gflops"] == pytest.approx(g / 1e-3)


def test_vs_libraries_markdown_reports_the_best_of_rounds_geomean(script):
    vs_libraries = script("vs_libraries")
    rows = [{"workload": f"resnet18:C{i}", "threads": 2, "gflops": {"tensortune_nchw": 90.0, "onnxruntime": 100.0},
             "best_peer": "onnxruntime", "ratio_nchw": 0.9, "ratio_packed": r, "best_ratio_nchw": 0.8,
             "best_ratio_packed": b} for i, (r, b) in enumerate(((1.0, 2.0), (1.0, 0.5)), 1)]
    summary = vs_libraries.summarise(rows, [2])
    assert summary[2]["best_of_rounds_geomean_packed"] == pytest.approx(1.0)
    assert summary[2]["best_of_rounds_geomean_nchw"] == pytest.approx(0.8)
    text = vs_libraries.markdown(rows, summary, {2: 200.0}, "cmd", "machine", rounds=3)
    assert "fastest round of any peer (the least disturbed timings), geometric mean over C1-C12: NCHW view 0.80, " \
           "packed view 1.00." in text


def test_tail_code_builds_each_config_with_and_without_the_pass(script):
    """``tail_code.py`` compares the lowering with and without ``partition_tails``: both builds are correct,
    only the one with the pass has the full tiles' clean copy, and the pipeline is whole again afterwards."""
    from tensortune.lower import PASSES
    from tensortune.ops.operator import check_output

    tail_code = script("tail_code")
    task = create_task("matmul", {"M": 29, "N": 40, "K": 8})  # 3 tiles of 12 rows (7 clamped), 2 of 32 columns
    config = {"tile_y": [3, 1, 12], "tile_x": [1, 2, 32], "tile_k": [1, 8], "order": [0, 1], "unroll_k": 1,
              "parallel": "none"}
    built = tail_code.build_both(task, config)
    for module, op, inputs, expected in built.values():
        out = op.empty_output()
        module(*inputs, out)
        assert check_output(out, expected) is None
    assert "tt_min_i32" in built["without"][0].source
    assert built["with"][0].source.count("else") > built["without"][0].source.count("else")
    assert [name for name, _ in importlib.import_module("tensortune.lower.lower").PASSES] == \
        [name for name, _ in PASSES] and "partition_tails" in dict(PASSES)


def test_vs_libraries_leaves_an_uncapped_peer_out_of_the_best_peer(script, monkeypatch, tmp_path):
    """AVX2 code on an AVX-512 machine: onnxruntime cannot be capped, so it is shown but never the best peer."""
    vs_libraries, host, task = _one_logged_matmul(script, tmp_path)
    import tensortune.benchmarking.compare as compare
    import tensortune.benchmarking.peers as peers

    monkeypatch.setattr(compare, "time_module", lambda *a: {"median_s": 1e-3})
    monkeypatch.setattr(peers, "time_peers", lambda *a: {
        "numpy": {"median_s": 2e-3, "capped": "OPENBLAS_CORETYPE=Haswell"},
        "onnxruntime": {"median_s": 0.5e-3, "uncapped": "no setting"}})
    (row,) = vs_libraries.time_all(["matmul:512"], tmp_path, [2], 3, 1.0, host)
    g = task.flops / 1e9
    assert row["gflops"]["onnxruntime"] == pytest.approx(g / 0.5e-3)  # shown
    assert row["best_peer"] == "numpy" and row["ratio_matmul"] == pytest.approx(2.0)  # but not compared
    text = vs_libraries.markdown([row], vs_libraries.summarise([row], [2]), {2: 200.0}, "cmd", "machine")
    assert "Peers capped to the target's ISA (OPENBLAS_CORETYPE=Haswell): numpy. Not capped, no such setting, so " \
           "shown but left out of the best peer: onnxruntime." in text


@pytest.mark.parametrize("faulting", [True, False], ids=["cpuid-capped", "no-cpuid-faulting"])
def test_peers_on_a_narrower_target_are_capped_and_onnxruntime_only_through_cpuid(monkeypatch, faulting):
    """onnxruntime has no setting of its own: it is capped (CPUID) where the machine can, else marked uncapped."""
    import subprocess

    import tensortune.benchmarking.cpuid_cap as cpuid_cap
    import tensortune.benchmarking.peers as peers

    host = tt_target.Target.host()
    if host.isa is not tt_target.ISA.AVX512:
        pytest.skip("needs an AVX-512 host: the AVX2 target is then narrower than the machine")
    seen = {}

    def run(cmd, input, env, capture_output, text):  # the child: it reports the ISA its CPUID was capped to
        seen["env"] = env
        capped = {"cpuid_isa": env[cpuid_cap.ENV_VAR]} if cpuid_cap.ENV_VAR in env else {}
        out = {"numpy": {"median_s": 1e-3, **capped}, "onnxruntime": {"median_s": 1e-3, **capped}}
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(out), stderr="")

    monkeypatch.setattr(peers.subprocess, "run", run)
    monkeypatch.setattr(cpuid_cap, "cpuid_cap_problem", lambda: None if faulting else "no CPUID faulting here")
    task = create_task("matmul", {"M": 64, "N": 64, "K": 64}, target=tt_target.Target.parse("c -isa=avx2"))
    out = peers.time_peers(task, 2, 3, 1.0)
    assert seen["env"]["OPENBLAS_CORETYPE"] == "Haswell" and seen["env"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    assert seen["env"]["MKL_ENABLE_INSTRUCTIONS"] == "AVX2"  # torch.matmul runs MKL
    assert out["numpy"]["capped"].startswith("OPENBLAS_CORETYPE=Haswell")
    if faulting:
        assert seen["env"][cpuid_cap.ENV_VAR] == "avx2" and "uncapped" not in out["onnxruntime"]
        assert out["onnxruntime"]["capped"] == f"{cpuid_cap.ENV_VAR}=avx2"
    else:
        assert cpuid_cap.ENV_VAR not in seen["env"] and "capped" not in out["onnxruntime"]
        assert "no CPUID faulting here" in out["onnxruntime"]["uncapped"]


def test_transfer_runs_start_without_the_shipped_model_and_learn_from_the_earlier_transfer_logs(script, monkeypatch,
                                                                                                 tmp_path):
    """Both runs of each workload are cold starts (``pretrained=False``); the transfer run of the second workload
    gets the first's transfer records as history; trials to 90% come from the logs."""
    import tensortune.autotvm.tune as tune_module

    transfer = script("transfer")
    real, calls = tune_module.tune, []

    def spy(task, n_trial, **kw):
        calls.append((task.workload_key, kw["log_file"].parent.name, kw["pretrained"], len(kw.get("history") or [])))
        return real(task, n_trial, **{**kw, "tuner": "random", "history": None})

    def measure(inputs):  # GFLOP/s rising with the config's index: the later configs are faster
        return [MeasureResult((inp.task.flops / ((1 + inp.config_index % 97) * 1e9),), ErrorKind.NONE, "", 0.0)
                for inp in inputs]

    monkeypatch.setattr(tune_module, "tune", spy)
    rows = transfer.run_seed(["C1", "C2"], 8, tmp_path, 0, 4, measure)
    assert [(c[1], c[2], c[3]) for c in calls] == [("plain", False, 0), ("transfer", False, 0),
                                                   ("plain", False, 0), ("transfer", False, 8)]
    assert [r["history_records"] for r in rows] == [0, 8]
    assert all(r["plain_trials_to_90"] is not None and 1 <= r["plain_trials_to_90"] <= 8 for r in rows)


def test_fresh_input_times_a_config_both_ways(script):
    """``fresh_input.py`` times one config on an input it only reads and on one its threads rewrite (the timing
    itself is tested in test_build.py)."""
    fresh_input = script("fresh_input")
    task = create_task("matmul", {"M": 32, "N": 32, "K": 16})
    warm, fresh = fresh_input.time_config(task, 0, threads=2, rounds=2)
    assert warm > 0 and fresh > 0

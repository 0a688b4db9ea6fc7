"""The ``tensortune`` command line, run in-process through ``main(argv)`` (and once as ``python -m tensortune``).

One tiny matmul is really tuned (compiled and measured) and its log is shared by the tests of ``best``,
``show`` and ``bench``.
"""
from __future__ import annotations

import ast
import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tensortune import cli
from tensortune.autotvm.record import load_records
from tensortune.autotvm.task import Task
from tensortune.autotvm.catalog import WorkloadCatalog, create_task, task_from_workload
from tensortune.benchmarking.peers import time_peers
from tensortune.ops.operator import check_output

MATMUL = ["tune", "matmul", "--shape", "M=32", "N=32", "K=32", "--template", "matmul", "--tuner", "random", "--quiet",
          "--seed", "1"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A log of 8 and then (resumed) 12 measured trials of a 32^3 matmul, with both runs' JSON summaries."""
    log = tmp_path_factory.mktemp("cli") / "mm.json"
    summaries, records = [], []
    for trials in (8, 12):
        out = io.StringIO()  # capsys is function-scoped
        with contextlib.redirect_stdout(out):
            assert cli.main([*MATMUL, "--trials", str(trials), "--log", str(log), "--json"]) == 0
        summaries.append(json.loads(out.getvalue()))
        records.append(load_records(log))
    return log, summaries, records


@pytest.mark.slow
def test_tune_logs_every_trial_and_prints_a_json_summary(tuned):
    log, (first, _), (records8, _) = tuned
    assert len(records8) == 8
    assert first["trials"] == first["new_trials"] == 8 and first["resumed_trials"] == 0
    assert first["best_gflops"] > 0
    best = max((r for r in records8 if r.ok), key=lambda r: -r.cost)
    assert first["best_config_index"] == best.config_index
    assert first["best_config"] == best.config
    assert first["log"] == str(log)
    assert first["build_s"] > 0 and first["run_s"] > 0 and first["wall_s"] >= first["build_s"] + first["run_s"]


def test_rerun_with_more_trials_resumes_the_log(tuned):
    _, (first, second), (records8, records12) = tuned
    assert len(records12) == 12
    assert records12[:8] == records8  # the first run's lines are untouched
    indices = [r.config_index for r in records12]
    assert len(set(indices)) == 12  # nothing measured twice
    assert second["trials"] == 12 and second["resumed_trials"] == 8 and second["new_trials"] == 4
    assert second["best_gflops"] >= first["best_gflops"]


def test_tune_text_summary(tmp_path, capsys):
    log = tmp_path / "t.json"
    code, out, err = run(capsys, *MATMUL, "--trials", "2", "--batch-size", "1", "--log", str(log))
    assert code == 0
    assert "GFLOP/s" in out and "trials    2 (2 measured now, 0 resumed from the log)" in out
    assert f"log       {log}" in out and "config    #" in out
    assert len(load_records(log)) == 2


def test_best_json_is_the_fastest_record(tuned, capsys):
    log, _, (_, records) = tuned
    code, out, _ = run(capsys, "best", str(log), "--json")
    assert code == 0
    (row,) = json.loads(out)["best"]
    fastest = min((r for r in records if r.ok), key=lambda r: r.cost)
    assert row["config_index"] == fastest.config_index and row["config"] == fastest.config
    assert row["time_s"] == pytest.approx(fastest.cost)
    assert row["gflops"] == pytest.approx(2 * 32 ** 3 / fastest.cost / 1e9)
    assert row["template"] == "matmul" and row["args"] == [32, 32, 32] and row["records"] == 12
    assert row["target"] == fastest.target


def test_best_text_and_workload_selection(tuned, capsys):
    log, _, _ = tuned
    code, out, _ = run(capsys, "best", str(log), "--workload", "matmul(32, 32, 32)")
    assert code == 0
    assert out.startswith("matmul(32, 32, 32)") and "GFLOP/s" in out and "template  matmul" in out
    key = create_task("matmul", {"M": 32, "N": 32, "K": 32}).workload_key
    assert run(capsys, "best", str(log), "--workload", key, "--json")[0] == 0
    code, _, err = run(capsys, "best", str(log), "--workload", "resnet18:C6")
    assert code == 2 and "has no workload 'resnet18:C6'" in err and "matmul(32, 32, 32)" in err


def test_show_prints_loop_ir_and_c(tuned, capsys):
    log, _, _ = tuned
    code, out, _ = run(capsys, "show", str(log))
    assert code == 0
    ir, _, c = out.partition("// ---- C source ----")
    assert "for " in ir and "def kernel(" in ir
    assert "#include" in c and "kernel" in c


@pytest.mark.slow
def test_bench_reports_tuned_default_and_numpy(tuned, capsys):
    log, _, _ = tuned
    code, out, _ = run(capsys, "bench", str(log), "--json", "--repeat", "3", "--rounds", "1", "--threads", "1")
    assert code == 0
    report = json.loads(out)
    assert report["threads"] == 1
    (w,) = report["workloads"]
    assert len(w["retimed"]) == 3  # by default, the log's 3 fastest configs are timed again first
    assert w["config_index"] in [r["config_index"] for r in w["retimed"]]
    kernels = w["kernels"]
    for name in ("tensortune", "tensortune_default", "numpy"):
        assert kernels[name]["gflops"] > 0 and len(kernels[name]["runs_s"]) == 3
    assert kernels["numpy"]["tuned_speedup"] == pytest.approx(kernels["numpy"]["median_s"]
                                                              / kernels["tensortune"]["median_s"])
    code, out, _ = run(capsys, "bench", str(log), "--repeat", "2")
    assert code == 0 and "numpy.matmul" in out and "tensortune, default schedule" in out


def test_bench_times_in_rounds_taken_in_turns_and_pairs_speedups_within_a_round(monkeypatch):
    import tensortune.benchmarking.compare as compare

    task = create_task("matmul", {"M": 16, "N": 16, "K": 8})
    ours = iter([1e-3, 4e-3, 2e-3, 4e-3, 1e-3, 4e-3])  # tuned, default; per round
    theirs = iter([2e-3, 3e-3, 4e-3])
    calls = []

    def fake_module(module, inputs, op, expected, *timing):
        calls.append("tt")
        return {"median_s": next(ours), "runs_s": [0.0, 0.0]}

    def fake_peers(*args):
        calls.append("peers")
        return {"numpy": {"median_s": next(theirs), "runs_s": [0.0]}, "torch": {"unavailable": "not installed"}}

    monkeypatch.setattr(compare, "time_module", fake_module)
    monkeypatch.setattr(compare, "time_peers", fake_peers)
    kernels = compare.compare_kernels(task, 0, 1, 2, 1.0, rounds=3)
    assert calls == ["tt", "tt", "peers", "peers", "tt", "tt", "tt", "tt", "peers"]  # who goes first alternates
    assert kernels["tensortune"]["rounds_s"] == [1e-3, 2e-3, 1e-3] and kernels["tensortune"]["median_s"] == 1e-3
    assert kernels["tensortune_default"]["median_s"] == 4e-3 and len(kernels["tensortune_default"]["runs_s"]) == 6
    # numpy over the tuned kernel within each round: 2, 1.5 and 4: the median is 2 (the ratio of the medians would
    # be 3); the default's: 4, 2 and 4, median 4
    assert kernels["numpy"]["tuned_speedup"] == pytest.approx(2.0)
    assert kernels["tensortune_default"]["tuned_speedup"] == pytest.approx(4.0)
    assert kernels["numpy"]["gflops"] == pytest.approx(task.flops / 3e-3 / 1e9)  # the median round
    assert kernels["torch"] == {"unavailable": "not installed"}
    with pytest.raises(ValueError, match="rounds"):
        compare.compare_kernels(task, 0, 1, 2, 1.0, rounds=0)


def test_bench_never_times_a_wrong_kernel(tuned, capsys, monkeypatch):
    log, _, _ = tuned
    real = Task.reference
    monkeypatch.setattr(Task, "reference", lambda self, canonical, config=None: real(self, canonical, config) + 1.0)
    code, out, _ = run(capsys, "bench", str(log), "--json", "--repeat", "2")
    assert code == 1
    (w,) = json.loads(out)["workloads"]
    assert "wrong answer" in w["kernels"]["tensortune"]["error"]
    assert list(w["kernels"]) == ["tensortune"]  # nothing timed


@pytest.mark.slow
def test_bench_top_times_the_fastest_logged_configs_again_and_benches_the_fastest(tuned, capsys):
    log, _, (_, records) = tuned
    code, out, _ = run(capsys, "bench", str(log), "--json", "--repeat", "2", "--threads", "1", "--top", "3")
    assert code == 0
    (w,) = json.loads(out)["workloads"]
    logged = sorted((r for r in records if r.ok), key=lambda r: r.cost)
    assert [r["config_index"] for r in w["retimed"]] == [r.config_index for r in logged[:3]]
    assert [r["logged_gflops"] for r in w["retimed"]] == pytest.approx([2 * 32 ** 3 / r.cost / 1e9
                                                                        for r in logged[:3]])
    assert all(r["gflops"] > 0 for r in w["retimed"])
    assert w["config_index"] == max(w["retimed"], key=lambda r: r["gflops"])["config_index"]
    code, out, _ = run(capsys, "bench", str(log), "--repeat", "2", "--threads", "1", "--top", "2")
    assert code == 0 and "chosen among the log's 2 fastest configs, timed again" in out


def test_fastest_of_reports_a_wrong_or_unbuildable_config_and_never_picks_it(tuned, monkeypatch):
    from tensortune.benchmarking.compare import fastest_of

    _, _, (_, records) = tuned
    task = create_task("matmul", {"M": 32, "N": 32, "K": 32})
    ok = [r.config_index for r in records if r.ok][:2]
    real = Task.reference
    monkeypatch.setattr(Task, "reference", lambda self, canonical, config=None:
                        real(self, canonical, config) + (config == ok[1]))  # the second config looks wrong
    entries = fastest_of([(task, ok[0]), (task, ok[1]), (task, len(task.space) + 5)], threads=1, passes=2, repeat=2,
                         min_repeat_ms=1.0)
    assert [e["config_index"] for e in entries] == [ok[0], ok[1], len(task.space) + 5]
    assert entries[0]["median_s"] == min(entries[0]["passes_s"]) and len(entries[0]["passes_s"]) == 2
    assert "wrong answer" in entries[1]["error"] and "median_s" not in entries[1]
    assert "error" in entries[2] and "median_s" not in entries[2]
    with pytest.raises(ValueError, match="passes and repeat must be at least 1"):
        fastest_of([(task, ok[0])], threads=1, passes=0)


@pytest.mark.slow
def test_conv_peers_are_timed_or_reported_missing():
    """PyTorch / onnxruntime (optional): either a correct, timed peer or 'not installed', never an error."""
    for task in (create_task("conv2d", {"IC": 8, "OC": 16, "H": 6, "W": 6, "K": 3, "pad": 1}),
                 create_task("depthwise_conv2d", {"C": 16, "H": 6, "W": 6, "K": 3, "stride": 2, "pad": 1})):
        peers = time_peers(task, threads=1, repeat=2, min_repeat_ms=1.0)
        assert set(peers) == {"torch", "torch_channels_last", "onnxruntime"}, peers
        for result in peers.values():
            assert result == {"unavailable": "not installed"} or result["median_s"] > 0, result


USER_ERRORS = [
    (["tune", "conv3d", "--shape", "H=1", "--log", "{log}"], "unknown operator 'conv3d'"),
    (["tune", "conv2d", "--shape", "H=28", "W=28", "IC=128", "--log", "{log}"], "shape parameter OC="),
    (["tune", "conv2d", "--shape", "H28", "--log", "{log}"], "malformed shape parameter 'H28'"),
    (["tune", "matmul", "--shape", "M=a", "N=1", "K=1", "--log", "{log}"], "M must be an integer"),
    (["tune", "matmul", "--log", "{log}"], "matmul needs --shape M=... N=... K=..."),
    (["tune", "--shape", "M=4", "N=4", "K=4", "matmul", "--log", "{log}"], "name the operator before --shape"),
    (["tune", "--workload", "resnet18:C99", "--log", "{log}"], "no workload 'C99'"),
    (["tune", "--workload", "resnet18:C6", "--shape", "H=1", "--log", "{log}"], "not both"),
    (["tune", "matmul", "--shape", "M=4", "N=4", "K=4", "--tuner", "annealing", "--log", "{log}"],
     "invalid choice: 'annealing'"),
    (["tune", "matmul", "--shape", "M=4", "N=4", "K=4", "--template", "conv2d_nchwc", "--log", "{log}"],
     "does not compute matmul"),
    (["tune", "matmul", "--shape", "M=4", "N=4", "K=4", "--trials", "0", "--log", "{log}"], "positive integer"),
    (["tune", "matmul", "--shape", "M=4", "N=4", "K=4"], "required: --log"),
    (["tune", "matmul", "--shape", "M=4", "N=4", "K=4", "--log", "{tmp}/no/such/dir/log.json"], "does not exist"),
    (["best", "{tmp}/missing.json"], "no such log file"),
    (["show", "{tmp}/missing.json"], "no such log file"),
    (["bench", "{tmp}/missing.json"], "no such log file"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
    (["tune", "matmul", "--shape", "M=4", "N=4", "K=4", "--target", "c -isa=sse -cores=2 -arch=x86_64", "--log",
      "{log}"], "'sse'"),
]


@pytest.mark.parametrize("argv,message", USER_ERRORS, ids=[" ".join(a[:2]) + f" ({m})" for a, m in USER_ERRORS])
def test_user_errors_exit_2_with_one_clear_line(tmp_path, capsys, argv, message):
    argv = [a.format(log=tmp_path / "log.json", tmp=tmp_path) for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("tensortune: error: ") and message in err, err
    assert not (tmp_path / "log.json").exists()  # nothing tuned


def test_log_without_records(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("\n".join(["not json"] * 10 + ['{"v": 99}']) + "\n")
    code, _, err = run(capsys, "best", str(bad))
    assert code == 2
    lines = err.splitlines()
    assert lines[-1] == f"tensortune: error: {bad} holds no tuning records; create one with " \
                        f"'tensortune tune ... --log {bad}'"
    assert len(lines) == 5 and "8 more lines skipped" in lines[3]  # three warnings, then a count


def test_parse_shape():
    assert cli.parse_shape(["H=28", "W=28", "pad=0"]) == {"H": 28, "W": 28, "pad": 0}
    for bad, message in ((["H28"], "malformed"), (["=3"], "malformed"), (["H="], "malformed"),
                         (["H=2.5"], "integer"), (["H=1", "H=2"], "twice")):
        with pytest.raises(cli.CLIError, match=message):
            cli.parse_shape(bad)


def test_conv2d_shape_and_workload_name_the_same_task():
    args = cli.build_parser().parse_args(["tune", "conv2d", "--shape", "H=28", "W=28", "IC=128", "OC=128", "K=3",
                                          "stride=1", "pad=1", "--log", "x"])
    task = cli._task_from_args(args)
    assert task.workload_key == task_from_workload("resnet18:C6").workload_key
    catalog = WorkloadCatalog()
    assert catalog.name_of(task) == "resnet18:C6"
    assert catalog.label(task) == f"resnet18:C6 {task}"
    assert catalog.matches(task, "resnet18:C6") and catalog.matches(task, task.workload_key)
    assert not catalog.matches(task, "resnet18:C5")
    args = cli.build_parser().parse_args(["tune", "--workload", "mobilenet:D3", "--template",
                                          "depthwise_conv2d_nchwc", "--log", "x"])
    assert catalog.name_of(cli._task_from_args(args)) == "mobilenet:D3"
    matmul = create_task("matmul", {"M": 8, "N": 8, "K": 8})
    assert catalog.name_of(matmul) is None and catalog.label(matmul) == str(matmul)


def test_tune_defaults_to_the_xgb_tuner_and_to_evolution_without_a_template():
    args = cli.build_parser().parse_args(["tune", "matmul", "--shape", "M=8", "N=8", "K=8", "--log", "x"])
    tasks = cli._tasks_from_args(args)
    assert [t.name for t in tasks] == ["matmul", "auto_matmul"]
    assert [cli._tuner_of(args, t) for t in tasks] == ["xgb", "evolution"]
    args = cli.build_parser().parse_args(["tune", "matmul", "--shape", "M=8", "N=8", "K=8", "--log", "x",
                                          "--tuner", "ga", "--search", "auto"])
    assert [(t.name, cli._tuner_of(args, t)) for t in cli._tasks_from_args(args)] == [("auto_matmul", "ga")]


@pytest.mark.parametrize("flag", [[], ["--no-pretrained"]])
def test_no_pretrained_keeps_the_shipped_cost_model_out_of_the_xgb_tuner(capsys, tmp_path, monkeypatch, flag):
    pytest.importorskip("xgboost")
    from tensortune.autotvm.tuner import xgb

    consulted = []
    monkeypatch.setattr(xgb, "pretrained_model", lambda target: consulted.append(target))
    argv = ["tune", "matmul", "--shape", "M=16", "N=16", "K=16", "--template", "matmul", "--trials", "4",
            "--batch-size", "4", "--quiet", "--seed", "0", "--log", str(tmp_path / "mm.json"), "--json", *flag]
    code, out, err = run(capsys, *argv)
    assert code == 0, err
    assert json.loads(out)["trials"] == 4
    assert len(consulted) == (0 if flag else 1)


def test_only_the_cli_imports_the_benchmarking_package():
    """The compiler and the tuner never depend on the peer libraries' harness."""
    package = Path(cli.__file__).parent
    for path in package.rglob("*.py"):
        if path.name == "cli.py" and path.parent == package or "benchmarking" in path.relative_to(package).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any("benchmarking" in n.split(".") for n in names), f"{path} imports tensortune.benchmarking"


def test_python_dash_m_runs_the_cli(tuned):
    log, _, _ = tuned
    proc = subprocess.run([sys.executable, "-m", "tensortune", "best", str(log), "--json"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["best"][0]["gflops"] > 0
    proc = subprocess.run([sys.executable, "-m", "tensortune", "best"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "required: FILE" in proc.stderr


def test_check_output_tolerance():
    expected = np.full((4, 4), 100.0, np.float32)
    assert check_output(expected + 0.05, expected) is None
    assert "wrong answer" in check_output(expected + 1.0, expected)
    assert "wrong answer" in check_output(np.full_like(expected, np.nan), expected)


@pytest.mark.slow
def test_matmul_peers_and_packed_view_bench(tmp_path, capsys):
    """numpy / torch matmul peers are checked and timed; a packed-layout conv log benches against NCHW peers."""
    peers = time_peers(create_task("matmul", {"M": 8, "N": 16, "K": 4}), threads=1, repeat=2, min_repeat_ms=1.0)
    assert set(peers) == {"numpy", "torch"} and peers["numpy"]["median_s"] > 0, peers
    assert peers["torch"] == {"unavailable": "not installed"} or peers["torch"]["median_s"] > 0, peers
    log = tmp_path / "packed.json"
    code, _, _ = run(capsys, "tune", "conv2d", "--shape", "IC=16", "OC=16", "H=6", "W=6", "K=3", "pad=1",
                     "--template", "conv2d_nchwc_packed", "--trials", "4", "--log", str(log))
    assert code == 0
    code, out, _ = run(capsys, "bench", str(log), "--json", "--repeat", "2")
    assert code == 0, out
    (w,) = json.loads(out)["workloads"]
    kernels = w["kernels"]
    assert kernels["tensortune"]["median_s"] > 0 and kernels["tensortune_default"]["median_s"] > 0, kernels
    assert all("error" not in k for k in kernels.values()), kernels

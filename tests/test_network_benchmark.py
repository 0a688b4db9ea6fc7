"""``benchmarks/e2e.py`` without timing anything: its table and BENCHMARKS.md section from a fake report, and the
PyTorch executor of the graph IR that it times, against the reference interpreter."""
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

    from tensortune.graph import import_onnx, interpret
    from tensortune.graph.passes import fold_constants
    from tensortune.network import zoo

    g = fold_constants(import_onnx(zoo.mobilenet_v2(image=32)))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    with torch.inference_mode():
        got = GraphModule(g)(torch.from_numpy(x)).numpy()
    expected = interpret(g, {"input": x})[g.outputs[0]]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(expected).max())))

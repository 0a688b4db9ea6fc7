"""Tests of tuning logs: round trip, corrupt and truncated lines, crash safety, best-config selection."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import tensortune as tt
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import (RECORD_VERSION, LogError, Record, RecordWarning, SkippedLineWarning,
                                       append_records, apply_best, best_records, build_best, load_records,
                                       pick_best, task_records, top_records)
from tensortune.autotvm.task import Task
from tensortune.autotvm.templates import matmul_template
from tensortune.target import ISA, Target

HOST = Target.host()
OTHER = Target(ISA.SCALAR, 1, "x86_64")


def task(m: int = 64, target: Target = HOST) -> Task:
    return Task(matmul_template, (m, m, m), target)


def ok(cost: float, ts: float = 1000.0) -> MeasureResult:
    return MeasureResult((cost, cost * 1.1), ErrorKind.NONE, "", 0.5, ts)


def failed(kind: ErrorKind = ErrorKind.RUNTIME_CRASH) -> MeasureResult:
    return MeasureResult((), kind, f"{kind.name}: worker died with SIGSEGV", 0.25, 1000.0)


def pairs(t: Task, items: list[tuple[int, MeasureResult]]) -> list[tuple[MeasureInput, MeasureResult]]:
    return [(MeasureInput(t, i), r) for i, r in items]


def skipped_lines(caught: list[warnings.WarningMessage], path) -> list[int]:
    """Line numbers of the RecordWarnings about corrupt lines of ``path``."""
    out = []
    for w in caught:
        assert issubclass(w.category, RecordWarning)
        prefix = f"{path}:"
        msg = str(w.message)
        assert msg.startswith(prefix) and "skipping corrupt record" in msg, msg
        out.append(int(msg[len(prefix):].split(":")[0]))
    return out


def load_catching(path) -> tuple[list[Record], list[int]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recs = load_records(path)
    return recs, skipped_lines(caught, path)


# --- round trip ----------------------------------------------------------------------------------


def test_records_round_trip_with_every_field(tmp_path):
    log = tmp_path / "log.jsonl"
    t = task()
    items = [(5, ok(1e-3, ts=1234.5)), (77, failed(ErrorKind.WRONG_ANSWER)), (5000, ok(2e-3))]
    assert append_records(log, pairs(t, items)) == 3
    recs = load_records(log)
    assert [r.config_index for r in recs] == [5, 77, 5000]
    first = recs[0]
    assert first.target == str(HOST) and first.workload == t.workload_key
    assert first.template == "matmul" and first.args == (64, 64, 64)
    assert first.config == t.config(5).to_json()
    assert first.costs == (1e-3, 1.1e-3) and first.error_kind is ErrorKind.NONE and first.error_msg == ""
    assert first.all_cost == 0.5 and first.timestamp == 1234.5 and first.version == tt.__version__
    assert first.ok and first.mean_cost == pytest.approx(1.05e-3)
    assert recs[1].error_kind is ErrorKind.WRONG_ANSWER and "SIGSEGV" in recs[1].error_msg
    assert not recs[1].ok and recs[1].mean_cost == float("inf")
    assert recs[1].result() == failed(ErrorKind.WRONG_ANSWER)
    # The task rebuilt from a record is the same workload for the same target.
    rebuilt = first.task()
    assert rebuilt.workload_key == t.workload_key and rebuilt.target == HOST and rebuilt.args == t.args
    # Lines are versioned JSON with the documented keys.
    line = json.loads(log.read_text().splitlines()[0])
    assert line["v"] == RECORD_VERSION
    assert set(line) == {"v", "target", "workload", "template", "args", "config_index", "config", "costs",
                         "error_kind", "error_msg", "all_cost", "timestamp", "version"}
    assert line["error_kind"] == "NONE"


def test_emulated_is_an_optional_field_written_only_when_true(tmp_path):
    log = tmp_path / "log.jsonl"
    t = task()
    emulated = MeasureResult((1e-3,), ErrorKind.NONE, "", 0.5, 1000.0, emulated=True)
    append_records(log, pairs(t, [(1, ok(1.0)), (2, emulated)]))
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert "emulated" not in lines[0] and lines[1]["emulated"] is True  # native lines are as format 1 always was
    recs = load_records(log)
    assert [r.emulated for r in recs] == [False, True] and recs[1].result() == emulated


def test_a_cluster_record_names_its_worker_and_a_local_one_keeps_the_old_keys(tmp_path):
    log = tmp_path / "log.jsonl"
    t = task()
    measured = MeasureResult((1e-3,), ErrorKind.NONE, "", 0.5, 1000.0, worker="tcp://10.0.0.5:40123")
    append_records(log, pairs(t, [(5, measured), (6, ok(2e-3))]))
    remote, local = load_records(log)
    assert remote.worker == "tcp://10.0.0.5:40123" and remote.result() == measured
    assert local.worker == "" and local.result().worker == ""
    remote_line, local_line = (json.loads(line) for line in log.read_text().splitlines())
    assert remote_line["worker"] == "tcp://10.0.0.5:40123" and remote_line["v"] == RECORD_VERSION
    assert "worker" not in local_line  # a log of one machine is what it was before clusters
    bad = dict(remote_line, worker=7)
    log.write_text(json.dumps(bad) + "\n")
    assert load_catching(log) == ([], [1])


def test_appending_adds_lines_and_blank_lines_are_ignored(tmp_path):
    log = tmp_path / "log.jsonl"
    t = task()
    append_records(log, pairs(t, [(1, ok(1.0))]))
    with open(log, "a") as f:
        f.write("\n   \n")
    append_records(log, pairs(t, [(2, ok(2.0)), (3, ok(3.0))]))
    recs, skipped = load_catching(log)
    assert [r.config_index for r in recs] == [1, 2, 3] and skipped == []
    assert append_records(log, []) == 0


def test_a_missing_log_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_records(tmp_path / "nope.jsonl")


# --- corrupt content -----------------------------------------------------------------------------


def test_garbage_and_truncated_lines_are_skipped_with_a_warning_naming_file_and_line(tmp_path):
    log = tmp_path / "log.jsonl"
    t = task()
    append_records(log, pairs(t, [(1, ok(1.0)), (2, ok(2.0))]))
    with open(log, "a") as f:
        f.write("this is not json\n")
    append_records(log, pairs(t, [(3, ok(3.0))]))
    good_line = Record.from_measurement(MeasureInput(t, 4), ok(4.0)).to_line()
    with open(log, "a") as f:
        f.write(good_line[: len(good_line) // 2])  # a write cut short by a kill
    with pytest.warns(RecordWarning) as caught:
        recs = load_records(log)
    assert [r.config_index for r in recs] == [1, 2, 3]
    assert skipped_lines(list(caught), log) == [3, 5]
    assert "truncated last line" in str(caught[1].message)


@pytest.mark.parametrize("mutate, reason", [
    (lambda d: d.update(v=2), "unknown format version 2"),
    (lambda d: d.pop("v"), "unknown format version None"),
    (lambda d: d.pop("costs"), "missing field 'costs'"),
    (lambda d: d.update(config_index="7"), "field 'config_index' has the wrong type"),
    (lambda d: d.update(config_index=-1), "negative config_index"),
    (lambda d: d.update(error_kind="EXPLODED"), "unknown error_kind 'EXPLODED'"),
    (lambda d: d.update(costs=[1.0, "x"]), "'costs' must be a list of numbers"),
    (lambda d: d.update(emulated="yes"), "field 'emulated' has the wrong type"),
])
def test_lines_with_bad_fields_or_an_unknown_version_are_skipped(tmp_path, mutate, reason):
    log = tmp_path / "log.jsonl"
    t = task()
    obj = json.loads(Record.from_measurement(MeasureInput(t, 9), ok(1.0)).to_line())
    mutate(obj)
    append_records(log, pairs(t, [(1, ok(1.0))]))
    with open(log, "ab") as f:
        f.write(json.dumps(obj).encode() + b"\n")
        f.write(b"[1, 2, 3]\n")
        f.write(b"\xff\xfe\n")
    append_records(log, pairs(t, [(2, ok(1.0))]))
    with pytest.warns(RecordWarning) as caught:
        recs = load_records(log)
    assert [r.config_index for r in recs] == [1, 2]
    assert skipped_lines(list(caught), log) == [2, 3, 4]
    assert reason in str(caught[0].message)
    assert "expected a JSON object" in str(caught[1].message)
    assert "not UTF-8" in str(caught[2].message)


def test_appending_after_a_truncated_line_keeps_new_records_readable(tmp_path):
    log = tmp_path / "log.jsonl"
    t = task()
    append_records(log, pairs(t, [(1, ok(1.0))]))
    with open(log, "a") as f:
        f.write('{"v": 1, "target": "c -is')
    append_records(log, pairs(t, [(2, ok(2.0)), (3, ok(3.0))]))
    append_records(log, pairs(t, [(4, ok(4.0))]))
    recs, skipped = load_catching(log)
    assert [r.config_index for r in recs] == [1, 2, 3, 4]
    assert skipped == [2]  # only the fragment, which is no longer the last line


_WRITER = textwrap.dedent("""
    import sys, itertools
    from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
    from tensortune.autotvm.record import append_records
    from tensortune.autotvm.task import Task
    from tensortune.autotvm.templates import matmul_template
    from tensortune.target import Target
    t = Task(matmul_template, (64, 64, 64), Target.host())
    msg = "x" * 20000  # long lines make a kill inside a write more likely
    for n in itertools.count():
        batch = [(MeasureInput(t, (n * 7 + j) % 1000), MeasureResult((1e-3,), ErrorKind.NONE, msg, 0.1))
                 for j in range(7)]
        append_records(sys.argv[1], batch)
""")


def test_a_writer_killed_with_sigkill_leaves_a_readable_log(tmp_path):
    log = tmp_path / "log.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(log)])
    try:
        deadline = time.monotonic() + 30
        while (not log.exists() or log.stat().st_size < 2_000_000) and time.monotonic() < deadline:
            assert proc.poll() is None, "the writer exited early"
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    data = log.read_bytes()
    complete = data.count(b"\n")
    assert complete >= 50
    recs, skipped = load_catching(log)
    # Every complete line parses; only an unterminated last line may be lost.
    assert len(recs) == complete
    assert skipped in ([], [complete + 1])
    assert skipped == [] or not data.endswith(b"\n")


# --- using a log ---------------------------------------------------------------------------------


def test_a_record_costs_the_median_of_its_repeats_so_one_slowed_repeat_does_not_count(tmp_path):
    spiked = MeasureResult((1e-3, 1.1e-3, 2.4e-3), ErrorKind.NONE, "", 0.5, 1000.0)  # one repeat hit by a burst
    steady = MeasureResult((1.2e-3, 1.2e-3, 1.2e-3), ErrorKind.NONE, "", 0.5, 1000.0)
    assert spiked.cost == 1.1e-3 and spiked.mean_cost == pytest.approx(1.5e-3)
    assert failed().cost == float("inf")
    log = tmp_path / "log.jsonl"
    a = task(64)
    append_records(log, pairs(a, [(1, steady), (2, spiked)]))
    assert [r.cost for r in load_records(log)] == [1.2e-3, 1.1e-3]
    assert load_records(log)[1].mean_cost == pytest.approx(1.5e-3)
    assert pick_best(log)[a.workload_key].config_index == 2  # by mean it would be 1


def test_pick_best_takes_the_lowest_cost_among_successes_per_workload(tmp_path):
    log = tmp_path / "log.jsonl"
    a, b, a_other = task(64), task(32), task(64, OTHER)
    append_records(log, pairs(a, [(1, ok(3.0)), (2, ok(1.0)), (3, failed()), (4, ok(2.0))]))
    append_records(log, pairs(b, [(5, failed()), (6, ok(5.0)), (7, ok(4.0))]))
    append_records(log, pairs(a_other, [(8, ok(0.5))]))
    best = pick_best(log)
    assert set(best) == {a.workload_key, b.workload_key}
    assert best[a.workload_key].config_index == 8  # fastest on any target
    assert best[b.workload_key].config_index == 7
    on_host = pick_best(log, target=HOST)
    assert on_host[a.workload_key].config_index == 2 and on_host[b.workload_key].config_index == 7
    assert set(pick_best(load_records(log), target=str(HOST), workload=b.workload_key)) == {b.workload_key}
    only_failures = pairs(a, [(3, failed()), (9, failed(ErrorKind.RUN_TIMEOUT))])
    assert pick_best([Record.from_measurement(i, r) for i, r in only_failures]) == {}


def run_matmul(sch, op, target: Target) -> None:
    module = tt.build(sch, list(op.args), target)
    inputs = op.random_inputs(seed=3)
    out = np.full(op.output.shape, 123, op.output.dtype.numpy)
    module(*inputs, out)
    np.testing.assert_allclose(out, op.reference(*inputs), rtol=1e-4, atol=1e-4)


def test_apply_best_without_a_record_for_the_task_warns_and_uses_the_default_schedule(tmp_path):
    log = tmp_path / "log.jsonl"
    t = task(64)
    append_records(log, pairs(task(32), [(1, ok(1.0))]))  # another workload
    append_records(log, pairs(task(64, OTHER), [(1, ok(1.0))]))  # another target
    append_records(log, pairs(t, [(2, failed())]))  # only a failure
    with pytest.warns(RecordWarning, match="default schedule") as caught:
        sch, op = apply_best(log, t)
    msg = str(caught[0].message)
    assert t.workload_key in msg and str(HOST) in msg
    run_matmul(sch, op, t.target)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.warns(RecordWarning, match="default schedule"):
        apply_best(empty, t)


def test_apply_best_instantiates_the_best_config_and_build_best_compiles_it(tmp_path):
    log = tmp_path / "log.jsonl"
    t = task(64)
    append_records(log, pairs(t, [(10, ok(3.0)), (1234, ok(1.0)), (99, failed())]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sch, op = apply_best(log, t)
        expected, _ = t.instantiate(1234)
        assert str(tt.lower(sch, list(op.args))) == str(tt.lower(expected, list(op.args)))
        run_matmul(sch, op, t.target)
        module = build_best(log, t)
    inputs = op.random_inputs(seed=1)
    out = op.empty_output()
    module(*inputs, out)
    np.testing.assert_allclose(out, op.reference(*inputs), rtol=1e-4, atol=1e-4)


def test_records_whose_config_no_longer_matches_the_space_are_ignored_as_stale(tmp_path):
    log = tmp_path / "log.jsonl"
    t = task(64)
    append_records(log, pairs(t, [(10, ok(3.0)), (20, ok(1.0))]))
    lines = log.read_text().splitlines()
    stale = json.loads(lines[1])
    stale["config"]["tile_y"] = [1, 1, 64]  # what index 20 meant in an older template
    log.write_text(lines[0] + "\n" + json.dumps(stale) + "\n")
    with pytest.warns(RecordWarning, match="no longer match"):
        kept = task_records(load_records(log), t)
    assert [r.config_index for r in kept] == [10]
    with pytest.warns(RecordWarning, match="no longer match"):
        sch, _ = apply_best(log, t)
    expected, op = t.instantiate(10)
    assert str(tt.lower(sch, list(op.args))) == str(tt.lower(expected, list(op.args)))


def test_a_record_whose_config_moved_to_another_index_is_found_by_its_knob_values(tmp_path):
    """A template that gained candidates shifts indices: the stored knob values still name the config."""
    log = tmp_path / "log.jsonl"
    t = task(64)
    append_records(log, pairs(t, [(20, ok(1.0))]))
    moved = json.loads(log.read_text())
    moved["config"] = t.config(30).to_json()  # index 20 in the version that wrote it is index 30 today
    log.write_text(json.dumps(moved) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not stale: nothing to warn about
        (kept,) = task_records(load_records(log), t)
    assert kept.config_index == 30 and kept.config == t.config(30).to_json()
    sch, op = apply_best(log, t)
    expected, _ = t.instantiate(30)
    assert str(tt.lower(sch, list(op.args))) == str(tt.lower(expected, list(op.args)))


def test_best_records_one_per_workload_and_target_with_counts(tmp_path):
    log = tmp_path / "log.jsonl"
    a, b, a_other = task(32), task(64), task(32, OTHER)
    append_records(log, pairs(a, [(1, ok(3.0)), (2, ok(1.0)), (3, failed())]))
    append_records(log, pairs(b, [(4, failed()), (5, ok(2.0))]))
    append_records(log, pairs(a_other, [(6, ok(0.5))]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bests = best_records(log)
    assert [(x.task, x.record.config_index, x.n_records, x.n_ok) for x in bests] == [
        (a, 2, 3, 2), (b, 5, 2, 1), (a_other, 6, 1, 1)]
    assert bests[0].gflops == pytest.approx(a.flops / bests[0].record.cost / 1e9)


def test_best_records_errors_and_warnings(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not json\n")
    with pytest.warns(SkippedLineWarning), pytest.raises(LogError, match="holds no tuning records"):
        best_records(empty)
    failures = tmp_path / "failures.jsonl"
    append_records(failures, pairs(task(32), [(1, failed()), (2, failed(ErrorKind.RUN_TIMEOUT))]))
    with pytest.raises(LogError, match="has 2 records but none of a successful measurement"):
        best_records(failures)
    unknown = tmp_path / "unknown.jsonl"
    append_records(unknown, pairs(task(32), [(1, ok(1.0))]))
    line = json.loads(unknown.read_text())
    line["template"] = "matmul_from_the_future"
    line["workload"] = "[\"matmul_from_the_future\",[32,32,32]]"
    with open(unknown, "a") as f:
        f.write(json.dumps(line) + "\n")
    with pytest.warns(RecordWarning, match="skipping workload .*matmul_from_the_future"):
        (only,) = best_records(unknown)
    assert only.task == task(32)


def test_top_records_are_the_fastest_successful_ones_one_per_config(tmp_path):
    task = Task(matmul_template, (16, 16, 16), Target.host())
    valid = [i for i in range(len(task.space)) if task.space.is_valid(i)][:4]
    ok = lambda s: MeasureResult((s,), ErrorKind.NONE, "", 0.1)
    pairs = [(MeasureInput(task, valid[0]), ok(3e-6)), (MeasureInput(task, valid[1]), ok(1e-6)),
             (MeasureInput(task, valid[0]), ok(2e-6)),  # measured again: its faster record counts
             (MeasureInput(task, valid[2]), MeasureResult((), ErrorKind.RUNTIME_CRASH, "crash", 0.1)),
             (MeasureInput(task, valid[3]), ok(5e-6))]
    other = Task(matmul_template, (8, 8, 8), Target.host())
    pairs.append((MeasureInput(other, 0), ok(1e-9)))  # another workload
    log = tmp_path / "log.json"
    append_records(log, pairs)
    records = load_records(log)
    assert [(r.config_index, r.cost) for r in top_records(records, task, 2)] == [(valid[1], 1e-6),
                                                                                    (valid[0], 2e-6)]
    assert [r.config_index for r in top_records(records, task, 10)] == [valid[1], valid[0], valid[3]]
    with pytest.raises(ValueError, match="k must be at least 1"):
        top_records(records, task, 0)

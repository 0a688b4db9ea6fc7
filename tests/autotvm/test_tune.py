"""Tests of the tuning loop (with fake measurements): logging, resume, crash safety, stopping, progress."""
from __future__ import annotations

import io
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import pytest

from tensortune.autotvm import progress as progress_mod
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.progress import (Backend, PlainProgress, ProgressDisplay, available_backend,
                                         progress_display)
from tensortune.autotvm.record import RecordWarning, append_records, load_records
from tensortune.autotvm.task import Task
from tensortune.autotvm.templates import matmul_template
from tensortune.autotvm.tune import TuneError, tune
from tensortune.autotvm.tuner import GATuner, GridTuner, RandomTuner
from tensortune.target import ISA, Target

TASK = Task(matmul_template, (64, 64, 64), Target.host())  # 88200 configs
TINY = Task(matmul_template, (2, 2, 2), Target.host())


def gflops_of(index: int) -> float:
    return 1.0 + (index * 7919) % 1000 / 10.0


class FakeMeasure:
    """Known GFLOP/s per config; configs in ``crash`` fail with RUNTIME_CRASH. Remembers every call."""

    def __init__(self, task: Task = TASK, crash=lambda i: False, gflops=gflops_of):
        self.task, self.crash, self.gflops = task, crash, gflops
        self.calls: list[list[int]] = []

    @property
    def measured(self) -> list[int]:
        return [i for call in self.calls for i in call]

    def __call__(self, inputs: list[MeasureInput]) -> list[MeasureResult]:
        self.calls.append([inp.config_index for inp in inputs])
        out = []
        for inp in inputs:
            i = inp.config_index
            if self.crash(i):
                out.append(MeasureResult((), ErrorKind.RUNTIME_CRASH, f"config {i}: worker killed by SIGSEGV", 0.2))
            else:
                cost = self.task.flops / (self.gflops(i) * 1e9)
                out.append(MeasureResult((cost, cost), ErrorKind.NONE, "", 0.1))
        return out


@pytest.mark.parametrize("tuner", ["random", "grid", "ga"])
def test_tune_measures_n_trial_configs_and_logs_each(tmp_path, tuner):
    log = tmp_path / "log.jsonl"
    fake = FakeMeasure()
    result = tune(TASK, 40, tuner=tuner, batch_size=16, measure=fake, log_file=log, progress=False, seed=0)
    assert [len(c) for c in fake.calls] == [16, 16, 8]
    recs = load_records(log)
    assert [r.config_index for r in recs] == fake.measured
    assert len(set(fake.measured)) == 40
    assert all(r.ok and r.workload == TASK.workload_key and r.target == str(TASK.target) for r in recs)
    best = max(fake.measured, key=gflops_of)
    assert result.best_index == best and result.best_gflops == pytest.approx(gflops_of(best))
    assert result.best_config == TASK.config(best)
    assert [t.config_index for t in result.history] == fake.measured
    assert result.n_measured == 40 and "reached 40 trials" in result.stop_reason


def test_tune_without_a_log_and_with_a_tuner_instance():
    fake = FakeMeasure()
    tuner = GATuner(TASK, pop_size=8, elite_num=2, seed=5)
    result = tune(TASK, 20, tuner=tuner, batch_size=8, measure=fake, progress=False)
    assert len(fake.measured) == 20 and len(result.history) == 20
    assert tuner.visited == set(fake.measured)


def test_resume_counts_the_log_toward_n_trial_and_never_remeasures(tmp_path):
    log = tmp_path / "log.jsonl"
    first = FakeMeasure()
    tune(TASK, 20, tuner="random", measure=first, log_file=log, progress=False, seed=1)
    second = FakeMeasure()
    result = tune(TASK, 50, tuner="random", measure=second, log_file=log, progress=False, seed=1)
    assert len(second.measured) == 30
    assert set(first.measured).isdisjoint(second.measured)
    recs = load_records(log)
    assert len(recs) == 50 and len({r.config_index for r in recs}) == 50
    assert [t.resumed for t in result.history] == [True] * 20 + [False] * 30
    assert result.best_gflops == pytest.approx(max(gflops_of(r.config_index) for r in recs))
    # Asking again for 50 measures nothing.
    third = FakeMeasure()
    again = tune(TASK, 50, tuner="random", measure=third, log_file=log, progress=False)
    assert third.calls == [] and len(load_records(log)) == 50 and again.n_measured == 0


def test_resume_ignores_other_workloads_and_targets_in_the_log(tmp_path):
    log = tmp_path / "log.jsonl"
    other_target = Task(matmul_template, (64, 64, 64), Target(ISA.SCALAR, 1, "x86_64"))
    other_shape = Task(matmul_template, (32, 32, 32), Target.host())
    for t in (other_target, other_shape):
        append_records(log, [(MeasureInput(t, i), FakeMeasure(t)([MeasureInput(t, i)])[0]) for i in range(30)])
    fake = FakeMeasure()
    tune(TASK, 10, tuner="grid", measure=fake, log_file=log, progress=False)
    assert fake.measured == list(range(10))  # the other tasks' configs 0..29 do not count
    assert len(load_records(log)) == 70


_TUNE_SLOWLY = textwrap.dedent("""
    import sys, time
    from tensortune.autotvm.measure.result import ErrorKind, MeasureResult
    from tensortune.autotvm.task import Task
    from tensortune.autotvm.templates import matmul_template
    from tensortune.autotvm.tune import tune
    from tensortune.target import Target
    task = Task(matmul_template, (64, 64, 64), Target.host())
    def measure(inputs):
        time.sleep(0.02)
        return [MeasureResult((1e-3 * (1 + i.config_index % 13),), ErrorKind.NONE, "", 0.02) for i in inputs]
    tune(task, 100000, tuner="ga", batch_size=8, measure=measure, log_file=sys.argv[1], progress=False, seed=2)
""")


def test_a_tuning_run_killed_with_sigkill_can_be_resumed_without_remeasuring(tmp_path):
    log = tmp_path / "log.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", _TUNE_SLOWLY, str(log)])
    try:
        deadline = time.monotonic() + 30
        while (not log.exists() or log.read_bytes().count(b"\n") < 40) and time.monotonic() < deadline:
            assert proc.poll() is None, "the tuning process exited early"
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordWarning)  # a cut-short last line is allowed
        before = load_records(log)
    assert len(before) >= 40
    assert len({r.config_index for r in before}) == len(before)
    fake = FakeMeasure()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordWarning)
        result = tune(TASK, len(before) + 30, tuner="ga", batch_size=8, measure=fake, log_file=log,
                      progress=False, seed=2)
        after = load_records(log)
    assert len(fake.measured) == 30
    assert {r.config_index for r in before}.isdisjoint(fake.measured)
    assert len(after) == len(before) + 30 and len({r.config_index for r in after}) == len(after)
    assert result.n_measured == 30


def test_early_stopping_stops_after_that_many_trials_without_improvement(tmp_path):
    fake = FakeMeasure(gflops=lambda i: 5.0)  # the first trial is the best there will be
    result = tune(TASK, 500, tuner="random", batch_size=16, measure=fake, early_stopping=20, progress=False, seed=0)
    # Trial 1 sets the best; after the batch ending at trial 32, 31 trials brought nothing.
    assert len(fake.measured) == 32
    assert "no improvement" in result.stop_reason
    improving = FakeMeasure(gflops=lambda i: float(i + 1))
    result = tune(TASK, 64, tuner="grid", measure=improving, early_stopping=5, progress=False)
    assert len(improving.measured) == 64 and "reached" in result.stop_reason


def test_failed_candidates_are_logged_with_their_error_kind_and_tuning_goes_on(tmp_path):
    log = tmp_path / "log.jsonl"
    fake = FakeMeasure(crash=lambda i: i % 3 == 0)
    result = tune(TASK, 48, tuner="grid", batch_size=16, measure=fake, log_file=log, progress=False)
    recs = load_records(log)
    assert len(recs) == 48
    crashed = [r for r in recs if r.error_kind is ErrorKind.RUNTIME_CRASH]
    assert [r.config_index for r in crashed] == list(range(0, 48, 3))
    assert all(r.costs == () and "SIGSEGV" in r.error_msg for r in crashed)
    assert all(r.ok for r in recs if r.config_index % 3)
    assert [t.gflops for t in result.history if t.error_kind is ErrorKind.RUNTIME_CRASH] == [0.0] * 16
    assert result.best_index % 3 != 0


def test_all_failures_leave_no_best(tmp_path):
    result = tune(TASK, 20, tuner="random", measure=FakeMeasure(crash=lambda i: True), progress=False, seed=0)
    assert result.best_index is None and result.best_gflops == 0.0 and result.best_config is None
    assert len(result.history) == 20


def test_callbacks_are_called_after_each_batch():
    calls = []
    fake = FakeMeasure()

    def callback(tuner, inputs, results):
        assert set(i.config_index for i in inputs) <= tuner.visited
        calls.append((len(inputs), len(results)))

    tune(TASK, 40, tuner="random", measure=fake, callbacks=[callback, lambda *a: None], batch_size=16, progress=False, seed=0)
    assert calls == [(16, 16), (16, 16), (8, 8)]


def test_tuning_stops_when_the_space_is_exhausted(tmp_path):
    size = len(TINY.space)
    fake = FakeMeasure(TINY)
    result = tune(TINY, size + 100, tuner="ga", measure=fake, log_file=tmp_path / "log", progress=False, seed=0)
    assert sorted(fake.measured) == list(range(size))
    assert "exhausted" in result.stop_reason


def test_ctrl_c_keeps_finished_batches_in_the_log_and_reraises(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress_mod, "available_backend", lambda: Backend.PLAIN)
    log = tmp_path / "log.jsonl"
    fake = FakeMeasure()

    def measure(inputs):
        if len(fake.calls) == 2:
            raise KeyboardInterrupt
        return fake(inputs)

    with pytest.raises(KeyboardInterrupt):
        tune(TASK, 100, tuner="random", measure=measure, batch_size=8, log_file=log, progress=True, seed=0)
    assert [r.config_index for r in load_records(log)] == fake.measured and len(fake.measured) == 16
    err = capsys.readouterr().err
    assert "interrupted after 16 trials" in err and str(log) in err


def test_bad_arguments_raise_tune_errors():
    fake = FakeMeasure()
    with pytest.raises(TuneError, match="unknown tuner 'annealing'"):
        tune(TASK, 10, tuner="annealing", measure=fake, progress=False)
    with pytest.raises(TuneError, match="made for"):
        tune(TASK, 10, tuner=RandomTuner(TINY), measure=fake, progress=False)
    with pytest.raises(TuneError, match="batch_size"):
        tune(TASK, 10, tuner="random", batch_size=0, measure=fake, progress=False)
    with pytest.raises(TuneError, match="early_stopping"):
        tune(TASK, 10, tuner="random", early_stopping=0, measure=fake, progress=False)
    with pytest.raises(TuneError, match="one result per input"):
        tune(TASK, 10, tuner="random", measure=lambda inputs: fake(inputs)[:-1], progress=False)
    assert GridTuner(TASK).task is TASK


# --- progress --------------------------------------------------------------------------------------


def test_quiet_tuning_prints_nothing(capsys):
    tune(TASK, 20, tuner="random", measure=FakeMeasure(), progress=False, seed=0)
    assert capsys.readouterr() == ("", "")
    assert type(progress_display("x", 10, enabled=False)) is ProgressDisplay


def test_plain_progress_prints_periodic_lines_with_gflops_elapsed_and_eta():
    now = [0.0]
    out = io.StringIO()
    p = PlainProgress("matmul(64, 64, 64)", 100, initial=20, stream=out, interval=5.0, clock=lambda: now[0])
    now[0] = 2.0
    p.update(36, 10.0, 12.5)
    now[0] = 4.0
    p.update(52, 11.0, 13.0)  # within the interval: not printed
    now[0] = 8.0
    p.update(68, 9.0, 13.0)
    p.close("done")
    p.close("done")
    lines = out.getvalue().splitlines()
    assert lines == [
        "matmul(64, 64, 64): 36/100 trials | current 10.00 GFLOP/s | best 12.50 GFLOP/s"
        " | elapsed 0:00:02 | ETA 0:00:08",
        "matmul(64, 64, 64): 68/100 trials | current 9.00 GFLOP/s | best 13.00 GFLOP/s"
        " | elapsed 0:00:08 | ETA 0:00:05",
        "done",
    ]


def test_plain_progress_of_a_tuning_run_goes_to_stderr(monkeypatch, capsys):
    monkeypatch.setattr(progress_mod, "available_backend", lambda: Backend.PLAIN)
    result = tune(TASK, 32, tuner="random", measure=FakeMeasure(), progress=True, seed=0)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "matmul(64, 64, 64): 32/32 trials" in captured.err
    assert f"best {result.best_gflops:.2f} GFLOP/s" in captured.err


def test_the_backend_falls_back_to_plain_lines_without_rich_or_tqdm(monkeypatch):
    monkeypatch.setattr(progress_mod.importlib.util, "find_spec", lambda name: None)
    assert available_backend() is Backend.PLAIN
    assert isinstance(progress_display("x", 10, stream=io.StringIO()), PlainProgress)


@pytest.mark.parametrize("backend, module", [(Backend.TQDM, "tqdm"), (Backend.RICH, "rich")])
def test_optional_progress_backends_run_when_installed(backend, module):
    pytest.importorskip(module)
    out = io.StringIO()
    with progress_display("matmul(64, 64, 64) [emulated]", 10, initial=2, backend=backend, stream=out) as p:
        p.update(6, 1.5, 2.5, note="[2 failed]")
        p.update(10, 1.0, 2.5)
        p.close("finished")
    assert "finished" in out.getvalue()
    assert "[emulated]" in out.getvalue()  # text, not rich markup

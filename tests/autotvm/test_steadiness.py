"""The speed probe and the slow-spell guard of the runner: timings taken while the machine runs slow are retaken."""
from __future__ import annotations

import dataclasses

import pytest

import tensortune.autotvm.measure.runner as runner
from tensortune.autotvm.measure import BuildOptions, ErrorKind, LocalBuilder, MeasureInput, RunOptions
from tensortune.autotvm.measure.steadiness import SlowSpellGuard, SpeedProbe, time_steadily
from tensortune.autotvm.task import Task
from tensortune.autotvm.templates.matmul import matmul_template
from tensortune.target import Target


def scripted(values):
    it = iter(values)
    return lambda: next(it)


def test_a_steady_timing_is_taken_once():
    timings = iter(["first", "second"])
    result, slow, attempts = time_steadily(lambda: next(timings), scripted([1.0, 1.1]), retries=2, pause_s=0)
    assert (result, slow, attempts) == ("first", 1.1, 1)


def test_a_timing_in_a_slow_spell_is_taken_again_once_the_machine_is_steady():
    timings = iter(["in the spell", "steady", "never"])
    # the probe after the first timing says 1.8x: the spell may have started during it
    result, slow, attempts = time_steadily(lambda: next(timings), scripted([1.0, 1.8, 1.05, 1.0]), pause_s=0)
    assert (result, slow, attempts) == ("steady", 1.05, 2)


def test_without_a_steady_attempt_the_steadiest_is_kept():
    timings = iter(["a", "b", "c", "d"])
    result, slow, attempts = time_steadily(lambda: next(timings), scripted([2.0, 1.9, 1.3, 1.6, 1.4, 1.2]),
                                           retries=2, pause_s=0)
    # each attempt counts at the worse of its two probes: 2.0, 1.6 and 1.4; the last is the steadiest
    assert (result, slow, attempts) == ("c", 1.4, 3)


def test_retries_zero_times_once_whatever_the_probe_says():
    result, slow, attempts = time_steadily(lambda: "only", scripted([3.0, 3.0]), retries=0, pause_s=0)
    assert (result, slow, attempts) == ("only", 3.0, 1)


def test_the_pauses_between_attempts_double(monkeypatch):
    import tensortune.autotvm.measure.steadiness as steadiness

    pauses = []
    monkeypatch.setattr(steadiness.time, "sleep", pauses.append)
    time_steadily(lambda: None, lambda: 2.0, retries=3, pause_s=0.25)
    assert pauses == [0.25, 0.5, 1.0]


def test_the_guard_stops_waiting_when_the_machine_stays_busy_and_waits_again_once_it_is_steady():
    class Probe:
        slowdown = staticmethod(scripted([2.0] * 2 * 3 + [2.0] * 2 + [1.0] * 2 * 2))

    guard = SlowSpellGuard(Probe(), retries=2, pause_s=0, give_up_after=1, reuse_s=0.0)
    calls = []
    result, note = guard.time(lambda: calls.append(1) or "busy 1")  # 3 attempts, all slow
    assert len(calls) == 3 and note.endswith("(speed probe; 3 attempts)") and "2.00x" in note
    result, note = guard.time(lambda: calls.append(2) or "busy 2")  # busy for good: timed once, noted
    assert calls.count(2) == 1 and "busy for 1 candidates: timed once" in note
    result, note = guard.time(lambda: calls.append(3) or "steady")  # still timed once, but steady: reset
    assert calls.count(3) == 1 and (result, note) == ("steady", "") and guard.unsteady_in_a_row == 0
    result, note = guard.time(lambda: "steady again")
    assert note == ""


def test_the_speed_probe_reports_its_time_over_the_fastest_it_has_seen(monkeypatch):
    probe = SpeedProbe(threads=1, probe_ms=0.2)
    assert probe.fastest > 0 and probe.slowdown() >= 1.0
    probe.fastest = 1.0
    monkeypatch.setattr(probe, "_time", scripted([1.5, 0.5, 1.6, 0.9]))
    assert probe.slowdown() == 1.5
    assert probe.slowdown() == 1.0 and probe.fastest == 0.5  # a faster time becomes the reference
    probe.calls = 2
    assert probe.slowdown() == pytest.approx(1.8)  # the faster of its two calls: one late wake-up is no spell


def test_run_options_reject_a_negative_retry_count_or_tolerance():
    with pytest.raises(ValueError, match="slow_spell_retries"):
        RunOptions(slow_spell_retries=-1)
    with pytest.raises(ValueError, match="slow_spell_tolerance"):
        RunOptions(slow_spell_tolerance=0.0)


class _Probe:
    def __init__(self, values):
        self.slowdown = scripted(values)


def _guard(values):
    return SlowSpellGuard(_Probe(values), retries=2, pause_s=0)


class _Conn:
    def send(self, message):
        pass


@pytest.fixture(scope="module")
def built():
    task = Task(matmul_template, (32, 32, 32), Target.host())
    index = next(i for i in range(len(task.space)) if task.space.is_valid(i))
    inp = MeasureInput(task, index)
    with LocalBuilder(BuildOptions(n_parallel=1)) as builder:
        (build,) = builder.build([inp])
    assert build.ok
    return inp, build


@pytest.mark.parametrize("probe, attempts, note", [
    ([1.0, 1.0], 1, ""),
    ([1.0, 1.9, 1.0, 1.0], 2, ""),
    ([1.9, 1.9, 1.7, 1.8, 1.6, 1.6], 3, "timed while the machine ran 1.60x slower than its fastest (speed probe; 3"),
])
def test_the_runner_retimes_a_candidate_timed_in_a_slow_spell_and_notes_one_never_steady(built, monkeypatch, probe,
                                                                                          attempts, note):
    inp, build = built
    options = RunOptions(number=1, repeat=2, min_repeat_ms=0.0, num_threads=1, slow_spell_retries=2)
    timed = []
    real = runner._time
    monkeypatch.setattr(runner, "_time", lambda *a: timed.append(1) or real(*a))
    monkeypatch.setitem(runner._GUARDS, (1, 2, options.slow_spell_tolerance), _guard(probe))
    costs, kind, msg = runner._measure(inp, build, options, {}, _Conn())
    assert kind is ErrorKind.NONE and len(costs) == 2 and min(costs) > 0
    assert len(timed) == attempts and msg.startswith(note)


def test_the_runner_has_no_guard_when_it_is_turned_off(built):
    inp, build = built
    module = build.library.load(1)
    try:
        assert runner._guard(inp.task, module, RunOptions(slow_spell_retries=0)) is None
        guard = runner._guard(inp.task, module, RunOptions())
        assert isinstance(guard.probe, SpeedProbe) and guard.probe.threads == 1
        other = runner._guard(inp.task, module, RunOptions(slow_spell_retries=1))
        assert other is not guard and other.probe is guard.probe  # one probe per thread count
    finally:
        module.close()


def test_a_probe_just_taken_serves_as_the_next_candidates_before_probe():
    probes = []

    class Probe:
        def slowdown(self):
            probes.append(1)
            return 1.0

    guard = SlowSpellGuard(Probe(), reuse_s=60.0)
    guard.time(lambda: None)
    guard.time(lambda: None)
    assert len(probes) == 3  # before and after the first; only after the second
    guard.reuse_s = 0.0
    guard.time(lambda: None)
    assert len(probes) == 5

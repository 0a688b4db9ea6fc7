"""The network task scheduler, on fake measurements (no hardware): who gets the trials, and resuming."""
from __future__ import annotations

import contextlib
import math
import threading
from collections import Counter

import pytest

from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import load_records
from tensortune.autotvm.scheduler import Strategy, TaskScheduler, WeightedTask, tune_network
from tensortune.autotvm.turns import Turns, run_in_turns
from tensortune.autotvm.task import Task
from tensortune.autotvm.templates import TEMPLATES
from tensortune.autotvm.templates.matmul import matmul_template
from tensortune.autotvm.tune import TuneError
from tensortune.operators.conv_tasks import default_task
from tensortune.target import Target

AVX2 = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
FLAT = Task(matmul_template, (64, 64, 64), AVX2)  # every config as fast as the next: no headroom
STEEP = Task(matmul_template, (96, 64, 64), AVX2)  # a single sharp peak: each round may still find better
STEEP2 = Task(matmul_template, (128, 64, 64), AVX2)
LAYER = (1, 16, 8, 8, 16, 3, 1, 1)  # a 3x3, stride-1 convolution: two alternatives
DIRECT = Task(TEMPLATES["conv2d_nchwc_packed"], LAYER, AVX2)
WINOGRAD = Task(TEMPLATES["conv2d_winograd_nchwc_packed"], LAYER, AVX2)


def landscape(task: Task, index: int) -> float:
    """Fake GFLOP/s of a config: flat tasks all 50; steep tasks 10 to 100 depending on the index (Winograd: 3 times
    as fast)."""
    if task is FLAT:
        return 50.0
    return (3.0 if task is WINOGRAD else 1.0) * (10.0 + 90.0 * ((index * 2654435761) % 1000 / 999.0) ** 8)


class FakeMeasure:
    """Records every (task, config) measured; timings from the landscape."""

    def __init__(self):
        self.calls: Counter = Counter()

    def __call__(self, inputs):
        out = []
        for inp in inputs:
            self.calls[(inp.task.workload_key, inp.config_index)] += 1
            g = landscape(inp.task, inp.config_index)
            out.append(MeasureResult((inp.task.flops / (g * 1e9),), ErrorKind.NONE, "", 0.0))
        return out


def per_task(measure: FakeMeasure) -> Counter:
    return Counter(key for key, _ in measure.calls.elements())


def test_the_task_with_more_headroom_gets_more_trials():
    measure = FakeMeasure()
    result = tune_network([FLAT, STEEP], 256, tuner="random", round_size=16, measure=measure, seed=0, progress=False)
    trials = dict(zip([t.task.workload_key for t in result.tasks], result.trials))
    assert sum(trials.values()) == 256
    assert trials[STEEP.workload_key] > 1.5 * trials[FLAT.workload_key]
    assert trials[FLAT.workload_key] >= 16  # but every task had its first round
    assert per_task(measure) == Counter(trials)


def test_a_task_that_runs_more_often_gets_more_trials():
    measure = FakeMeasure()
    result = tune_network([WeightedTask(STEEP, 1), WeightedTask(STEEP2, 12)], 320, tuner="random", round_size=16,
                          measure=measure, seed=1, progress=False)
    light, heavy = result.trials
    assert heavy > light and light >= 16
    assert result.estimated_latency == pytest.approx(sum(w.weight * lat for w, lat in zip(result.tasks,
                                                                                        result.best_latency)))


def _three_layers() -> list[WeightedTask]:
    """Three layers and their untuned kernels (measured first; all 10 GFLOP/s on the fake landscape): weight x
    latency of 72, 54 and 1 units."""
    layers = [((1, 16, 8, 8, 64, 3, 1, 1), 2), ((1, 16, 8, 8, 32, 3, 1, 1), 3), ((1, 16, 8, 8, 16, 1, 1, 0), 1)]
    direct = [WeightedTask(Task(TEMPLATES["conv2d_nchwc_packed"], args, AVX2), w, str(args)) for args, w in layers]
    return [WeightedTask(default_task(t.task), t.weight, t.group) for t in direct] + direct


def test_first_rounds_are_sized_by_the_layers_share_of_the_untuned_network():
    """Weight x latency of the untuned kernels is 72, 54 and 1 units: the first rounds take 16, 12 and (at least
    half a round) 8 trials; the equal split takes 16 each."""
    tasks = _three_layers()
    result = tune_network(tasks, 3 + 16 + 12 + 8, tuner="random", round_size=16, measure=FakeMeasure(), seed=0,
                          progress=False)
    assert result.trials == [1, 1, 1, 16, 12, 8]
    even = tune_network(tasks, 3 + 48, tuner="random", round_size=16, measure=FakeMeasure(), seed=0,
                        strategy=Strategy.ROUND_ROBIN, progress=False)
    assert even.trials == [1, 1, 1, 16, 16, 16]


def test_a_resumed_run_sizes_first_rounds_by_the_untuned_kernels_not_the_best_so_far(tmp_path):
    """Killed after the first layer's first round, the rerun sizes the other first rounds as an uninterrupted run
    does: by each layer's untuned kernel (its first success in the log), not by the best the first layer has
    found since (which would make the second layer the largest and give it a full round)."""
    tasks, log = _three_layers(), tmp_path / "net.jsonl"
    tune_network(tasks, 3 + 16, tuner="random", round_size=16, measure=FakeMeasure(), log_file=log, seed=0,
                 progress=False)
    scheduler = TaskScheduler(tasks, 3 + 16 + 12 + 8, tuner="random", round_size=16, measure=FakeMeasure(),
                              log_file=log, seed=0, progress=False)
    assert scheduler.run().trials == [1, 1, 1, 16, 12, 8]
    fresh = TaskScheduler(tasks, 3 + 1, tuner="random", measure=FakeMeasure(), seed=0, progress=False)
    fresh.run()
    assert scheduler._first_latency == pytest.approx(fresh._first_latency)


def test_round_robin_splits_the_budget_evenly():
    result = tune_network([FLAT, STEEP, STEEP2], 96, tuner="random", round_size=16, measure=FakeMeasure(),
                          strategy=Strategy.ROUND_ROBIN, seed=0, progress=False)
    assert result.trials == [32, 32, 32]


def test_the_scheduler_beats_round_robin_on_the_estimated_latency():
    tasks = [WeightedTask(FLAT, 1), WeightedTask(STEEP, 4), WeightedTask(STEEP2, 4)]
    gains = []
    for seed in range(3):
        latency = {}
        for strategy in Strategy:
            r = tune_network(tasks, 192, tuner="random", round_size=16, measure=FakeMeasure(), strategy=strategy,
                             seed=seed, progress=False)
            latency[strategy] = r.estimated_latency
        gains.append(latency[Strategy.ROUND_ROBIN] / latency[Strategy.GRADIENT])
    assert sum(gains) / len(gains) > 1.0 and min(gains) > 0.95


def test_the_curve_of_estimated_latency_falls(tmp_path):
    result = tune_network([FLAT, STEEP], 128, tuner="random", round_size=16, measure=FakeMeasure(), seed=2,
                          progress=False)
    totals = [c[0] for c in result.curve]
    estimates = [c[2] for c in result.curve if math.isfinite(c[2])]
    assert totals == sorted(totals) and totals[-1] == 128
    assert all(b <= a for a, b in zip(estimates, estimates[1:]))  # best latencies only improve


def test_a_killed_run_resumes_without_measuring_anything_twice(tmp_path):
    log = tmp_path / "net.jsonl"
    first = FakeMeasure()
    tune_network([FLAT, STEEP], 80, tuner="random", round_size=16, measure=first, log_file=log, seed=3,
                 progress=False)  # as if killed after 80 trials: the log holds them
    assert len(load_records(log)) == 80
    second = FakeMeasure()
    result = tune_network([FLAT, STEEP], 160, tuner="random", round_size=16, measure=second, log_file=log, seed=4,
                          progress=False)
    assert sum(result.trials) == 160 and sum(second.calls.values()) == 80  # only the remaining budget
    assert not set(first.calls) & set(second.calls)  # nothing measured twice
    assert len(load_records(log)) == 160


def _global_models(scheduler: TaskScheduler, monkeypatch) -> list:
    """Each task's global model at the end of ``scheduler.run()`` (the tuners are closed, not dropped)."""
    seen = []
    original = TaskScheduler._refresh_history

    def spy(self, state, states):
        original(self, state, states)
        seen.append((state.item.task, state.tuner.global_model))
    monkeypatch.setattr(TaskScheduler, "_refresh_history", spy)
    result = scheduler.run()
    assert sum(result.trials) == 96 and all(i is not None for i in result.best_index)
    return [dict(seen)[t] for t in (s.task for s in scheduler.items)]


@pytest.mark.slow
@pytest.mark.parametrize("why", ["no model shipped", "pretrained=False"])
def test_model_based_tuners_learn_from_the_other_tasks_without_a_shipped_model(tmp_path, monkeypatch, why):
    from tensortune.autotvm.pretrained import pretrained_model
    from tensortune.autotvm.tuner import xgb

    shipped = pretrained_model(AVX2)
    assert shipped is not None  # (so that "is not shipped" below says something)
    if why == "no model shipped":
        monkeypatch.setattr(xgb, "pretrained_model", lambda target: None)  # an ISA with no shipped model
    scheduler = TaskScheduler([STEEP, STEEP2], 96, tuner="xgb", round_size=16, measure=FakeMeasure(),
                              log_file=tmp_path / "net.jsonl", seed=0, progress=False,
                              pretrained=why == "no model shipped")
    first, second = _global_models(scheduler, monkeypatch)
    assert second is not None and second is not shipped  # learned from the first task's records
    assert first is not None and first is not shipped  # and the first from the second's, once it had some


@pytest.mark.slow
def test_a_shipped_model_is_kept_rather_than_one_learned_from_the_other_tasks(tmp_path, monkeypatch):
    from tensortune.autotvm.pretrained import pretrained_model

    shipped = pretrained_model(AVX2)
    assert shipped is not None
    scheduler = TaskScheduler([STEEP, STEEP2], 96, tuner="xgb", round_size=16, measure=FakeMeasure(),
                              log_file=tmp_path / "net.jsonl", seed=0, progress=False)
    assert _global_models(scheduler, monkeypatch) == [shipped, shipped]
    # given a history of earlier logs, the tuners learn from it and from the other tasks' records
    history = load_records(tmp_path / "net.jsonl")
    again = TaskScheduler([STEEP, FLAT], 96, tuner="xgb", round_size=16, measure=FakeMeasure(),
                          log_file=tmp_path / "other.jsonl", seed=0, progress=False, history=history)
    assert all(m is not None and m is not shipped for m in _global_models(again, monkeypatch))


def test_alternatives_of_a_layer_count_once_and_the_faster_one_gets_more_trials():
    """Over ten seeds (one run's split of 16 rounds depends on which peaks its random tuner happens to draw):
    in every grouped run the faster alternative (Winograd, 3 times as fast) gets more trials than the slower,
    which still has its first round; and grouping moves trials off the slower alternative (about 40% fewer in
    total than when the two count as separate layers, where the slower one's larger latency attracts trials)."""
    def tune(group, seed):
        tasks = [WeightedTask(DIRECT, 2, group), WeightedTask(WINOGRAD, 2, group), WeightedTask(STEEP, 1)]
        return tune_network(tasks, 256, tuner="random", round_size=16, measure=FakeMeasure(), seed=seed,
                            progress=False)

    grouped_direct = apart_direct = 0
    for seed in range(10):
        grouped, apart = tune("C", seed), tune(None, seed)
        direct, winograd, steep = grouped.best_latency
        assert grouped.estimated_latency == pytest.approx(2 * min(direct, winograd) + steep)
        assert apart.estimated_latency == pytest.approx(sum(w.weight * lat for w, lat in zip(apart.tasks,
                                                                                               apart.best_latency)))
        assert grouped.curve[-1][2] == pytest.approx(grouped.estimated_latency)
        direct_trials, winograd_trials, _ = grouped.trials
        assert winograd_trials > direct_trials >= 16, (seed, grouped.trials)
        grouped_direct, apart_direct = grouped_direct + direct_trials, apart_direct + apart.trials[0]
    assert grouped_direct < 0.75 * apart_direct


def test_a_slower_alternative_counts_only_the_decrease_that_would_take_it_below_its_group_best():
    scheduler = TaskScheduler([WeightedTask(DIRECT, 2, "C"), WeightedTask(WINOGRAD, 2, "C")], 64, tuner="random",
                              measure=FakeMeasure(), round_size=16, alpha=0.2, progress=False)
    with contextlib.ExitStack() as stack:
        state = scheduler._open(0, stack)
        for n in (16, 32):
            inputs = [MeasureInput(DIRECT, i) for i in range(state.run.done, n)]
            state.run.record(inputs, FakeMeasure()(inputs))
            state.curve.append((state.run.done, state.latency))
            latency = state.latency
            forward = latency / n * 0.5 ** state.stale_rounds
            alone = scheduler.gradient(state)
            assert alone >= 2 * 0.8 * forward  # weight 2, its forward estimate (and a backward one)
            assert scheduler.gradient(state, latency) == pytest.approx(alone)  # the best of its group
            assert scheduler.gradient(state, math.inf) == pytest.approx(alone)  # its group's only success
            best = latency / 1.5  # its group's best: 1.5 times as fast
            reach = max(0.0, forward - (latency - best) / 16)
            assert scheduler.gradient(state, best) == pytest.approx(2 * 0.8 * reach / 1.5 ** 2)
        # after 32 trials a round's optimistic decrease (16 x latency / 32) cannot take it below a best 2x faster
        assert scheduler.gradient(state, state.latency / 2) == 0.0


def test_an_alternative_twice_as_slow_gets_at_most_two_rounds():
    """Winograd 3x as fast as direct on the fake landscape: the direct alternative stops at its second round at the
    latest, however many trials are left; the faster one and a separate layer (STEEP) share the rest."""
    for seed in range(5):
        tasks = [WeightedTask(DIRECT, 2, "C"), WeightedTask(WINOGRAD, 2, "C"), WeightedTask(STEEP, 1)]
        result = tune_network(tasks, 400, tuner="random", round_size=16, measure=FakeMeasure(), seed=seed,
                              epsilon=0.0, progress=False)
        direct, winograd, steep = result.trials
        assert 16 <= direct <= 32 and winograd >= 48 and steep >= 48, (seed, result.trials)


def test_bad_arguments_are_tune_errors():
    with pytest.raises(TuneError, match="no tasks"):
        TaskScheduler([], 10)
    with pytest.raises(TuneError, match="listed twice"):
        TaskScheduler([FLAT, FLAT], 10)
    with pytest.raises(TuneError, match="weight"):
        WeightedTask(FLAT, 0)
    with pytest.raises(TuneError, match="same weight"):
        TaskScheduler([WeightedTask(DIRECT, 1, "C"), WeightedTask(WINOGRAD, 2, "C")], 10)


def test_schedulers_in_turns_share_the_time_and_find_what_they_find_alone():
    order: list[str] = []  # whose turn, turn by turn (the opening of the tasks and the last check included)
    options = dict(tuner="random", round_size=16, seed=5, progress=False)
    strategies = {"gradient": 160, "round-robin": 96}  # one stops first: the other then runs on alone
    cost = {"turns-gradient": 1.0, "turns-round-robin": 2.0}  # a round-robin turn takes twice as long
    now = [0.0]

    def clock():  # called at the start and the end of each turn, in the thread whose turn it is
        now[0] += cost[threading.current_thread().name]  # so a turn lasts its cost
        return now[0]

    def job(strategy, trials):
        @contextlib.contextmanager
        def logged(turn):
            with turn():
                order.append(strategy)
                yield

        return lambda turn: tune_network([FLAT, STEEP, STEEP2], trials, measure=measure[strategy], strategy=strategy,
                                         turn=lambda: logged(turn), **options)

    measure = {s: FakeMeasure() for s in strategies}
    results, turns = run_in_turns({s: job(s, n) for s, n in strategies.items()}, clock)
    # Each turn went to the run with the least time so far (the first on a tie) until one of them finished.
    spent = {"gradient": 0.0, "round-robin": 0.0}
    last = {n: len(order) - 1 - order[::-1].index(n) for n in strategies}
    for name in order[:min(last.values()) + 1]:
        assert name == min(spent, key=lambda n: (spent[n], n != "gradient")), ("".join(o[0] for o in order), spent)
        spent[name] += cost["turns-" + name]
    assert len(set(order[min(last.values()) + 1:])) == 1 and min(last.values()) > 10
    assert turns.seconds == {n: order.count(n) * cost["turns-" + n] for n in strategies}
    for strategy, trials in strategies.items():
        alone = FakeMeasure()
        expected = tune_network([FLAT, STEEP, STEEP2], trials, measure=alone, strategy=strategy, **options)
        assert measure[strategy].calls == alone.calls
        assert results[strategy].trials == expected.trials
        assert results[strategy].best_latency == expected.best_latency


def test_a_failing_run_in_turns_raises_once_the_others_have_finished():
    finished = []

    def fails(turn):
        with turn():
            raise RuntimeError("boom")

    def works(turn):
        for _ in range(3):
            with turn():
                pass
        finished.append(True)
        return 7

    with pytest.raises(RuntimeError, match="boom"):
        run_in_turns({"fails": fails, "works": works})
    assert finished == [True]
    with pytest.raises(TuneError, match="distinct names"):
        Turns(["a", "a"])
    turns = Turns(["a", "b"])
    turns.finish("a")
    with pytest.raises(TuneError, match="not taking turns"):
        with turns.turn("a"):
            pass

"""Tests of the tuners against fake measurements whose GFLOP/s is a known function of the knob choices."""
from __future__ import annotations

import math
import statistics
from typing import Callable

import pytest

from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import Record
from tensortune.autotvm.task import Task, template
from tensortune.autotvm.templates import matmul_template
from tensortune.autotvm.tuner import GATuner, GridTuner, RandomTuner, Tuner
from tensortune.ops import matmul
from tensortune.target import Target
from tensortune.schedule import create_schedule

TUNERS: list[type[Tuner]] = [RandomTuner, GridTuner, GATuner]


@template("tiny_test")
def tiny_template(cfg, n: int):
    """12 configs of which (a=2, b=3) is filtered out: 11 valid."""
    cfg.define_knob("a", [1, 2, 3])
    cfg.define_knob("b", [1, 2, 3, 4])
    cfg.add_filter(lambda c: not (c["a"] == 2 and c["b"] == 3))
    op = matmul(n, n, n)
    return create_schedule(op.output), op


TINY = Task(tiny_template, (8,), Target.host())
TINY_VALID = [i for i in range(len(TINY.space)) if TINY.space.is_valid(i)]
AVX2 = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")  # fixed: spaces depend on the target's registers
BIG = Task(matmul_template, (256, 256, 256), AVX2)  # 464940 configs
SMALL = Task(matmul_template, (8, 8, 8), AVX2)  # 12960 configs


def peaked(task: Task, optimum: tuple[int, ...]) -> Callable[[int], float]:
    """GFLOP/s of a config: 100 at ``optimum``, decaying with the (normalised) distance of each knob choice."""
    space = task.space
    assert len(optimum) == len(space.dims)

    def gflops(index: int) -> float:
        c = space.index_to_choices(index)
        return 100.0 * math.exp(-3.0 * sum(abs(x - o) / (d - 1) for x, o, d in zip(c, optimum, space.dims)))

    return gflops


def fake_measure(task: Task, gflops: Callable[[int], float], crash: Callable[[int], bool] = lambda i: False):
    def measure(inputs: list[MeasureInput]) -> list[MeasureResult]:
        out = []
        for inp in inputs:
            if crash(inp.config_index):
                out.append(MeasureResult((), ErrorKind.RUNTIME_CRASH, "worker died", 0.1))
            else:
                out.append(MeasureResult((task.flops / (gflops(inp.config_index) * 1e9),), ErrorKind.NONE, "", 0.1))
        return out

    return measure


def step(tuner: Tuner, measure, batch_size: int) -> list[int]:
    batch = tuner.next_batch(batch_size)
    inputs = [MeasureInput(tuner.task, i) for i in batch]
    tuner.update(inputs, measure(inputs))
    return batch


# --- proposals -----------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", TUNERS)
@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_a_tiny_space_is_covered_exactly_once_then_exhausted(cls, batch_size):
    tuner = cls(TINY, seed=0)
    measure = fake_measure(TINY, lambda i: 1.0 + i)
    proposed: list[int] = []
    while tuner.has_next():
        batch = step(tuner, measure, batch_size)
        assert batch, "has_next was true but no config came"
        assert len(batch) <= batch_size
        proposed += batch
    assert sorted(proposed) == TINY_VALID
    assert len(proposed) == len(set(proposed))
    assert tuner.next_batch(batch_size) == []
    assert tuner.best_index == max(TINY_VALID)


def test_the_grid_tuner_goes_in_index_order():
    tuner = GridTuner(TINY)
    batches = [tuner.next_batch(4) for _ in range(4)]
    assert batches == [TINY_VALID[:4], TINY_VALID[4:8], TINY_VALID[8:], []]
    assert not tuner.has_next()


@pytest.mark.parametrize("cls", TUNERS)
def test_proposals_in_a_large_space_are_valid_new_and_in_range(cls):
    gflops = peaked(BIG, (23, 31, 5, 1, 2, 0))
    measure = fake_measure(BIG, gflops, crash=lambda i: i % 5 == 0)
    tuner = cls(BIG, seed=1)
    seen: set[int] = set()
    for _ in range(40):
        batch = step(tuner, measure, 16)
        assert len(batch) == 16
        assert all(0 <= i < len(BIG.space) for i in batch)
        assert seen.isdisjoint(batch)
        seen.update(batch)
    assert tuner.has_next()


@pytest.mark.parametrize("cls", [RandomTuner, GATuner])
def test_tuners_are_deterministic_given_a_seed(cls):
    measure = fake_measure(BIG, peaked(BIG, (23, 31, 5, 1, 2, 0)))

    def run(seed):
        tuner = cls(BIG, seed=seed)
        return [step(tuner, measure, 16) for _ in range(10)]

    assert run(3) == run(3)
    assert run(3) != run(4)


@pytest.mark.parametrize("cls", TUNERS)
def test_history_loaded_from_a_log_is_never_proposed_again(cls):
    measure = fake_measure(TINY, lambda i: 1.0 + i)
    old = TINY_VALID[::2]
    records = [Record.from_measurement(i, r) for i, r in zip(*_measured(TINY, old, measure))]
    other = Task(tiny_template, (16,), Target.host())
    records += [Record.from_measurement(i, r) for i, r in zip(*_measured(other, [1, 3], measure))]
    tuner = cls(TINY, seed=0)
    assert tuner.load_history(records) == len(old)
    assert tuner.best_index == max(old)
    proposed = []
    while tuner.has_next():
        proposed += step(tuner, measure, 4)
    assert sorted(proposed) == sorted(set(TINY_VALID) - set(old))


def _measured(task: Task, indices: list[int], measure):
    inputs = [MeasureInput(task, i) for i in indices]
    return inputs, measure(inputs)


def test_ga_rejects_bad_parameters():
    with pytest.raises(ValueError, match="pop_size"):
        GATuner(TINY, pop_size=1)
    with pytest.raises(ValueError, match="elite_num"):
        GATuner(TINY, pop_size=4, elite_num=5)
    with pytest.raises(ValueError, match="mutation_prob"):
        GATuner(TINY, mutation_prob=1.5)
    with pytest.raises(ValueError, match="batch_size"):
        RandomTuner(TINY).next_batch(0)


# --- search quality ------------------------------------------------------------------------------


def best_after(tuner: Tuner, gflops: Callable[[int], float], budget: int, crash=lambda i: False) -> float:
    measure = fake_measure(tuner.task, gflops, crash)
    n = 0
    while n < budget:
        n += len(step(tuner, measure, 16))
    return tuner.best_flops / 1e9


def test_ga_gets_closer_to_the_optimum_of_a_large_space_than_random_search():
    optimum = (49, 29, 5, 1, 2, 0)
    assert BIG.space.is_valid(BIG.space.choices_to_index(optimum))
    gflops = peaked(BIG, optimum)
    crash = lambda i: BIG.space.index_to_choices(i)[2] == 0  # noqa: E731  a knob value that always crashes
    seeds = range(4)
    ga = [best_after(GATuner(BIG, seed=s), gflops, 256, crash) for s in seeds]
    rnd = [best_after(RandomTuner(BIG, seed=s), gflops, 256, crash) for s in seeds]
    # 256 random draws from 464940 configs land far from the single peak; the GA climbs towards it.
    assert statistics.mean(ga) > 1.5 * statistics.mean(rnd)
    assert min(ga) > max(rnd)
    assert statistics.mean(ga) > 60.0


def trials_to_find(tuner: Tuner, gflops: Callable[[int], float], optimum_index: int) -> int:
    measure = fake_measure(tuner.task, gflops)
    n = 0
    while tuner.has_next():
        n += len(step(tuner, measure, 16))
        if tuner.best_index == optimum_index:
            return n
    raise AssertionError("the space was exhausted without finding the optimum")


def test_each_tuner_finds_the_known_optimum_of_a_small_space():
    optimum = (12, 7, 2, 1, 2, 0)
    index = SMALL.space.choices_to_index(optimum)
    assert SMALL.space.is_valid(index)
    gflops = peaked(SMALL, optimum)
    size = len(SMALL.space)
    # Grid search finds it in the batch holding its index.
    assert trials_to_find(GridTuner(SMALL), gflops, index) == 16 * (index // 16 + 1)
    # Random search finds it by exhausting the space at worst (chance: size/2 trials on average).
    for seed in range(2):
        assert trials_to_find(RandomTuner(SMALL, seed=seed), gflops, index) <= size
    # The GA, which uses the results, needs far fewer than chance for every seed.
    ga = [trials_to_find(GATuner(SMALL, seed=seed), gflops, index) for seed in range(5)]
    assert max(ga) < size / 10, ga

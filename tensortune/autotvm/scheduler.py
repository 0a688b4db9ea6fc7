"""Tuning a whole network: one trial budget shared across its tasks by expected gain.

After Ansor's gradient-based task scheduler. The network's estimated latency is the sum over tasks
of ``weight x best latency`` (weight: how often the task's kernel runs in the network). Every task
first gets one round of trials; then each round goes to the task whose next trials are expected to
lower the network's latency most: its weight times a mix of its recent improvement per trial
(backward) and an optimistic estimate (forward: its latency over its trials so far, halved for each
round since it last improved, so that a task whose search has stalled yields to one still finding
faster kernels). A small share of rounds goes to a random task, so that no estimate starves a task.

First rounds are sized by share: a full round for the layer of the largest weight x latency (its untuned
kernel's, measured first in a network, also when a run resumes), fewer trials in proportion for a smaller
layer, at least half a round. A kernel's gain from n trials grows about as log n (MobileNetV2 on AVX-512, with
the shipped model: 4 trials find 65% of the gain of 16, 32 find 115%), so a budget is best spent with n in
proportion to weight x latency; the forward estimate (latency over trials) steers the later rounds to the same
proportion, and the first rounds start there instead of spending a full round on a layer of 2% of the network's
time (MobileNetV2's 31 layers differ 45 times in weight x latency). At least half a round, not a quarter: with
kernels timed on fresh inputs (``RunOptions.fresh_input``) small layers' configs differ more than this model
foresees, and an equal split of 500 trials did as well as the scheduler on MobileNetV2 (BENCHMARKS.md).

Alternatives: tasks that compute the same layer another way (a direct and a Winograd convolution) share a
``group``; the layer runs its faster kernel, so the network's latency counts each group once, at the best
latency of its tasks. An alternative with latency L in a group whose best is B < L lowers the network's latency
only once it gets below B: its backward gradient is zero, and its forward estimate counts only the part of a
round's optimistic decrease (round size x forward) that would take it below B, scaled by (B/L)^2 besides. So an
alternative twice as slow as its group's best gets a second round only while the best one's search has stalled,
and no third; one 1.25 times as slow gets a few. (Scaling by (B/L)^2 alone gave the slower alternatives of
ResNet-18's 3x3 layers, 1.7-2.9 times slower than Winograd, a third of the trials the scheduler shared by gain.)
A task with no success yet gets rounds before the others only while no task of its group has one.

Each task keeps its tuner across rounds (a model-based tuner keeps its model and plan). Where no cost model
is shipped for the target's ISA, or the caller gives a ``history`` of earlier logs, a new tuner learns from the
records the other tasks have gathered so far, and that history is refreshed as they grow (tasks of similar shape
learn from each other). Where a model is shipped and no history is given, the tuners start from the shipped model
instead: trained on thousands of records of dozens of workloads, it ranks a task's configs better than a model
trained on the few hundred records of a run's other tasks (on AVX-512, over ResNet-18's 16 tasks with each task's
shape left out of the shipped model's training: pairwise ranking accuracy 0.68 against 0.58 for the in-run model,
whose top 16 configs are worse than a random 16, and 0.64 for the in-run records boosted on top of the shipped
model; ``benchmarks/transfer_ranking.py``). The model-based tuners share one pool of feature-extraction workers.
All tasks log to one file: a killed run resumes where it stopped and measures nothing twice.
"""
from __future__ import annotations

import contextlib
import math
import os
import random
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, ContextManager, Sequence

from ..env import usable_cores
from .measure.result import MeasureInput
from ..runtime.cross import is_foreign
from .progress import progress_display
from .record import Record, load_records
from .task import Task
from .tune import TRANSFER_TUNERS, TUNERS, MeasureFn, TuneError, TuningRun, make_tuner, open_measurer
from .tuner import Tuner, XGBTuner
from .workers import spawn_pool


class Strategy(Enum):
    """How rounds are shared among tasks."""

    GRADIENT = "gradient"  # by expected gain (the scheduler)
    ROUND_ROBIN = "round-robin"  # in turn (the baseline to beat)


@dataclass(frozen=True)
class WeightedTask:
    """A task of a network and its weight (how often its kernel runs per inference). Tasks with the same
    ``group`` are alternatives of one layer (see the module docstring); None: a group of its own."""

    task: Task
    weight: int = 1
    group: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.weight, int) or self.weight < 1:
            raise TuneError(f"a task's weight must be a positive integer, got {self.weight!r}")

    @property
    def group_key(self) -> tuple[str, str]:
        return ("group", self.group) if self.group is not None else ("task", self.task.workload_key)


def network_latency(tasks: Sequence[WeightedTask], latencies: Sequence[float]) -> float:
    """Sum over groups of weight x the best latency of the group's tasks (seconds; infinite while a group has no
    success)."""
    best: dict[tuple[str, str], tuple[int, float]] = {}
    for t, lat in zip(tasks, latencies):
        best[t.group_key] = (t.weight, min(lat, best.get(t.group_key, (0, math.inf))[1]))
    return sum(w * lat for w, lat in best.values())


@dataclass
class _TaskState:
    item: WeightedTask
    run: TuningRun
    tuner: Tuner
    curve: list[tuple[int, float]] = field(default_factory=list)  # (trials, best latency s) after each round
    history_size: int = 0  # other tasks' records its tuner learned from
    first_round: int | None = None  # trials of its first round, once sized (see TaskScheduler._first_round)

    @property
    def stale_rounds(self) -> int:
        """Rounds since the best latency last improved."""
        n = 0
        for (_, before), (_, after) in zip(reversed(self.curve[:-1]), reversed(self.curve)):
            if after < before:
                break
            n += 1
        return n

    @property
    def latency(self) -> float:
        """Seconds of the best kernel measured so far (infinity before a success)."""
        g = self.run.result.best_gflops
        return self.item.task.flops / (g * 1e9) if g > 0 else math.inf

    @property
    def done(self) -> bool:
        return self.run.stop_reason() is not None


@dataclass
class NetworkTuneResult:
    """What a network tuning run found: per task its best, and the estimated latency along the way."""

    tasks: list[WeightedTask]
    best_index: list[int | None]
    best_latency: list[float]  # seconds per call of each task's best kernel (inf: none ran)
    trials: list[int]  # per task, resumed ones included
    curve: list[tuple[int, float, float]] = field(default_factory=list)  # (total trials, seconds, est. latency)
    stop_reason: str = ""

    @property
    def estimated_latency(self) -> float:
        """Sum over groups of alternatives of weight x best latency (seconds; infinite while one has no success)."""
        return network_latency(self.tasks, self.best_latency)


class TaskScheduler:
    """Shares ``n_trial`` trials among ``tasks`` (see the module docstring); ``run()`` tunes them.

    ``tuner``: a tuner's name, or a function giving each task's. ``round_size`` trials make one round (one
    measured batch). ``alpha`` weighs the backward gradient
    against the forward estimate; ``window`` is how many rounds back the backward gradient looks;
    ``epsilon`` is the share of rounds given to a random unfinished task. ``pretrained=False``: the tuners start
    without the cost model shipped for the target's ISA, and learn from the other tasks' records instead.
    ``turn``: a function giving a context manager that the opening of the tasks and each round (its choice,
    search, measurement and record) run inside; a caller running several schedulers side by side passes one that
    lets them take turns (``turns.run_in_turns``), so that none of them measures while another searches. ``label``:
    what the progress display calls the tasks together (``network``; a workload's alternatives: the workload).
    """

    def __init__(self, tasks: Sequence[WeightedTask | Task], n_trial: int,
                 tuner: str | Callable[[Task], str] = "xgb", round_size: int = 16, log_file: str | os.PathLike | None = None, measure: MeasureFn | None = None,
                 strategy: Strategy | str = Strategy.GRADIENT, early_stopping: int | None = None,
                 seed: int | None = None, alpha: float = 0.2, window: int = 3, epsilon: float = 0.05,
                 history: Sequence[Record] = (), progress: bool = True, pretrained: bool = True,
                 turn: Callable[[], ContextManager] | None = None, label: str = "network"):
        items = [t if isinstance(t, WeightedTask) else WeightedTask(t) for t in tasks]
        if not items:
            raise TuneError("a network with no tasks has nothing to tune")
        keys = [(t.task.workload_key, str(t.task.target)) for t in items]
        if len(set(keys)) != len(keys):
            raise TuneError("the same task is listed twice; give it once with its weight (occurrences)")
        weights: dict[tuple[str, str], int] = {}
        if any(weights.setdefault(t.group_key, t.weight) != t.weight for t in items):
            raise TuneError("alternatives of one layer (tasks of one group) must have the same weight")
        if n_trial < 0 or round_size < 1 or window < 1 or not 0 <= alpha <= 1 or not 0 <= epsilon <= 1:
            raise TuneError(f"need n_trial >= 0, round_size >= 1, window >= 1, alpha and epsilon in [0, 1]; got "
                            f"{n_trial}, {round_size}, {window}, {alpha}, {epsilon}")
        self.items, self.n_trial, self.tuner_name, self.round_size = items, n_trial, tuner, round_size
        self.log_file, self.measure, self.strategy = log_file, measure, Strategy(strategy)
        self.early_stopping, self.seed, self.progress = early_stopping, seed, progress
        self.alpha, self.window, self.epsilon = alpha, window, epsilon
        self.rng = random.Random(seed)
        self.history = list(history)
        self.pretrained = pretrained
        self.turn = turn or contextlib.nullcontext
        self.label = label  # what the progress display calls the tasks together
        self._feature_pool: ProcessPoolExecutor | None = None
        self._first_latency: dict[tuple[str, str], float] = {}  # group: weight x its first latency measured

    # ------------------------------------------------------------------ running
    def run(self) -> NetworkTuneResult:
        """Tune until ``n_trial`` trials in total (the log's included) or every task is finished."""
        start = time.perf_counter()
        with contextlib.ExitStack() as stack:
            with self.turn():
                if any(isinstance(n, str) and issubclass(TUNERS.get(n, Tuner), TRANSFER_TUNERS)
                       for n in map(self._tuner_of, self.items)):
                    self._feature_pool = spawn_pool(usable_cores())
                    stack.callback(self._feature_pool.shutdown, wait=False, cancel_futures=True)
                states = [self._open(i, stack) for i in range(len(self.items))]
            result = NetworkTuneResult(self.items, [], [], [])
            total = sum(s.run.done for s in states)
            foreign = any(is_foreign(t.task.target) for t in self.items)
            label = f"[emulated: timings mean nothing] {self.label}" if foreign else self.label
            display = stack.enter_context(progress_display(label, self.n_trial, min(total, self.n_trial),
                                                           self.progress))
            measure = self.measure
            while True:
                with self.turn():
                    reason = self._stop_reason(states, total)
                    if reason is not None:
                        break
                    state = self._pick(states)
                    if measure is None:
                        measure = open_measurer(stack)
                    n = min(self._round_trials(state, states), self.n_trial - total,
                            state.run.n_trial - state.run.done)
                    self._refresh_history(state, states)
                    indices = state.tuner.next_batch(n)
                    if not indices:
                        state.run.n_trial = state.run.done  # exhausted: finished
                        continue
                    inputs = [MeasureInput(state.item.task, i) for i in indices]
                    batch_best = state.run.record(inputs, list(measure(inputs)))
                total += len(inputs)
                state.curve.append((state.run.done, state.latency))
                estimate = network_latency(self.items, [s.latency for s in states])
                result.curve.append((total, time.perf_counter() - start, estimate))
                display.update(total, batch_best, state.run.result.best_gflops,
                               note=f"task {state.item.task} | {self.label} {_fmt_latency(estimate)}")
            result.stop_reason = reason
            result.best_index = [s.run.result.best_index for s in states]
            result.best_latency = [s.latency for s in states]
            result.trials = [s.run.done for s in states]
            display.close(f"{label}: {reason}; estimated latency {_fmt_latency(result.estimated_latency)}")
        return result

    def _tuner_of(self, item: WeightedTask) -> str | Tuner:
        return self.tuner_name(item.task) if callable(self.tuner_name) else self.tuner_name

    def _open(self, i: int, stack: contextlib.ExitStack) -> _TaskState:
        """Task ``i``'s tuner and run state, resumed from the log."""
        item = self.items[i]
        tuner = make_tuner(self._tuner_of(item), item.task, None if self.seed is None else self.seed + i,
                           feature_pool=self._feature_pool, pretrained=self.pretrained)
        stack.callback(tuner.close)
        run = TuningRun(item.task, tuner, self.n_trial, self.log_file, self.early_stopping)
        run.resume()
        state = _TaskState(item, run, tuner)
        if run.done:
            state.curve.append((run.done, state.latency))
        return state

    def _stop_reason(self, states: list[_TaskState], total: int) -> str | None:
        if total >= self.n_trial:
            return f"reached {self.n_trial} trials"
        if all(s.done for s in states):
            return "every task is finished (space exhausted or no improvement)"
        return None

    # ------------------------------------------------------------------ choosing the next task
    def _pick(self, states: list[_TaskState]) -> _TaskState:
        live = [s for s in states if not s.done]
        if self.strategy is Strategy.ROUND_ROBIN:
            return min(live, key=lambda s: (s.run.done, states.index(s)))
        best = self._group_best(states)
        first = [s for s in live if s.run.done < (s.first_round or 1) or math.isinf(best[s.item.group_key])]
        if first:  # a first round for every task (and more for a task of a group with no success yet)
            return min(first, key=lambda s: (s.run.done, states.index(s)))
        if self.rng.random() < self.epsilon:
            return self.rng.choice(live)
        return max(live, key=lambda s: (self.gradient(s, best[s.item.group_key]), -s.run.done))

    def _round_trials(self, state: _TaskState, states: list[_TaskState]) -> int:
        """Trials of ``state``'s next round: the rest of its first round while that is unfinished."""
        first = self._first_round(state, states) if self.strategy is Strategy.GRADIENT else 0
        return first - state.run.done if state.run.done < first else self.round_size

    def _first_round(self, state: _TaskState, states: list[_TaskState]) -> int:
        """Trials of ``state``'s first round, sized when it starts (a task resumed past its first trials has had
        it): ``round_size`` for the group of the largest weight x latency (each group's first latency: in a
        network, its untuned kernel's, also after a resume), in proportion below it, at least half a round; a
        full round while its group has no success (see the module docstring)."""
        if state.first_round is None:
            if state.run.done:
                return 0
            self._note_first_latencies(states)
            mine = self._first_latency.get(state.item.group_key)
            largest = max(self._first_latency.values(), default=0.0)
            size = self.round_size  # (a whole proportion is not rounded up by its floating-point error)
            if mine is not None and largest > 0:
                size = math.ceil(self.round_size * mine / largest - 1e-9)
            state.first_round = max(1, self.round_size // 2, size)
        return state.first_round

    def _note_first_latencies(self, states: list[_TaskState]) -> None:
        """Record each group's first latency (weight x seconds): its first task's first success, resumed ones
        included (in a network, the untuned kernel's: the default tasks come first)."""
        for s in states:
            if s.item.group_key not in self._first_latency:
                g = next((t.gflops for t in s.run.result.history if t.gflops > 0), 0.0)
                if g > 0:
                    self._first_latency[s.item.group_key] = s.item.weight * s.item.task.flops / (g * 1e9)

    @staticmethod
    def _group_best(states: list[_TaskState]) -> dict[tuple[str, str], float]:
        """The best latency of each group's tasks."""
        best: dict[tuple[str, str], float] = {}
        for s in states:
            best[s.item.group_key] = min(s.latency, best.get(s.item.group_key, math.inf))
        return best

    def gradient(self, state: _TaskState, group_best: float | None = None) -> float:
        """Expected decrease of the network latency per trial spent on ``state``'s task; ``group_best``: the best
        latency of its group, when it has alternatives (an alternative slower than it counts for less)."""
        trials, latency = state.run.done, state.latency
        forward = latency / max(1, trials) * 0.5 ** state.stale_rounds
        if group_best is not None and group_best < latency:  # a slower alternative (see the module docstring)
            if math.isinf(latency):  # with no success yet, while its group has one
                return 0.0
            reach = max(0.0, forward - (latency - group_best) / self.round_size)
            return state.item.weight * (group_best / latency) ** 2 * (1 - self.alpha) * reach
        backward = 0.0
        if len(state.curve) > 1:
            t0, l0 = state.curve[max(0, len(state.curve) - 1 - self.window)]
            if trials > t0 and math.isfinite(l0):
                backward = max(0.0, (l0 - latency) / (trials - t0))
        return state.item.weight * (self.alpha * backward + (1 - self.alpha) * forward)

    # ------------------------------------------------------------------ transfer between tasks
    def _refresh_history(self, state: _TaskState, states: list[_TaskState]) -> None:
        """Give a model-based tuner the other tasks' records when they have grown by half since it last learned
        (not when it has a shipped model and no history was given: see the module docstring)."""
        if not isinstance(state.tuner, XGBTuner) or (not self.history and state.tuner.shipped_model is not None):
            return
        others = sum(s.run.done for s in states if s is not state) + len(self.history)
        if others < max(self.round_size, 1.5 * state.history_size):
            return
        records = list(self.history)
        if self.log_file is not None and os.path.exists(self.log_file):
            records += [r for r in load_records(self.log_file) if not r.matches(state.item.task)]
        state.tuner.set_history(records)
        state.history_size = others


def tune_network(tasks: Sequence[WeightedTask | Task], n_trial: int, **options) -> NetworkTuneResult:
    """Tune a network's tasks within one budget of ``n_trial`` trials (options: see ``TaskScheduler``)."""
    return TaskScheduler(tasks, n_trial, **options).run()


def _fmt_latency(seconds: float) -> str:
    return "unknown (a task has no successful kernel yet)" if math.isinf(seconds) else f"{seconds * 1e3:.3f} ms"

"""The tuning loop: propose a batch, measure it, log it, learn from it, until the budget is spent.

Measurement is an injected callable (tests pass a fake); by default a ``Measurer`` is opened on the
first batch and closed at the end. Each batch is appended to the log right after it is measured, so
a run stopped at any moment (Ctrl-C, SIGKILL) can be resumed with the same call: the records of the
log count toward ``n_trial`` and are never measured again.
"""
from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import TensortuneError
from ..runtime.cross import is_foreign
from .measure.result import ErrorKind, MeasureInput, MeasureResult
from .progress import progress_display
from .record import Record, append_records, load_records, task_records
from .space import ConfigEntity
from .task import Task
from .tuner import EvolutionTuner, GATuner, GridTuner, RandomTuner, Tuner, XGBRegTuner, XGBTuner

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

    from distributed import Client

MeasureFn = Callable[[list[MeasureInput]], list[MeasureResult]]
Callback = Callable[[Tuner, list[MeasureInput], list[MeasureResult]], None]

TUNERS: dict[str, type[Tuner]] = {"random": RandomTuner, "grid": GridTuner, "ga": GATuner, "xgb": XGBTuner,
                                   "xgb-reg": XGBRegTuner, "evolution": EvolutionTuner}
#: tuners that learn from other workloads' records (``history=``)
TRANSFER_TUNERS = (XGBTuner,)
EMULATED_NOTE = "kernels ran under an emulator (another CPU architecture): results were checked, timings mean nothing"


class TuneError(TensortuneError, ValueError):
    """``tune`` was called with arguments it cannot use."""


@dataclass(frozen=True)
class Trial:
    """One measured config of a tuning run (``resumed``: read from the log, not measured now)."""

    config_index: int
    gflops: float  # 0 for a failure
    error_kind: ErrorKind
    resumed: bool = False


@dataclass
class TuneResult:
    """What a tuning run found. ``history`` holds resumed trials first, then this run's, in order."""

    task: Task
    best_index: int | None
    best_gflops: float
    history: list[Trial] = field(default_factory=list)
    stop_reason: str = ""
    emulated: bool = False  # some trial ran under an emulator: its GFLOP/s mean nothing (EMULATED_NOTE)

    @property
    def best_config(self) -> ConfigEntity | None:
        return None if self.best_index is None else self.task.config(self.best_index)

    @property
    def n_measured(self) -> int:
        """Trials measured by this run (not resumed from the log)."""
        return sum(not t.resumed for t in self.history)


def make_tuner(tuner: str | Tuner, task: Task, seed: int | None = None,
               history: Sequence[Record] | None = None, feature_pool: ProcessPoolExecutor | None = None,
               pretrained: bool = True) -> Tuner:
    """A tuner by name (``random``, ``grid``, ``ga``, ``xgb``, ``xgb-reg``), or the given instance
    (which must be for ``task``). ``history`` (records of other workloads) goes to model-based tuners, and so
    does ``feature_pool`` (worker processes for their features, shared by the tuners of many tasks).
    ``pretrained=False``: a model-based tuner does not use the cost model shipped for the target's ISA (it starts
    from its own measurements, or ``history``); the other tuners have no model. A given instance is returned as
    it is (``pretrained`` does not apply)."""
    if isinstance(tuner, Tuner):
        if tuner.task.workload_key != task.workload_key:
            raise TuneError(f"the tuner was made for {tuner.task} but tune() was called for {task}")
        return tuner
    if tuner not in TUNERS:
        raise TuneError(f"unknown tuner {tuner!r}; use one of {', '.join(TUNERS)} or a Tuner instance")
    cls = TUNERS[tuner]
    if not issubclass(cls, TRANSFER_TUNERS):
        if history is not None:
            raise TuneError(f"tuner '{tuner}' cannot learn from history; use xgb or xgb-reg")
        return cls(task, seed=seed)
    return cls(task, seed=seed, history=history, feature_pool=feature_pool, pretrained=pretrained)


def _gflops(task: Task, res: MeasureResult) -> float:
    return task.flops / res.cost / 1e9 if res.ok and 0 < res.cost < math.inf else 0.0


def _resumed(log_file: str | os.PathLike | None, task: Task) -> list[Record]:
    """The log's records for ``task``, first one per config (a config measured twice counts once)."""
    if log_file is None or not os.path.exists(log_file):
        return []
    first: dict[int, Record] = {}
    for r in task_records(load_records(log_file), task):
        first.setdefault(r.config_index, r)
    return list(first.values())


def tune(task: Task, n_trial: int, tuner: str | Tuner = "xgb", batch_size: int | None = None,
         measure: MeasureFn | None = None, log_file: str | os.PathLike | None = None,
         early_stopping: int | None = None, callbacks: Sequence[Callback] = (), progress: bool = True,
         seed: int | None = None, history: str | os.PathLike | Sequence[Record] | None = None,
         cluster: str | Client | None = None, pretrained: bool = True) -> TuneResult:
    """Tune ``task`` until ``n_trial`` configs are measured in total (the log's included).

    ``tuner``: ``xgb`` (the learned cost model steering simulated annealing; the default), ``random`` (the
    model-free baseline), ``grid``, ``ga``, ``xgb-reg``, or a ``Tuner`` instance.
    Stops early when the space is exhausted, or when ``early_stopping`` trials of this run bring no
    improvement. Failed candidates are recorded with their error kind and tuning goes on. On Ctrl-C the
    progress display is closed and ``KeyboardInterrupt`` re-raised; every finished batch is in the log.
    ``history``: a log (or records) of other workloads that a model-based tuner transfers from.
    ``pretrained=False``: a model-based tuner starts without the cost model shipped for the target's ISA.
    ``cluster``: a Dask scheduler's address (``tcp://HOST:PORT``) or a ``distributed.Client``: measure on the
    cluster's workers (a ``ClusterMeasurer``) instead of this machine; not together with ``measure``.
    ``batch_size``: configs measured per batch; by default 16, and on a cluster at least 4 per device of the
    task's target (the loop waits for a whole batch, so a small batch would leave devices idle).
    The tuner's resources (its worker processes) and a default measurer are closed when tuning ends.
    """
    _check_arguments(n_trial, batch_size, early_stopping)
    if measure is not None and cluster is not None:
        raise TuneError("give measure= or cluster=, not both (a ClusterMeasurer is a measure function)")
    if history is not None and not isinstance(history, (list, tuple)):
        history = load_records(history)
    the_tuner = make_tuner(tuner, task, seed, history, pretrained=pretrained)
    with contextlib.ExitStack() as stack:
        stack.callback(the_tuner.close)
        run = TuningRun(task, the_tuner, n_trial, log_file, early_stopping)
        run.resume()
        label = f"{task} [emulated: timings mean nothing]" if is_foreign(task.target) else str(task)
        display = stack.enter_context(progress_display(label, n_trial, min(run.done, n_trial), progress))
        if run.done:
            display.update(run.done, 0.0, run.result.best_gflops)
        try:
            while (reason := run.stop_reason()) is None:
                if measure is None:
                    measure = open_measurer(stack, cluster)
                indices = the_tuner.next_batch(min(batch_size or default_batch_size(measure, task), n_trial - run.done))
                if not indices:
                    reason = "the config space is exhausted"
                    break
                inputs = [MeasureInput(task, i) for i in indices]
                results = list(measure(inputs))
                batch_best = run.record(inputs, results)
                workers = sorted({r.worker for r in results if r.worker})  # on a cluster
                display.update(run.done, batch_best, run.result.best_gflops, workers=workers)
                for cb in callbacks:
                    cb(the_tuner, inputs, results)
        except KeyboardInterrupt:
            where = f"; the measured trials are in {log_file}" if log_file is not None else ""
            display.close(f"interrupted after {run.done} trials{where}")
            raise
        result = run.result
        result.stop_reason = reason
        display.close(f"{task}: {reason}; best {result.best_gflops:.2f} GFLOP/s"
                      + (f" (config {result.best_index})" if result.best_index is not None else "")
                      + (f"; {EMULATED_NOTE}" if result.emulated else ""))
    return result


DEFAULT_BATCH_SIZE = 16


def default_batch_size(measure: MeasureFn, task: Task) -> int:
    """16, or what the measurer asks for (a cluster: enough configs to keep each of its devices busy)."""
    owner = getattr(measure, "__self__", measure)  # a bound ``measure`` method: ask its object
    suggest = getattr(owner, "suggested_batch_size", None)
    return max(DEFAULT_BATCH_SIZE, suggest(task.target)) if suggest is not None else DEFAULT_BATCH_SIZE


def _check_arguments(n_trial: int, batch_size: int | None, early_stopping: int | None) -> None:
    if n_trial < 0:
        raise TuneError(f"n_trial must be >= 0, got {n_trial}")
    if batch_size is not None and batch_size < 1:
        raise TuneError(f"batch_size must be >= 1, got {batch_size}")
    if early_stopping is not None and early_stopping < 1:
        raise TuneError(f"early_stopping must be a number of trials >= 1 or None, got {early_stopping}")


class TuningRun:
    """The state of one task's tuning: trials done (resumed ones included), the best so far, when to stop.
    ``tune`` drives one; the network scheduler drives one per task, a round at a time."""

    def __init__(self, task: Task, tuner: Tuner, n_trial: int, log_file, early_stopping: int | None):
        self.task, self.tuner, self.n_trial = task, tuner, n_trial
        self.log_file, self.early_stopping = log_file, early_stopping
        self.result = TuneResult(task, None, 0.0)
        self.done = 0
        self.last_improvement = 0  # early stopping counts only this run's trials

    def resume(self) -> None:
        """Count the log's records of this task as trials, and teach them to the tuner."""
        resumed = _resumed(self.log_file, self.task)
        self.tuner.load_history(resumed)
        for r in resumed:
            self._add(Trial(r.config_index, _gflops(self.task, r.result()), r.error_kind, resumed=True))
            self.result.emulated |= r.emulated
        self.done = self.last_improvement = len(resumed)

    def stop_reason(self) -> str | None:
        if self.early_stopping is not None and self.done - self.last_improvement >= self.early_stopping:
            return f"no improvement in the last {self.done - self.last_improvement} trials"
        if self.done >= self.n_trial:
            return f"reached {self.n_trial} trials"
        if not self.tuner.has_next():
            return "the config space is exhausted"
        return None

    def record(self, inputs: list[MeasureInput], results: list[MeasureResult]) -> float:
        """Log a measured batch and learn from it; returns the batch's best GFLOP/s."""
        if len(results) != len(inputs):
            raise TuneError(f"the measure function returned {len(results)} results for "
                            f"{len(inputs)} inputs; it must return one result per input")
        if self.log_file is not None:
            append_records(self.log_file, zip(inputs, results))
        self.tuner.update(inputs, results)
        batch_best = 0.0
        for inp, res in zip(inputs, results):
            self.done += 1
            trial = Trial(inp.config_index, _gflops(self.task, res), res.error_kind)
            self.result.emulated |= res.emulated
            batch_best = max(batch_best, trial.gflops)
            if self._add(trial):
                self.last_improvement = self.done
        return batch_best

    def _add(self, trial: Trial) -> bool:
        """Append a trial to the history; True if it is the best so far."""
        self.result.history.append(trial)
        if trial.gflops > self.result.best_gflops:
            self.result.best_index, self.result.best_gflops = trial.config_index, trial.gflops
            return True
        return False


def open_measurer(stack: contextlib.ExitStack, cluster: str | Client | None = None) -> MeasureFn:
    """The default measurement, closed when tuning ends: a ``Measurer`` with default options, or on ``cluster``
    a ``ClusterMeasurer``."""
    from .measure.measure import MeasureOptions, Measurer

    if cluster is not None:
        from .measure.cluster import ClusterMeasurer

        measurer = stack.enter_context(ClusterMeasurer(cluster, MeasureOptions()))
        return measurer.measure
    measurer = Measurer(MeasureOptions())
    stack.enter_context(measurer)
    return measurer.measure

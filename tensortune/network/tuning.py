"""Tuning a whole network: its tasks, weighted by how often they run, share one trial budget.

The network's tasks are those of ``tensortune tasks`` (each distinct fused convolution, depthwise
convolution or dense layer a template computes, with its number of occurrences; in the group of its
direct task, the Winograd alternative of a 3x3, stride-1 convolution and the layer's untuned kernel; a fused
node such as a 1x1 expansion computed by its depthwise convolution has no task: its kernel runs no tuned config);
the ``TaskScheduler`` gives each round of trials to the task expected to lower the network's latency
most. One log holds every task's records; ``tensortune compile --log`` then uses them.
"""
from __future__ import annotations

import contextlib
import os
from typing import Mapping, Sequence

from ..autotvm.scheduler import NetworkTuneResult, TaskScheduler, WeightedTask
from ..autotvm.tune import TuneError
from ..operators.conv_tasks import is_default
from ..target import Target
from .compile_model import optimized_graph
from .tasks import NetworkTask, extract_tasks


def network_tasks(model, target: Target, shapes: Mapping[str, Sequence[int]] | None = None) -> list[NetworkTask]:
    """The tuning tasks of ``model`` (a path, bytes, ``ModelProto`` or ``Graph``) for ``target``
    (``tasks.extract_tasks`` of its optimized graph)."""
    return extract_tasks(optimized_graph(model, target, shapes), target)


def weighted_tasks(tasks: Sequence[NetworkTask]) -> list[WeightedTask]:
    """The tasks a template computes and their alternatives, each weighted by its occurrences in the network; a
    task and its alternatives form a group (named by the workload). The layers' default kernels (one config each)
    come first: measured before anything else, they make the network's estimated latency the untuned network's
    from the start, and every tuned config has the default to beat."""
    items = [WeightedTask(task, t.occurrences, t.workload if t.alternatives else None)
             for t in tasks for task in t.tasks]
    return sorted(items, key=lambda w: not is_default(w.task))  # stable: otherwise in the tasks' order


def tune_model(model, n_trial: int, log_file: str | os.PathLike, target: Target | None = None,
               shapes: Mapping[str, Sequence[int]] | None = None, num_threads: int | None = None,
               fresh_input: bool = True, **options) -> NetworkTuneResult:
    """Tune every task of ``model`` within ``n_trial`` trials in total (the log's included: a rerun resumes).

    Without a ``measure`` of the caller's, each candidate is measured on this machine with ``num_threads`` threads
    and, with ``fresh_input``, its input rewritten by the threads before each call, as the previous layer leaves
    it inside the network (``RunOptions.fresh_input``). ``options`` go to ``TaskScheduler`` (``tuner``,
    ``round_size``, ``strategy``, ``measure``, ``seed``, ``pretrained``...).
    """
    from ..autotvm.measure import MeasureOptions, Measurer, RunOptions

    target = target or Target.host()
    items = weighted_tasks(network_tasks(model, target, shapes))
    if not items:
        raise TuneError("the network has no convolution or dense layer a template computes: nothing to tune")
    with contextlib.ExitStack() as stack:
        if options.get("measure") is None:
            runner = RunOptions(num_threads=num_threads, fresh_input=fresh_input)
            options["measure"] = stack.enter_context(Measurer(MeasureOptions(runner=runner))).measure
        return TaskScheduler(items, n_trial, log_file=log_file, **options).run()

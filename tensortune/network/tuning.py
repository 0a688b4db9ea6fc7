"""Tuning a whole network: its tasks, weighted by how often they run, share one trial budget.

The network's tasks are those of ``tensortune tasks`` (each distinct fused convolution, depthwise
convolution or dense layer a template computes, with its number of occurrences; in the group of its
direct task, the Winograd alternative of a 3x3, stride-1 convolution, the template-free search of its kernel and the
layer's untuned kernel; any other node whose kernel reduces, the template-free search of it and its untuned
kernel);
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
from .tasks import NetworkTask, Search, extract_tasks


def network_tasks(model, target: Target, shapes: Mapping[str, Sequence[int]] | None = None,
                  search: Search = Search.ALL) -> list[NetworkTask]:
    """The tuning tasks of ``model`` (a path, bytes, ``ModelProto`` or ``Graph``) for ``target``
    (``tasks.extract_tasks`` of its optimized graph)."""
    return extract_tasks(optimized_graph(model, target, shapes), target, search)


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
               fresh_input: bool = True, search: Search = Search.ALL, **options) -> NetworkTuneResult:
    """Tune every task of ``model`` within ``n_trial`` trials in total (the log's included: a rerun resumes).

    Without a ``measure`` of the caller's, each candidate is measured on this machine with ``num_threads`` threads
    and, with ``fresh_input``, its input rewritten by the threads before each call, as the previous layer leaves
    it inside the network (``RunOptions.fresh_input``). ``search``: which tasks each node has (``tasks.Search``).
    ``options`` go to ``TaskScheduler`` (``tuner``,
    ``round_size``, ``strategy``, ``measure``, ``seed``, ``pretrained``...).
    """
    from ..autotvm.measure import MeasureOptions, Measurer, RunOptions

    target = target or Target.host()
    items = weighted_tasks(network_tasks(model, target, shapes, search))
    if not items:
        raise TuneError("the network has no node to tune: no convolution or dense layer a template computes"
                        + (", and no node that reduces, for the template-free search" if search is not Search.TEMPLATES
                           else " (and the template-free search was left out: --search templates)"))
    with contextlib.ExitStack() as stack:
        if options.get("measure") is None:
            runner = RunOptions(num_threads=num_threads, fresh_input=fresh_input)
            options["measure"] = stack.enter_context(Measurer(MeasureOptions(runner=runner))).measure
        return TaskScheduler(items, n_trial, log_file=log_file, **options).run()

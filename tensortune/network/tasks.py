"""Tuning tasks of a network: each node's tasks (``Op.tasks``: the convolutions and dense layers a template
computes, with their alternatives; see ``operators.conv_tasks``), grouped by workload.

Nodes with equal workloads share one task, which counts them. Nodes of a tunable kind that no template computes
(unusual windows, groups that hold no whole channel blocks) are listed with no task: they run their default
schedules.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..autotvm.task import Task
from ..graph.ir import Graph
from ..target import Target


@dataclass(frozen=True)
class NetworkTask:
    """One workload of a network: its tuning task (None when no template computes it), the nodes that compute
    it, the FLOPs of one of them, and the alternatives of its task (other templates that compute those nodes)."""

    kind: str
    workload: str
    task: Task | None
    nodes: tuple[str, ...]
    flops: int
    alternatives: tuple[Task, ...] = ()

    @property
    def tasks(self) -> tuple[Task, ...]:
        """The task, then its alternatives (none without a task)."""
        return () if self.task is None else (self.task, *self.alternatives)

    @property
    def occurrences(self) -> int:
        return len(self.nodes)

    @property
    def total_flops(self) -> int:
        return self.flops * self.occurrences


def tunable(g: Graph, node) -> bool:
    """Whether the node's operator is of a kind templates tune (it has a workload kind, whether or not a template
    computes this node)."""
    return node.op.workload_kind(g, node) is not None


def extract_tasks(g: Graph, target: Target) -> list[NetworkTask]:
    """The workloads of the tunable nodes of an optimized graph, in order of first use. An alternative that is
    another workload's task (a one-row view equal to another layer's task or view) is left to that workload, or to
    the first that has it: a task is tuned in one group."""
    nodes = [(node, node.op.tasks(g, node, target)) for node in g.nodes if tunable(g, node)]
    taken = {tasks[0].workload_key: tasks[0].workload_key for _, tasks in nodes if tasks}  # task -> its group
    found: dict[str, NetworkTask] = {}
    for node, tasks in nodes:
        task, *alternatives = tasks or (None,)
        key = task.workload_key if task is not None else node.op.untuned_key(g, node)
        alternatives = [t for t in alternatives if taken.setdefault(t.workload_key, key) == key]
        prev = found.get(key)
        if prev is not None:  # nodes of one workload may differ in their epilogues, and so in their views
            alternatives = list(prev.alternatives) + [t for t in alternatives if t not in prev.alternatives]
        nodes_of = (prev.nodes if prev else ()) + (node.name,)
        found[key] = NetworkTask(node.op.workload_kind(g, node), key, task, nodes_of, node.op.flops(g, node),
                                 tuple(alternatives))
    return list(found.values())

"""Tuning tasks of a network: each node's tasks (``Op.tasks``: the convolutions and dense layers a template
computes, with their alternatives; see ``operators.conv_tasks``; and on a CPU, the template-free search of the
expression any node's kernel computes when it reduces, with its default kernel: ``operators.expression_tasks``),
grouped by workload.

Nodes with equal workloads share one task, which counts them. Nodes of a tunable kind that neither computes (unusual
windows or groups on a target without the template-free search) are listed with no task: they run their default
schedules. ``Search`` picks which tasks a node has: every one (the expression's beside the templates'), the
templates' only, or the template-free search's only.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ..autotvm.task import Task
from ..autotvm.workload import Expression
from ..graph.ir import Graph, Node
from ..operators.expression_tasks import expression_tasks
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


class Search(Enum):
    """Which tasks a node has (``tune-model --search``)."""

    ALL = "all"  # the templates' tasks and the template-free search of the node's expression
    TEMPLATES = "templates"  # the templates' only
    AUTO = "auto"  # the template-free search's only (with the default kernel)


def node_tasks(g: Graph, node: Node, target: Target, search: Search = Search.ALL) -> tuple[Task, ...]:
    """The node's tasks: its direct (first) task, then the alternatives that compute it too, of the templates
    (``Op.tasks``) and of the template-free search (``expression_tasks``: the sketch of its kernel, and its default
    kernel unless a template's task measures that already); () when nothing computes it."""
    templates = node.op.tasks(g, node, target) if search is not Search.AUTO else ()
    if search is Search.TEMPLATES:
        return templates
    auto = expression_tasks(g, node, target)
    return templates + auto[:1] if templates else auto


def candidate_tasks(g: Graph, node: Node, target: Target, expressions: bool = True) -> tuple[Task, ...]:
    """Every task whose records may schedule the node, whichever ``Search`` tuned it: the templates' (direct task
    first), then, with ``expressions`` (a log without records of expressions needs none), the template-free search's
    and the default kernel measured as an expression."""
    return node.op.tasks(g, node, target) + (expression_tasks(g, node, target) if expressions else ())


def tunable(g: Graph, node) -> bool:
    """Whether the node's operator is of a kind templates tune (it has a workload kind, whether or not a template
    computes this node)."""
    return node.op.workload_kind(g, node) is not None


def extract_tasks(g: Graph, target: Target, search: Search = Search.ALL) -> list[NetworkTask]:
    """The workloads of the tunable nodes of an optimized graph, in order of first use. An alternative that is
    another workload's task (a one-row view equal to another layer's task or view) is left to that workload, or to
    the first that has it: a task is tuned in one group."""
    nodes = [(node, node_tasks(g, node, target, search)) for node in g.nodes]
    nodes = [(node, tasks) for node, tasks in nodes if tasks or tunable(g, node)]
    taken = {tasks[0].workload_key: _group(g, node, tasks[0]) for node, tasks in nodes if tasks}  # task -> group
    found: dict[str, NetworkTask] = {}
    for node, tasks in nodes:
        task, *alternatives = tasks or (None,)
        key = _group(g, node, task)
        alternatives = [t for t in alternatives if taken.setdefault(t.workload_key, key) == key]
        prev = found.get(key)
        if prev is not None:  # nodes of one workload may differ in their epilogues, and so in their views
            alternatives = list(prev.alternatives) + [t for t in alternatives if t not in prev.alternatives]
        nodes_of = (prev.nodes if prev else ()) + (node.name,)
        kind = node.op.workload_kind(g, node) or node.op.kind
        flops = node.op.flops(g, node) or (task.flops if task is not None else 0)
        found[key] = NetworkTask(kind, key, task, nodes_of, flops, tuple(alternatives))
    return list(found.values())


def _group(g: Graph, node: Node, task: Task | None) -> str:
    """The name of the group a node's first task leads: its workload key; for an expression (whose key is the text
    of its DAG), the node's kind and the DAG's digest; for none, the node's readable workload."""
    if task is None:
        return node.op.untuned_key(g, node)
    if isinstance(task.workload, Expression):
        return f"{node.op.kind} {task.workload.digest}"
    return task.workload_key

"""Kernels from a tuning log: the best config of a node's task schedules its fused kernel.

A convolution's (or dense layer's) config comes from the ``conv2d_nchwc_packed`` template, a depthwise
convolution's from ``depthwise_conv2d_nchwc_packed``; the template schedules the network's fused kernel through
its ``declare`` hook (the epilogue stages are inlined into the output stage). A node with alternatives (a 3x3,
stride-1 convolution, also a ``conv2d_winograd_nchwc_packed`` task; every node, its ``nchwc_default`` task: the
untuned kernel, measured by the network's tuner) runs the alternative whose best record is fastest among the
records of kernels with the node's channel blocks (the layout ``layouts.choose_blocks`` planned from the same log):
their FLOPs are the same, so the shortest time wins, and a log that measured the default keeps it wherever no tuned
config beat it. A dense layer runs any blocks (its plain tensors are 1x1 images blocked any way). Where
``refine`` timed a layer's candidates inside this very network (records marked with its fingerprint), the layer runs the fastest of its latest refinement instead: timed among the network's other
kernels, that ranking is the one that counts. A node whose tasks have no successful record, whose fastest record
is the default's, or whose records all block channels otherwise than the network's layout, keeps its default
kernel (the last with a warning), which for a 3x3, stride-1 convolution may be a Winograd one
(``operators.conv_kernels.default_winograd_tile``). Any node whose kernel reduces is also the expression it computes
(``operators.expression_tasks``): where its ``auto_expression`` task's best record beat the other alternatives, its
kernel is scheduled by that sketch.
"""
from __future__ import annotations

import math
import os
import warnings

from ..autotvm.record import Record, RecordWarning, load_records, task_records
from ..autotvm.task import Task
from ..errors import TensortuneError
from ..graph.errors import NetworkCompileError
from ..graph.ir import Graph, Node
from ..operators.conv_tasks import BlockMismatch, is_default
from ..operators.expression_tasks import EXPRESSION_TEMPLATES, is_expression, sketched_kernel
from ..operators.kernel import KernelDef
from ..target import Target
from .layouts import record_blocks, runs_with
from .refinements import latest_choice, layer_tag, network_fingerprint
from .tasks import candidate_tasks


class TunedLayoutWarning(RecordWarning):
    """A tuned config was left out: its template blocks channels differently from the network's layout."""


class TunedKernels:
    """``choose(graph, node, target)`` for ``build_program``: tuned where the log has a record, default elsewhere.

    ``applied`` maps each node that got a tuned config to ``(template, config index)``; ``kept_default`` lists the
    nodes whose default kernel the log measured as faster than every tuned config.
    """

    def __init__(self, log: str | os.PathLike, target: Target):
        if not os.path.isfile(log):
            raise NetworkCompileError(f"no such tuning log: {os.fspath(log)}")
        everything = load_records(log, in_network=True)
        self.records = [r for r in everything if not r.network]
        # only then are nodes seen as expressions (building each node's kernel once more to write its DAG)
        self.expressions = any(r.template in EXPRESSION_TEMPLATES for r in self.records)
        self.in_network = [r for r in everything if r.network]
        self.target = target
        self.applied: dict[str, tuple[str, int]] = {}
        self.applied_task: dict[str, Task] = {}  # the task of each node's config in ``applied`` (a view, Winograd...)
        self.kept_default: list[str] = []
        self.refined: list[str] = []  # nodes whose kernel was chosen by timings inside the network
        self._ok: dict[str, list[Record]] = {}
        self._fingerprint: tuple[Graph, str] | None = None  # of the graph being compiled

    def _task_records(self, task: Task) -> list[Record]:
        key = task.workload_key
        if key not in self._ok:
            self._ok[key] = []
            mine = [r for r in self.records if r.matches(task)]
            if mine:  # only then is the task's space built (to drop records the template no longer means)
                try:
                    self._ok[key] = [r for r in task_records(mine, task) if r.ok and math.isfinite(r.cost)]
                except TensortuneError as e:  # the template cannot make this task's space any more
                    warnings.warn(f"records of {key} left out: {e}", RecordWarning, stacklevel=2)
        return self._ok[key]

    def best_record(self, task: Task, blocks: tuple[int, int] | None = None) -> Record | None:
        """The task's fastest successful record in the log (of a kernel that runs these (input, output) channel
        blocks, when given: ``layouts.runs_with``), or None."""
        mine = [r for r in self._task_records(task) if runs_with(task, r.config, blocks)]
        return min(mine, key=lambda r: r.cost, default=None)

    def alone_seconds(self, task: Task, index: int) -> float | None:
        """The fastest time alone in the log of config ``index`` of ``task`` (None when it has no successful
        record)."""
        return min((r.cost for r in self._task_records(task) if r.config_index == index), default=None)

    def best_index(self, task: Task) -> int | None:
        """The config index of the task's best successful record, or None."""
        rec = self.best_record(task)
        return None if rec is None else rec.config_index

    def refined_choice(self, g: Graph, tasks: tuple[Task, ...],
                       blocks: tuple[int, int] | None = None) -> tuple[Task, int] | None:
        """The task and config index of the layer's fastest candidate in the latest refinement of this network
        (``refine``): among the records of the node's layer (``refinements.layer_tag``: nodes of one workload may get
        different input blocks from their producers, so each blocks pair is a layer of its own), or None when the
        log has none."""
        if not self.in_network or not tasks:
            return None
        if self._fingerprint is None or self._fingerprint[0] is not g:
            self._fingerprint = (g, network_fingerprint(g, self.target))
        # the records of this node's layer, and those of a refinement written before layers had blocks (the same
        # fingerprint: a plan of default blocks)
        return latest_choice(self.in_network, (layer_tag(self._fingerprint[1], blocks), self._fingerprint[1]), tasks)

    def __call__(self, g: Graph, node: Node, target: Target) -> KernelDef:
        tasks = candidate_tasks(g, node, target, self.expressions)
        if not tasks:
            return node.op.kernel(g, node, target)
        blocks = node.op.layer_blocks(g, node)
        refined = self.refined_choice(g, tasks, blocks)
        if refined is not None:
            self.refined.append(node.name)
            task, index = refined
        else:
            found = [(rec.cost, k, task, rec.config_index) for k, task in enumerate(tasks)
                     if (rec := self.best_record(task, blocks)) is not None]
            if all(is_default(task) for _, _, task, _ in found):  # no tuned config runs these blocks
                other = [(task, rec) for task in tasks
                         if not is_default(task) and (rec := self.best_record(task)) is not None]
                if other:
                    task, rec = other[0]
                    given = record_blocks(task, rec.config)
                    warnings.warn(f"node '{node.name}': the tuned configs block channels by {given[0]}/{given[1]}, "
                                  f"the network's layout by {blocks[0]}/{blocks[1]}; using its default schedule",
                                  TunedLayoutWarning, stacklevel=2)
                    return node.op.kernel(g, node, target)
                if not found:
                    return node.op.kernel(g, node, target)
            _, _, task, index = min(found)  # the fastest alternative; on a tie, the first (the direct convolution)
        if is_default(task):
            self.kept_default.append(node.name)
            return node.op.kernel(g, node, target)
        try:
            if is_expression(task):
                kd = sketched_kernel(node.op.kernel(g, node, target), task, index)
            else:
                kd = node.op.tuned_kernel(g, node, task, index)
        except BlockMismatch as e:
            warnings.warn(f"node '{node.name}': {e}; using its default schedule", TunedLayoutWarning, stacklevel=2)
            return node.op.kernel(g, node, target)
        self.applied[node.name] = (task.name, index)
        self.applied_task[node.name] = task
        return kd

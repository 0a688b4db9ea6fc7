"""A node's kernel as a tuning task of its own: the template-free search schedules the expression it computes.

Any node whose default kernel reduces (a softmax, a LayerNorm with its residual add, a batched matmul, a pooling, a
convolution with its fused epilogue...) is, on a CPU, an ``Expression`` task: the text of its kernel's DAG (the
arguments in the node's layouts, constants included as inputs) and of its default schedule. Its ``auto_expression``
task is sketched; its ``expression_default`` task (one config: the default schedule) measures the untuned kernel,
so that the network runs a sketch only where it beat the default in the same run. Nodes of equal DAGs share a task.

A kernel is no such task when it reduces nothing (elementwise kernels keep their default, which is already the
elementwise sketch), reads an input at positions read from another (a gather of run-time indices: random inputs
would read out of bounds), or holds a float type other than float32 (the sketch's register tiles and packing are
float32's so far; a float16 or bfloat16 network keeps its default kernels).
"""
from __future__ import annotations

import dataclasses
import json

from ..autotvm.task import Task
from ..autotvm.templates.auto import auto_expression_template, expression_default_template
from ..autotvm.space import ConfigEntity
from ..autotvm.sketch import schedule_sketch
from ..autotvm.workload import Expression
from ..dtype import DType
from ..graph.ir import Graph, Node
from ..schedule.steps import step_to_json
from ..target import Target, TargetKind
from ..te.expr import TensorRead, walk
from ..te.serialize import dumps
from ..te.tensor import ComputeOp, Tensor
from .kernel import KernelDef


#: the names of the templates of expression tasks (as records name them)
EXPRESSION_TEMPLATES = frozenset({auto_expression_template.name, expression_default_template.name})


def expression_of(kd: KernelDef) -> Expression | None:
    """The ``Expression`` workload of a node's default kernel, or None where it is no task (see the module
    docstring)."""
    output = kd.tensors[-1]
    if kd.schedule.outputs != (output.name,) or not _reduces(output) or _gathers(output) or _low_precision(kd):
        return None
    steps = json.dumps([step_to_json(s) for s in kd.schedule.steps], separators=(",", ":"))
    return Expression(kd.kind, dumps(kd.tensors), steps)


def expression_tasks(g: Graph, node: Node, target: Target) -> tuple[Task, ...]:
    """The node's ``auto_expression`` task and its ``expression_default`` task, or () (see the module docstring)."""
    if target.kind is not TargetKind.C:
        return ()
    wl = expression_of(node.op.kernel(g, node, target))
    if wl is None:
        return ()
    return Task(auto_expression_template, wl, target), Task(expression_default_template, wl, target)


def is_expression(task: Task) -> bool:
    """Whether ``task`` sketches a node's expression (``auto_expression``)."""
    return task.template is auto_expression_template


def is_expression_default(task: Task) -> bool:
    """Whether ``task`` measures a node's default kernel as an expression (``expression_default``)."""
    return task.template is expression_default_template


def sketched_kernel(kd: KernelDef, task: Task, index: int) -> KernelDef:
    """The node's default kernel ``kd`` scheduled instead by config ``index`` of its ``auto_expression`` task."""
    config = ConfigEntity(task.space, index, task.target)
    schedule = schedule_sketch(config, kd.tensors[-1])
    return dataclasses.replace(kd, schedule=schedule, key=kd.key + (task.name, index), template=task.name)


def _stages(output: Tensor) -> list[Tensor]:
    out, stack, seen = [], [output], set()
    while stack:
        t = stack.pop()
        if t.name in seen or not isinstance(t.op, ComputeOp):
            continue
        seen.add(t.name)
        out.append(t)
        stack.extend(t.op.inputs())
    return out


def _reduces(output: Tensor) -> bool:
    return any(t.op.reduce_axes and t.op.scan_axis is None for t in _stages(output))


def _low_precision(kd: KernelDef) -> bool:
    stages = _stages(kd.tensors[-1])
    return any(t.dtype.is_float and t.dtype is not DType.float32 for t in [*kd.tensors, *stages])


def _gathers(output: Tensor) -> bool:
    return any(isinstance(n, TensorRead) and any(isinstance(m, TensorRead) for i in n.indices for m in walk(i))
               for t in _stages(output) for n in walk(t.op.body))

"""An operator given as the text of its tensor-expression DAG (``te.serialize``): a network's fused node, tuned as
the expression it computes.

Its reference is the same DAG under its default schedule (the steps stored beside it, or none: every stage at the
root in plain loops), compiled for this machine: the kernel the network runs untuned, against which each tuned
schedule of the DAG is checked. Its random inputs are positive (a node may take a logarithm or a square root of
an input) and its FLOPs are counted from the DAG: each floating-point operation of each stage's body, times the
stage's iterations.
"""
from __future__ import annotations

import json
import math

import numpy as np

from ..schedule import Schedule
from ..schedule.steps import step_from_json
from ..target import Target
from ..te import Tensor
from ..te.expr import Binary, Call, Reduce, walk
from ..te.serialize import loads
from ..te.tensor import ComputeOp
from .operator import Operator

#: the range of an expression's random float inputs
INPUT_RANGE = (0.5, 1.5)


def expression(name: str, dag: str, schedule: str = "") -> Operator:
    """The operator of a DAG's text (``te.serialize.dumps`` of its arguments) whose default schedule is the JSON
    list of ``schedule``'s steps (see the module docstring)."""
    *inputs, output = loads(dag)
    steps = [step_from_json(d) for d in json.loads(schedule)] if schedule else []

    def default(op: Operator, target: Target) -> Schedule:
        return Schedule.replay(op.output, steps)

    def reference(*arrays: np.ndarray) -> np.ndarray:
        from ..build import build

        module = build(Schedule.replay(output, steps), [*inputs, output])
        out = np.full(output.shape, np.nan, output.dtype.numpy)
        module(*arrays, out)
        return out

    return Operator(name, tuple(inputs), output, dag_flops(output), reference, default, input_range=INPUT_RANGE)


def dag_flops(output: Tensor) -> int:
    """Floating-point operations of computing ``output`` (see the module docstring); at least 1."""
    seen: set[str] = set()
    total = 0
    stack = [output]
    while stack:
        t = stack.pop()
        if t.name in seen or not isinstance(t.op, ComputeOp):
            continue
        seen.add(t.name)
        body = t.op.body
        ops = sum(1 for n in walk(body) if isinstance(n, (Binary, Call)) and n.dtype.is_float)
        ops += isinstance(body, Reduce)
        total += ops * math.prod(t.shape) * math.prod(a.extent for a in t.op.reduce_axes)
        stack.extend(t.op.inputs())
    return max(total, 1)

"""Choosing each convolution's channel block from a tuning log: the layout of the network, layer by layer.

The packed templates tune the channel blocks of a layer's input and output (``block_in``/``block_out``, a depthwise
convolution's ``block``: one vector of the target or two). Which is faster differs by layer (BENCHMARKS.md), but
a layer's input block is the block its producer wrote; where a reader needs another, the network copies the tensor
(a ``Relayout``), which costs time too.

``choose_blocks`` therefore picks the output block of every tuned convolution for the whole network: the estimated
network time is, over the tuned layers, the fastest record of the log for the blocks the plan gives the layer
(input as it arrives, output as chosen), plus every relayout's bytes at ``RELAYOUT_BYTES_PER_S``. Starting from the
default blocks (one vector everywhere), it changes one layer's block at a time while the estimate falls
(coordinate descent, a few sweeps). A layer without a record for the blocks a plan gives it is estimated at
``UNTUNED_FACTOR`` times its fastest record (it would run an untuned or a worse kernel).
"""
from __future__ import annotations

import math
import warnings
from typing import Mapping, Sequence


from ..autotvm.record import Record, RecordWarning, task_records
from ..autotvm.task import Task
from ..errors import TensortuneError
from ..graph.ir import Graph
from ..operators import Conv, Relayout
from ..operators.conv_tasks import is_default
from ..operators.expression_tasks import is_expression
from ..ops import block_choices
from ..passes import plan_layout
from ..passes.plan_layout import whole_groups
from ..target import Target

#: bytes per second a relayout is assumed to move (read and write counted), measured order of a blocked copy
RELAYOUT_BYTES_PER_S = 10e9
#: a layer's estimated time, relative to its fastest record, when the log has no record for its planned blocks
UNTUNED_FACTOR = 2.0
MAX_SWEEPS = 4


def task_lanes(task: Task) -> int:
    """Elements of the task's dtype in one vector of its target."""
    wl = task.workload.layer if is_default(task) else task.workload
    return max(1, task.target.lanes(wl.dtype))


def record_blocks(task: Task, config: Mapping) -> tuple[int, int]:
    """The (input, output) channel blocks of a record's kernel, as its template says (``Template.channel_blocks``:
    the block knobs of the packed templates, the default blocks for records written before those knobs and for the
    other templates, Winograd and the untuned kernel)."""
    assert task.template.channel_blocks is not None, f"{task.name} schedules no channel-blocked layout"
    return tuple(task.template.channel_blocks(config, task.workload, task_lanes(task)))


def runs_with(task: Task, config: Mapping, blocks: tuple[int, int] | None) -> bool:
    """Whether a record's kernel can run a node whose (input, output) channel blocks are ``blocks`` (None: a dense
    layer, which runs any); the untuned kernel runs any blocks, and so does the sketch of it (an expression task of
    the node's own layout)."""
    return blocks is None or is_default(task) or is_expression(task) or record_blocks(task, config) == blocks


def layer_times(g: Graph, target: Target, records: Sequence[Record]) -> dict[str, dict[tuple[int, int] | None, float]]:
    """Each tuned convolution node of the planned graph ``g``: its fastest record's seconds per (input, output)
    channel blocks, over its task and alternatives; key None: the untuned kernel's record, which runs any blocks."""
    by_workload: dict[str, list[Record]] = {}
    for r in records:
        if r.ok and math.isfinite(r.cost):
            by_workload.setdefault(r.workload, []).append(r)
    out: dict[str, dict[tuple[int, int] | None, float]] = {}
    for node in g.nodes:
        times: dict[tuple[int, int] | None, float] = {}
        for task in node.op.tasks(g, node, target):
            mine = by_workload.get(task.workload_key, [])
            if not mine:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RecordWarning)  # stale records: compile warns about them
                try:
                    mine = task_records(mine, task)
                except TensortuneError as e:  # the template cannot make this task's space any more
                    warnings.warn(f"records of {task.workload_key} left out: {e}", RecordWarning, stacklevel=2)
                    continue
            for r in mine:
                key = None if is_default(task) else record_blocks(task, r.config)
                times[key] = min(times.get(key, float("inf")), r.cost)
        if times:
            out[node.name] = times
    return out


def estimate_seconds(planned: Graph, times: Mapping[str, Mapping[tuple[int, int] | None, float]]) -> float:
    """The estimated time of a planned graph's tuned layers and relayouts (see the module docstring)."""
    total = 0.0
    for node in planned.nodes:
        if isinstance(node.op, Relayout):
            v = planned.values[node.outputs[0]]
            total += 2 * v.type.nbytes / RELAYOUT_BYTES_PER_S
            continue
        mine = times.get(node.name)
        if mine and isinstance(node.op, Conv):
            blocks = (planned.values[node.inputs[0]].layout.block, planned.values[node.outputs[0]].layout.block)
            runs = [s for k, s in mine.items() if k is None or k == blocks]
            total += min(runs) if runs else UNTUNED_FACTOR * min(mine.values())
    return total


def choose_blocks(g: Graph, target: Target, records: Sequence[Record]) -> dict[str, int]:
    """The output channel block of each tuned convolution of ``g`` (a graph before ``plan_layout``) that makes the
    estimated network time least (see the module docstring); {} keeps the default blocks everywhere."""
    times = layer_times(plan_layout(g, target), target, records)
    choices = {}
    for node in g.nodes:  # untuned layers too: their default kernels run any block, a tuned reader may want one
        out = g.values[node.outputs[0]]
        if isinstance(node.op, Conv) and len(out.shape) == 4:
            channels = out.shape[1]
            lanes = max(1, target.lanes(out.dtype))
            options = [b for b in block_choices(channels, lanes) if whole_groups(node.op, channels, b)]
            if len(options) > 1:
                choices[node.name] = options
    blocks: dict[str, int] = {}
    best = estimate_seconds(plan_layout(g, target, blocks), times)
    for _ in range(MAX_SWEEPS):
        improved = False
        for name, options in choices.items():
            for b in options:
                if b == blocks.get(name, options[0]):
                    continue
                trial = {**blocks, name: b}
                seconds = estimate_seconds(plan_layout(g, target, trial), times)
                if seconds < best * (1 - 1e-9):
                    best, blocks, improved = seconds, trial, True
        if not improved:
            break
    return {name: b for name, b in blocks.items() if b != choices[name][0]}

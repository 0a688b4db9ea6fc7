"""Fake tuning logs of a network's layers (records timed alone, no measuring), for the refine and profile tests."""
from __future__ import annotations

import time

from tensortune.network.tasks import Search
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.network import optimized_graph
from tensortune.network.tasks import extract_tasks
from tensortune.network.refine import Candidate, kernel_of
from tensortune.operators.conv_tasks import BlockMismatch


def valid_configs(g, node, task, n, start=0) -> list[int]:
    """The first ``n`` configs of ``task`` (from index ``start``) the network's layout can run at ``node``."""
    out = []
    for index in range(start, len(task.space)):
        try:
            kernel_of(g, node, Candidate(task, index, None))
        except BlockMismatch:
            continue
        out.append(index)
        if len(out) == n:
            return out
    return out


def tuned_layers(m, target):
    """The optimized graph of ``m`` and, per task a template computes, the task and the node of its first layer."""
    g = optimized_graph(m, target)
    nodes = {n.name: n for n in g.nodes}
    return g, [(t, nodes[t.nodes[0]]) for t in extract_tasks(g, target, search=Search.TEMPLATES) if t.task is not None]


def timed(task, index: int, seconds: float) -> tuple[MeasureInput, MeasureResult]:
    """A record of ``task``'s config ``index`` timed alone at ``seconds`` per call."""
    return MeasureInput(task, index), MeasureResult((seconds,), ErrorKind.NONE, "", 0.1, time.time())


# the templates of a network's layers, by name (as records and kernels name them)
from tensortune.autotvm.templates import (conv2d_nchwc_packed_template, conv2d_winograd_template,  # noqa: E402
                                          default_template, depthwise_conv2d_nchwc_packed_template)

CONV_TEMPLATE = conv2d_nchwc_packed_template.name
WINOGRAD_TEMPLATE = conv2d_winograd_template.name
DEPTHWISE_TEMPLATE = depthwise_conv2d_nchwc_packed_template.name
DEFAULT_TEMPLATE = default_template.name

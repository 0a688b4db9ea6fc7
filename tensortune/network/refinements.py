"""What ``refine`` writes to a tuning log and ``compile`` reads back: records of layers timed inside a compiled
network, marked with the network's fingerprint and the layer's channel blocks (``Record.network``), and the
choice the latest refinement made for a layer."""
from __future__ import annotations

import hashlib
import json
import statistics
import warnings
from typing import Sequence

from ..autotvm.record import Record, RecordWarning, task_records
from ..autotvm.task import Task
from ..graph.ir import Graph
from ..operators import Binary, Unary
from ..ops import default_block
from ..target import Target


def network_fingerprint(g: Graph, target: Target) -> str:
    """A short key of an optimized graph for a target: its nodes, in order, with their operators, shapes and the
    channel blocks that are not the default (a refinement holds for one layout plan; a plan of default blocks keeps
    the key it had before blocks were planned)."""
    def value(v):
        shape, block = list(v.shape), v.layout.block
        default = block and len(shape) == 4 and block == default_block(shape[1], max(1, target.lanes(v.dtype)))
        return shape + [block] if block and len(shape) == 4 and not default else shape

    nodes = []
    for node in g.nodes:  # a fused node counts as the nodes it fuses (``Op.unfused``), as refined before fusion
        graph, parts = node.op.unfused(g, node)
        for n in parts:
            nodes.append([n.name, _kind(n.op), [value(graph.values[v]) for v in (*n.inputs, *n.outputs)]])
    text = json.dumps([str(target), g.name, list(g.inputs), nodes], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _kind(op) -> str:
    """An operator's kind as fingerprints have named it: elementwise operators by their arity, as before each was a
    class of its own (so that refinements of older versions still apply)."""
    return "Unary" if isinstance(op, Unary) else "Binary" if isinstance(op, Binary) else type(op).__name__


def layer_tag(fingerprint: str, blocks: tuple[int, int] | None) -> str:
    """What an in-network record of a layer is marked with (``Record.network``): the network's fingerprint and the
    layer's (input, output) channel blocks ("any" for a dense layer), since nodes of one workload in other blocks
    are another layer. Records of the fingerprint alone were written before layers had blocks."""
    return f"{fingerprint}@{'any' if blocks is None else f'{blocks[0]}x{blocks[1]}'}"


def of_network(record: Record, fingerprint: str) -> bool:
    """Whether an in-network record was timed in the network of this fingerprint (any of its layers)."""
    return record.network == fingerprint or record.network.startswith(fingerprint + "@")


def latest_choice(records: Sequence[Record], tags: Sequence[str], tasks: Sequence[Task]) -> tuple[Task, int] | None:
    """The task and config index of the fastest candidate (median cost) in the latest refinement among ``records``
    marked with one of ``tags`` (``layer_tag``) for one of ``tasks`` (a layer's alternatives), or None when there is
    none. On a tie, the first timed."""
    mine = [r for r in records if r.network in tags and r.ok and any(r.matches(t) for t in tasks)]
    if not mine:
        return None
    latest = max(r.timestamp for r in mine)
    found = []
    for task in tasks:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RecordWarning)  # stale records: compile warns about them
            found += [(statistics.median(r.costs), task, r.config_index)
                      for r in task_records([r for r in mine if r.timestamp == latest], task) if r.costs]
    if not found:
        return None
    _, task, index = min(found, key=lambda f: f[0])
    return task, index

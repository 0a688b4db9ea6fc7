"""Choosing each layer's kernel by timing it inside the compiled network.

A kernel timed alone runs with its weights and input hot in the cache, its input laid out by nobody; inside a
network the weights of the whole model (45 MB for ResNet-18) pass through the cache on every run and the input
was written by the previous kernel's threads, so the ranking of a layer's configs alone is not their ranking in
the network (measured on ResNet-18, AVX2: kernels 16.5 ms in sum alone, 28.6 ms inside the network).

``refine`` takes, for each layer (a workload and its alternatives: Winograd, the untuned kernel), the ``top_k``
fastest configs of the log as timed alone, the fastest of each other template and kind of config (``config_kind``:
how it splits the work among threads, a Winograd kernel's tile size), and the untuned kernel. A layer's cost in the
network is its calls' time **plus the time of the calls that read its output**: how a kernel's threads leave its
output (which core holds which rows) decides what the next layer pays to read it, a cost a layer's own timing never
shows (MobileNetV2, Intel Xeon: after a first layer that split columns among threads, chosen by its own time
inside the network, the next depthwise layer took 68 us; after one splitting rows, 45 us). So the layers are timed in phases, groups of
layers none of which reads another's output: in a phase, network ``i`` runs each of the phase's layers' ``i``-th
candidate and every other layer its choice so far (first the choice of the log's latest refinement of this
network, else its fastest alone), so what a layer's readers spend varies with that layer's candidate alone. A
layer's best candidate depends on its neighbours' choices (how the previous layer's threads left its input, what
the next one's pay to read its output), so one pass, whose early phases time layers beside neighbours not yet
refined, is a first step of a descent: running ``refine`` again starts from those choices and is a second. Each
network is profiled ``rounds`` times in turn (each layer's seconds per call among the others,
``NetworkModule.profile``), and each layer keeps its candidate of least median cost (a layer: the nodes of one
workload whose inputs and outputs have the same channel blocks). Those costs go to the
log as records marked with the network's fingerprint and the layer's blocks (``Record.network``); ``compile
--log`` (``TunedKernels``) then chooses each layer's kernel among the latest of them. A whole-network check times
the untuned network, the one of the fastest configs alone and the chosen one, in turn, and reports them.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Mapping, Sequence, TypeVar

import numpy as np

from ..autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from ..autotvm.record import Record, RecordWarning, load_records, task_records, write_records
from ..autotvm.task import Task
from ..dtype import DType
from ..errors import ArgumentError
from ..graph.ir import Graph, Node
from ..graph.passes.plan_layout import channel_block
from ..graph.tasks import DEFAULT_TEMPLATE, is_flat, node_tasks
from ..target import Target
from .declare import declare
from .expansion import fused_expansions
from .kernels import KernelDef

T = TypeVar("T")


def network_fingerprint(g: Graph, target: Target) -> str:
    """A short key of an optimized graph for a target: its nodes, in order, with their operators, shapes and the
    channel blocks that are not the default (a refinement holds for one layout plan; a plan of default blocks keeps
    the key it had before blocks were planned)."""
    lanes = max(1, target.lanes(DType.float32))

    def value(v):
        shape, block = list(g.values[v].shape), g.values[v].layout.block
        return shape + [block] if block and len(shape) == 4 and block != channel_block(shape[1], lanes) else shape

    nodes = [[n.name, type(n.op).__name__, [value(v) for v in (*n.inputs, *n.outputs)]] for n in g.nodes]
    text = json.dumps([str(target), g.name, list(g.inputs), nodes], default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def layer_tag(fingerprint: str, blocks: tuple[int, int] | None) -> str:
    """What an in-network record of a layer is marked with (``Record.network``): the network's fingerprint and the
    layer's (input, output) channel blocks ("any" for a dense layer), since nodes of one workload in other blocks
    are another layer. Records of the fingerprint alone were written before layers had blocks."""
    return f"{fingerprint}@{'any' if blocks is None else f'{blocks[0]}x{blocks[1]}'}"


def of_network(record: Record, fingerprint: str) -> bool:
    """Whether an in-network record was timed in the network of this fingerprint (any of its layers)."""
    return record.network == fingerprint or record.network.startswith(fingerprint + "@")


@dataclass(frozen=True)
class Candidate:
    """One way to compute a layer: config ``index`` of ``task`` (the ``nchwc_default`` task: the untuned kernel)
    and its seconds per call timed alone (None for an untuned kernel the log never measured)."""

    task: Task
    index: int
    alone: float | None
    one_row: bool = False  # the task of the layer's pixels as one row (graph.tasks.flat_args)

    @property
    def is_default(self) -> bool:
        return self.task.name == DEFAULT_TEMPLATE

    @property
    def label(self) -> str:
        return "default" if self.is_default else f"{self.task.name}{' (one row)' * self.one_row}#{self.index}"


@dataclass
class Layer:
    """The nodes of one workload and channel blocks, and the candidates compared for them."""

    workload: str
    nodes: list[str]
    candidates: list[Candidate]
    blocks: tuple[int, int] | None = None  # (input, output) channel blocks of its nodes; None: a dense layer
    seconds: list[list[float]] = field(default_factory=list)  # per candidate: per round, seconds per call and its readers'

    def median(self, k: int) -> float:
        return statistics.median(self.seconds[k]) if k < len(self.seconds) and self.seconds[k] else float("inf")

    @property
    def chosen(self) -> int:
        return min(range(len(self.candidates)), key=self.median)


@dataclass
class RefineResult:
    """What ``refine`` compared and chose; ``check`` holds the whole-network seconds (median) of the untuned
    network, the one of the fastest configs alone, and the chosen one."""

    fingerprint: str
    layers: list[Layer]
    check: dict[str, float]
    wall_s: float
    records: int
    skipped: bool = False

    def rows(self) -> list[dict]:
        return [{"workload": l.workload, "blocks": l.blocks, "nodes": len(l.nodes), "chosen": l.candidates[l.chosen].label,
                 "candidates": [{"kernel": c.label, "alone_s": c.alone, "in_network_s": l.median(k)}
                                for k, c in enumerate(l.candidates)]} for l in self.layers]


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


def kernel_of(g: Graph, node: Node, candidate: Candidate) -> KernelDef:
    """The fused kernel of ``node`` computed by ``candidate``."""
    if candidate.is_default:
        return declare(g, node, candidate.task.target)
    from .tuned import tuned_conv

    return tuned_conv(g, node, candidate.task, candidate.index)


def config_kind(config: Mapping) -> tuple:
    """The knobs of a convolution config that rank it inside a network otherwise than alone: how it splits its
    work among threads and, for a Winograd kernel, its tile size. For a direct convolution, the outer loop run in
    parallel (the first of ``reorder_outer``: output-channel tiles, rows or columns) and how many are fused
    (``parallel``); for a Winograd one, the product's parallel loop (the first of ``reorder_product``: positions,
    tiles or channel blocks) and the tile size; for a depthwise one, how many outer loops are fused into the
    parallel one (``parallel``); () for configs without these knobs.

    Inside a network a Winograd kernel's cost is not the one timed alone, by these two knobs: the product's split
    decides which of the transformed tensors handed from one parallel stage to the next cross between cores, and
    the tile size how large the transformed weights are (16, 36 or 64 positions for 9 weights), which a network
    streams from memory on every run while a kernel timed alone finds them in the cache. Measured on ResNet-18,
    AVX-512: configs within 5% of each other alone ran 1.1x to 2.1x their time alone inside the network."""
    order = config.get("reorder_outer")
    if order:
        return order[0], config.get("parallel")
    product = config.get("reorder_product")
    if product:
        return product[0], config.get("tile_size")
    return (config["parallel"],) if "parallel" in config else ()


def layer_candidates(g: Graph, target: Target, records: Sequence[Record], top_k: int,
                     skip: AbstractSet[str] = frozenset()) -> list[Layer]:
    """Each tunable layer's ``top_k`` fastest configs timed alone (distinct, each one the network's layout can
    run; a layer is the nodes of one workload and one pair of channel blocks: nodes of a workload may read inputs
    of different blocks), then the fastest of each template and kind (``config_kind``) not among them, then its
    untuned kernel unless there; layers whose only candidate is the untuned kernel are left out (nothing to
    choose), and so are the nodes in ``skip``."""
    from .layouts import runs_with
    from .tuned import _BlockMismatch, _blocks

    layers: dict[tuple, Layer] = {}
    lanes = max(1, target.lanes(DType.float32))
    for node in g.nodes:
        if node.name in skip:
            continue
        blocks = _blocks(g, node)  # a config of other channel blocks cannot run here: not built to find out
        tasks = node_tasks(g, node, target)
        if not tasks:
            continue
        key = (tasks[0].workload_key, blocks)
        if key in layers:
            layers[key].nodes.append(node.name)
            continue
        found = []
        for task in tasks:
            mine = [r for r in records if r.matches(task)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RecordWarning)  # stale records: compile warns about them
                found += [(r.cost, task, r.config_index, r.config) for r in task_records(mine, task)
                          if r.ok and runs_with(task, r.config, lanes, blocks)]
        found.sort(key=lambda f: f[0])
        chosen: list[Candidate] = []
        seen, kinds = set(), set()
        for cost, task, index, config in found:
            # the top_k fastest; then the fastest of each other template (a direct convolution where Winograd
            # configs lead alone) and of each other kind (``config_kind``): a kernel that reads its input in
            # another order than the previous layer's threads wrote it, or that streams more weights, is the
            # likeliest to rank otherwise in the network
            if (task.workload_key, index) in seen or not np.isfinite(cost):
                continue
            kind = (task.workload_key, *config_kind(config))  # a view of the layer (one row) is a template apart
            if len(chosen) >= top_k and kind in kinds:
                continue
            candidate = Candidate(task, index, cost, is_flat(g, node, task))
            if not candidate.is_default:
                try:
                    kernel_of(g, node, candidate)
                except _BlockMismatch:
                    continue
            seen.add((task.workload_key, index))
            kinds.add(kind)
            chosen.append(candidate)
        if not any(c.is_default for c in chosen):
            default = next(t for t in tasks if t.name == DEFAULT_TEMPLATE)
            alone = next((f[0] for f in found if f[1] is default), None)
            chosen.append(Candidate(default, 0, alone))
        if len(chosen) > 1:
            layers[key] = Layer(tasks[0].workload_key, [node.name], chosen, blocks)
    return list(layers.values())


def refine(model, log: str | os.PathLike, target: Target | None = None, top_k: int = 3, rounds: int = 15,
           runs: int = 5, shapes: Mapping[str, Sequence[int]] | None = None, num_threads: int | None = None,
           check: bool = True, force: bool = True, progress: Callable[[str], None] | None = None,
           slow_spell_retries: int = 3) -> RefineResult:
    """Time each layer's ``top_k`` configs of ``log`` (and its untuned kernel) inside the compiled network, each
    with the calls that read its output (see the module docstring), and append the costs to ``log``, so that
    ``compile(model, log=log)`` runs each layer's cheapest there.

    ``rounds`` profiles of ``runs`` runs per candidate network; ``check`` times whole networks at the end. A round
    timed while a speed probe ran more than 25% slower than its fastest (another process had a core: ``measure.
    steadiness``) is timed again, up to ``slow_spell_retries`` more times (0: no probe); the steadiest is kept.
    Without ``force``, nothing is timed when the log's latest refinement of this network came after its last
    trial (``RefineResult.skipped``): a rerun of a finished ``tune-model`` repeats nothing.
    """
    from .compile_model import load_program, optimized_graph
    from .program import build_program

    if not isinstance(top_k, int) or top_k < 1 or not isinstance(rounds, int) or rounds < 1 or runs < 1:
        raise ArgumentError(f"top_k, rounds and runs must be integers >= 1, got {top_k!r}, {rounds!r}, {runs!r}")
    if not isinstance(slow_spell_retries, int) or slow_spell_retries < 0:
        raise ArgumentError(f"slow_spell_retries must be an integer >= 0, got {slow_spell_retries!r}")
    if not os.path.isfile(log):
        raise ArgumentError(f"no such tuning log: {os.fspath(log)}; tune the network first "
                            "('tensortune tune-model MODEL --trials N --log LOG')")
    say = progress or (lambda _: None)
    start = time.perf_counter()
    target = target or Target.host()
    from .module import random_inputs, runs_here

    if not runs_here(target):
        raise ArgumentError(f"refine times the network on this machine ('{Target.host()}'), which cannot run code "
                            f"for '{target}'; refine on a machine of that target")
    everything = load_records(log, in_network=True)
    alone = [r for r in everything if not r.network]
    g = optimized_graph(model, target, shapes, records=alone)  # the layout compile plans from the same records
    fingerprint = network_fingerprint(g, target)
    refined = [r.timestamp for r in everything if of_network(r, fingerprint)]
    if not force and refined and max(refined) >= max((r.timestamp for r in alone), default=0.0):
        say("refine: the log's latest refinement of this network is newer than its last trial; nothing to do")
        return RefineResult(fingerprint, [], {}, time.perf_counter() - start, 0, skipped=True)
    # an expansion fused into its depthwise convolution runs neither node's tuned kernel: nothing to choose there
    computed_by = {pw.name: dw for dw, pw in fused_expansions(g, target).items()}
    layers = layer_candidates(g, target, alone, top_k, skip={*computed_by, *computed_by.values()})
    by_node = {n: layer for layer in layers for n in layer.nodes}
    if not layers:
        say("refine: no layer has a tuned config to compare with its untuned kernel")
        return RefineResult(fingerprint, [], {}, time.perf_counter() - start, 0)

    def network(pick: Callable[[Layer], int]):
        def choose(graph: Graph, node: Node, tgt: Target) -> KernelDef:
            layer = by_node.get(node.name)
            return declare(graph, node, tgt) if layer is None else kernel_of(graph, node, layer.candidates[pick(layer)])

        return load_program(build_program(g, target, choose), target, num_threads)

    readers = _readers(g, computed_by)
    steady = _steady_rounds(slow_spell_retries, num_threads, say)
    # each layer's choice so far: the log's latest refinement's, else its fastest alone
    current = {id(layer): _previous_choice(layer, everything, fingerprint) for layer in layers}
    phases = _phases(g, layers)
    inputs = None
    for layer in layers:
        layer.seconds = [[] for _ in layer.candidates]
    for p, phase in enumerate(phases, 1):
        mine = {id(layer) for layer in phase}
        count = max(len(layer.candidates) for layer in phase)
        modules = []
        for i in range(count):
            say(f"refine: phase {p}/{len(phases)}, building candidate network {i + 1}/{count}")
            modules.append(network(lambda layer, i=i: min(i, len(layer.candidates) - 1) if id(layer) in mine
                                   else current[id(layer)]))
        inputs = inputs or random_inputs(modules[0])
        say(f"refine: phase {p}/{len(phases)}, timing {sum(len(l.candidates) for l in phase)} kernels of "
            f"{len(phase)} layers in {count} networks, {rounds} rounds")
        for r in range(rounds):
            order = (*range(r % count, count), *range(r % count))  # a different network first each round
            profiles = steady(lambda: [(i, {row["node"]: row["seconds"] for row in
                                            modules[i].profile(*inputs, repeat=runs)}) for i in order])
            for i, per_node in profiles:
                for layer in phase:
                    if i < len(layer.candidates):  # a layer of fewer candidates runs its last in the other networks
                        layer.seconds[i].append(sum(per_node[n] + sum(per_node.get(m, 0.0) for m in readers[n])
                                                    for n in layer.nodes) / len(layer.nodes))
        for layer in phase:
            current[id(layer)] = layer.chosen
    stamp = time.time()
    spent = time.perf_counter() - start
    records = [dataclasses.replace(Record.from_measurement(
        MeasureInput(c.task, c.index), MeasureResult(tuple(layer.seconds[k]), ErrorKind.NONE, "", spent, stamp)),
        network=layer_tag(fingerprint, layer.blocks)) for layer in layers for k, c in enumerate(layer.candidates)
        if layer.seconds[k]]
    written = write_records(log, records)
    timings: dict[str, float] = {}
    if check:
        say("refine: timing the untuned, the fastest-alone and the chosen networks")
        nets = {"untuned": load_program(build_program(g, target, None), target, num_threads),
                "fastest_alone": network(lambda layer: 0), "chosen": network(lambda layer: layer.chosen)}
        timings = whole_network_seconds(nets, inputs, rounds, steady=steady)
    return RefineResult(fingerprint, layers, timings, time.perf_counter() - start, written)


def _previous_choice(layer: Layer, records: Sequence[Record], fingerprint: str) -> int:
    """The candidate of ``layer`` that the latest refinement of this network in ``records`` chose, or 0 (its
    fastest alone) when none did or its choice is no candidate now."""
    tasks = tuple(dict.fromkeys(c.task for c in layer.candidates))
    found = latest_choice(records, (layer_tag(fingerprint, layer.blocks), fingerprint), tasks)
    if found is not None:
        for k, c in enumerate(layer.candidates):
            if c.task is found[0] and c.index == found[1]:
                return k
    return 0


def _readers(g: Graph, computed_by: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """The nodes that read each node's outputs (a node whose kernel another one computes, an expansion fused into
    its depthwise convolution, reads as that one: ``computed_by``)."""
    reads: dict[str, list[str]] = {}
    by = computed_by or {}
    for node in g.nodes:
        for v in node.inputs:
            reads.setdefault(v, []).append(by.get(node.name, node.name))
    return {node.name: [m for v in node.outputs for m in reads.get(v, ())] for node in g.nodes}


def _phases(g: Graph, layers: Sequence[Layer]) -> list[list[Layer]]:
    """The layers in groups none of which reads another's output (greedy colouring of the layers, in network
    order, by the producer-reader pairs of their nodes): a phase varies its layers while the others keep their
    choice, so what a layer's readers spend is the layer's doing."""
    layer_of = {n: layer for layer in layers for n in layer.nodes}
    readers = _readers(g)
    neighbours: dict[int, set[int]] = {id(layer): set() for layer in layers}
    for layer in layers:
        for n in layer.nodes:
            for m in readers[n]:
                other = layer_of.get(m)
                if other is not None and other is not layer:
                    neighbours[id(layer)].add(id(other))
                    neighbours[id(other)].add(id(layer))
    colour: dict[int, int] = {}
    for layer in layers:
        taken = {colour[o] for o in neighbours[id(layer)] if o in colour}
        colour[id(layer)] = next(c for c in range(len(layers) + 1) if c not in taken)
    return [[l for l in layers if colour[id(l)] == c] for c in sorted(set(colour.values()))]


def whole_network_seconds(modules: Mapping[str, object], inputs: Sequence[np.ndarray], rounds: int,
                          runs: int = 5, steady: Callable[[Callable[[], T]], T] | None = None) -> dict[str, float]:
    """Median seconds per run of each module, timed in turn (``rounds`` timings of ``runs`` runs each); ``steady``
    takes each round's timing (``_steady_rounds``)."""
    evaluators = {k: m.time_evaluator(number=runs, repeat=1) for k, m in modules.items()}
    seconds: dict[str, list[float]] = {k: [] for k in modules}
    names = list(modules)
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        timed = (steady or (lambda f: f()))(lambda: [(k, evaluators[k](*inputs).mean) for k in order])
        for k, s in timed:
            seconds[k].append(s)
    return {k: statistics.median(v) for k, v in seconds.items()}


def _steady_rounds(retries: int, num_threads: int | None,
                   say: Callable[[str], None]) -> Callable[[Callable[[], T]], T]:
    """``steady(round)``: the round's timing taken with a slow-spell guard (``SlowSpellGuard``: probed before and
    after, taken again while the machine runs slow, the steadiest kept; a round never steady is kept, and said);
    the round itself when ``retries`` is 0."""
    if retries == 0:
        return lambda timing: timing()
    from ..autotvm.measure.steadiness import SlowSpellGuard, SpeedProbe
    from ..env import settings

    guard = SlowSpellGuard(SpeedProbe(num_threads or settings().num_threads), retries)

    def steady(timing: Callable[[], T]) -> T:
        result, note = guard.time(timing)
        if note:
            say(f"refine: a round {note}")
        return result

    return steady

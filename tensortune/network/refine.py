"""Choosing each layer's kernel by timing it inside the compiled network.

A kernel timed alone runs with its weights and input hot in the cache, its input laid out by nobody; inside a
network the weights of the whole model pass through the cache on every run and the input was written by the
previous kernel's threads, so the ranking of a layer's configs alone is not their ranking in the network
(BENCHMARKS.md has the measurements).

``refine`` takes, for each layer (a workload and its alternatives: Winograd, the untuned kernel), the ``top_k``
fastest configs of the log as timed alone, the fastest of each other template and kind of config (``config_kind``:
how it splits the work among threads, a Winograd kernel's tile size), and the untuned kernel. A layer's cost in the
network is its calls' time **plus the time of the calls that read its output**: how a kernel's threads leave its
output (which core holds which rows) decides what the next layer pays to read it, a cost a layer's own timing never
shows. So the layers are timed in phases, groups of layers none of which reads another's output: in a phase,
network ``i`` runs each of the phase's layers' ``i``-th candidate and every other layer its choice so far (first
the choice of the log's latest refinement of this network, else its fastest alone), so what a layer's readers
spend varies with that layer's candidate alone. A layer's best candidate depends on its neighbours' choices (how
the previous layer's threads left its input, what the next one's pay to read its output), so one pass, whose early
phases time layers beside neighbours not yet refined, is a first step of a descent: running ``refine`` again
starts from those choices and is a second. Each network is profiled ``rounds`` times in turn (each layer's seconds
per call among the others, ``NetworkModule.profile``), and each layer keeps its candidate of least median cost (a
layer: the nodes of one workload whose inputs and outputs have the same channel blocks). Those costs go to the log
as records marked with the network's fingerprint and the layer's blocks (``Record.network``); ``compile --log``
(``TunedKernels``) then chooses each layer's kernel among the latest of them. A whole-network check times the
untuned network, the one of the fastest configs alone and the chosen one, in turn, and reports them.
"""
from __future__ import annotations

import dataclasses
import os
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence, TypeVar

import numpy as np

from ..autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from ..autotvm.measure.steadiness import SlowSpellGuard, SpeedProbe
from ..autotvm.record import Record, RecordWarning, load_records, task_records, write_records
from ..autotvm.task import Task
from ..env import settings
from ..errors import ArgumentError
from ..graph.ir import Graph, Node
from ..operators.conv_tasks import BlockMismatch, is_default, is_flat
from ..operators.kernel import KernelDef
from ..target import Target
from .compile_model import load_program, optimized_graph
from .layouts import runs_with
from .module import random_inputs, runs_here
from .program import build_program, default_kernel
from .refinements import latest_choice, layer_tag, network_fingerprint, of_network

T = TypeVar("T")


@dataclass(frozen=True)
class Candidate:
    """One way to compute a layer: config ``index`` of ``task`` (the ``nchwc_default`` task: the untuned kernel)
    and its seconds per call timed alone (None for an untuned kernel the log never measured)."""

    task: Task
    index: int
    alone: float | None
    one_row: bool = False  # the task of the layer's pixels as one row (conv_tasks.flat_workload)

    @property
    def is_default(self) -> bool:
        return is_default(self.task)

    @property
    def label(self) -> str:
        return "default" if self.is_default else f"{self.task.name}{' (one row)' * self.one_row}#{self.index}"


@dataclass(frozen=True)
class Layer:
    """The nodes of one workload and channel blocks, the candidates compared for them and, once timed, each
    candidate's seconds per call and its readers' in each round."""

    workload: str
    nodes: tuple[str, ...]
    candidates: tuple[Candidate, ...]
    blocks: tuple[int, int] | None = None  # (input, output) channel blocks of its nodes; None: a dense layer
    seconds: tuple[tuple[float, ...], ...] = ()  # per candidate: per round

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
    layers: tuple[Layer, ...]
    check: dict[str, float]
    wall_s: float
    records: int
    skipped: bool = False

    def rows(self) -> list[dict]:
        return [{"workload": layer.workload, "blocks": layer.blocks, "nodes": len(layer.nodes),
                 "chosen": layer.candidates[layer.chosen].label,
                 "candidates": [{"kernel": c.label, "alone_s": c.alone, "in_network_s": layer.median(k)}
                                for k, c in enumerate(layer.candidates)]} for layer in self.layers]


def kernel_of(g: Graph, node: Node, candidate: Candidate) -> KernelDef:
    """The fused kernel of ``node`` computed by ``candidate``."""
    if candidate.is_default:
        return default_kernel(g, node, candidate.task.target)
    return node.op.tuned_kernel(g, node, candidate.task, candidate.index)


def config_kind(task: Task, config: Mapping) -> tuple:
    """The knobs of a config that rank it inside a network otherwise than alone (its template's
    ``config_kind``): how it splits its work among threads and, for a Winograd kernel, its tile size. Inside a
    network a kernel reads what other threads wrote and streams its weights from memory, which a kernel timed alone
    never does; configs that split their work alike rank alike, others may not (BENCHMARKS.md)."""
    return tuple(task.template.config_kind(config))


def layer_candidates(g: Graph, target: Target, records: Sequence[Record], top_k: int) -> list[Layer]:
    """Each tunable layer's ``top_k`` fastest configs timed alone (distinct, each one the network's layout can
    run; a layer is the nodes of one workload and one pair of channel blocks: nodes of a workload may read inputs
    of different blocks), then the fastest of each template and kind (``config_kind``) not among them, then its
    untuned kernel unless there; layers whose only candidate is the untuned kernel are left out (nothing to
    choose)."""
    nodes: dict[tuple, list[str]] = {}
    candidates: dict[tuple, list[Candidate]] = {}
    for node in g.nodes:
        tasks = node.op.tasks(g, node, target)
        if not tasks:
            continue
        blocks = node.op.layer_blocks(g, node)  # a config of other blocks cannot run here: not built to find out
        key = (tasks[0].workload_key, blocks)
        nodes.setdefault(key, []).append(node.name)
        if key not in candidates:
            candidates[key] = _candidates(g, node, tasks, records, top_k, blocks)
    return [Layer(key[0], tuple(nodes[key]), tuple(found), key[1]) for key, found in candidates.items()
            if len(found) > 1]


def _candidates(g: Graph, node: Node, tasks: Sequence[Task], records: Sequence[Record], top_k: int,
                blocks: tuple[int, int] | None) -> list[Candidate]:
    """The candidates of one layer (``layer_candidates``), ``node`` its first."""
    found = []
    for task in tasks:
        mine = [r for r in records if r.matches(task)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RecordWarning)  # stale records: compile warns about them
            found += [(r.cost, task, r.config_index, r.config) for r in task_records(mine, task)
                      if r.ok and runs_with(task, r.config, blocks)]
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
        kind = (task.workload_key, *config_kind(task, config))  # a view (one row) is a template apart
        if len(chosen) >= top_k and kind in kinds:
            continue
        candidate = Candidate(task, index, cost, is_flat(g, node, task))
        if not candidate.is_default:
            try:
                kernel_of(g, node, candidate)
            except BlockMismatch:
                continue
        seen.add((task.workload_key, index))
        kinds.add(kind)
        chosen.append(candidate)
    if not any(c.is_default for c in chosen):
        default = next(t for t in tasks if is_default(t))
        alone = next((f[0] for f in found if f[1] is default), None)
        chosen.append(Candidate(default, 0, alone))
    return chosen


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
    _check_arguments(log, top_k, rounds, runs, slow_spell_retries)
    target = target or Target.host()
    if not runs_here(target):
        raise ArgumentError(f"refine times the network on this machine ('{Target.host()}'), which cannot run code "
                            f"for '{target}'; refine on a machine of that target")
    say = progress or (lambda _: None)
    start = time.perf_counter()
    everything = load_records(log, in_network=True)
    alone = [r for r in everything if not r.network]
    g = optimized_graph(model, target, shapes, records=alone)  # the layout compile plans from the same records
    fingerprint = network_fingerprint(g, target)
    refined = [r.timestamp for r in everything if of_network(r, fingerprint)]
    if not force and refined and max(refined) >= max((r.timestamp for r in alone), default=0.0):
        say("refine: the log's latest refinement of this network is newer than its last trial; nothing to do")
        return RefineResult(fingerprint, (), {}, time.perf_counter() - start, 0, skipped=True)
    layers = layer_candidates(g, target, alone, top_k)
    if not layers:
        say("refine: no layer has a tuned config to compare with its untuned kernel")
        return RefineResult(fingerprint, (), {}, time.perf_counter() - start, 0)
    networks = _Networks(g, target, layers, num_threads)
    steady = _steady_rounds(slow_spell_retries, num_threads, say)
    # each layer's choice so far: the log's latest refinement's, else its fastest alone
    start_choice = [_previous_choice(layer, everything, fingerprint) for layer in layers]
    layers, inputs = _time_in_phases(g, layers, networks, start_choice, rounds, runs, steady, say)
    written = write_records(log, _in_network_records(layers, fingerprint, time.perf_counter() - start))
    timings: dict[str, float] = {}
    if check:
        say("refine: timing the untuned, the fastest-alone and the chosen networks")
        nets = {"untuned": networks.untuned(), "fastest_alone": networks.build([0] * len(layers)),
                "chosen": networks.build([layer.chosen for layer in layers])}
        timings = whole_network_seconds(nets, inputs, rounds, steady=steady)
    return RefineResult(fingerprint, tuple(layers), timings, time.perf_counter() - start, written)


def _check_arguments(log, top_k: int, rounds: int, runs: int, slow_spell_retries: int) -> None:
    if not isinstance(top_k, int) or top_k < 1 or not isinstance(rounds, int) or rounds < 1 or runs < 1:
        raise ArgumentError(f"top_k, rounds and runs must be integers >= 1, got {top_k!r}, {rounds!r}, {runs!r}")
    if not isinstance(slow_spell_retries, int) or slow_spell_retries < 0:
        raise ArgumentError(f"slow_spell_retries must be an integer >= 0, got {slow_spell_retries!r}")
    if not os.path.isfile(log):
        raise ArgumentError(f"no such tuning log: {os.fspath(log)}; tune the network first "
                            "('tensortune tune-model MODEL --trials N --log LOG')")


def load_network(g: Graph, target: Target, choose, num_threads: int | None):
    """The compiled module of ``g`` with each node's kernel from ``choose`` (None: the default kernels)."""
    return load_program(build_program(g, target, choose), target, num_threads)


class _Networks:
    """Builds the network in which each layer runs a given candidate (by layer, its index) and every other node
    its default kernel."""

    def __init__(self, g: Graph, target: Target, layers: Sequence[Layer], num_threads: int | None):
        self.g, self.target, self.num_threads = g, target, num_threads
        self.layers = list(layers)
        self.layer_of = {n: k for k, layer in enumerate(self.layers) for n in layer.nodes}

    def build(self, picks: Sequence[int]):
        def choose(graph: Graph, node: Node, tgt: Target) -> KernelDef:
            k = self.layer_of.get(node.name)
            if k is None:
                return default_kernel(graph, node, tgt)
            return kernel_of(graph, node, self.layers[k].candidates[picks[k]])

        return load_network(self.g, self.target, choose, self.num_threads)

    def untuned(self):
        return load_network(self.g, self.target, None, self.num_threads)


def _time_in_phases(g: Graph, layers: list[Layer], networks: _Networks, choice: list[int], rounds: int, runs: int,
                    steady, say) -> tuple[list[Layer], list[np.ndarray]]:
    """Each phase's candidate networks profiled ``rounds`` times in turn (see the module docstring); the layers
    with their seconds, and the inputs they ran on. ``choice``: each layer's choice so far, by index."""
    readers = _readers(g)
    seconds: list[list[list[float]]] = [[[] for _ in layer.candidates] for layer in layers]
    choice = list(choice)
    phases = _phase_indices(g, layers)
    inputs = None
    for p, mine in enumerate(phases, 1):
        count = max(len(layers[k].candidates) for k in mine)
        modules = []
        for i in range(count):
            say(f"refine: phase {p}/{len(phases)}, building candidate network {i + 1}/{count}")
            picks = list(choice)
            for k in mine:  # a layer of fewer candidates runs its last in the other networks
                picks[k] = min(i, len(layers[k].candidates) - 1)
            modules.append(networks.build(picks))
        inputs = inputs if inputs is not None else random_inputs(modules[0])
        say(f"refine: phase {p}/{len(phases)}, timing {sum(len(layers[k].candidates) for k in mine)} kernels of "
            f"{len(mine)} layers in {count} networks, {rounds} rounds")
        for r in range(rounds):
            order = (*range(r % count, count), *range(r % count))  # a different network first each round
            profiles = steady(lambda: [(i, {row["node"]: row["seconds"] for row in
                                            modules[i].profile(*inputs, repeat=runs)}) for i in order])
            for i, per_node in profiles:
                for k in mine:
                    if i < len(layers[k].candidates):
                        seconds[k][i].append(sum(per_node[n] + sum(per_node.get(m, 0.0) for m in readers[n])
                                                 for n in layers[k].nodes) / len(layers[k].nodes))
        for k in mine:
            layers[k] = dataclasses.replace(layers[k], seconds=tuple(tuple(t) for t in seconds[k]))
            choice[k] = layers[k].chosen
    return layers, inputs


def _in_network_records(layers: Sequence[Layer], fingerprint: str, spent: float) -> list[Record]:
    """Each timed candidate's costs as a record marked with its layer (``refinements.layer_tag``)."""
    stamp = time.time()
    return [dataclasses.replace(Record.from_measurement(
        MeasureInput(c.task, c.index), MeasureResult(layer.seconds[k], ErrorKind.NONE, "", spent, stamp)),
        network=layer_tag(fingerprint, layer.blocks)) for layer in layers for k, c in enumerate(layer.candidates)
        if k < len(layer.seconds) and layer.seconds[k]]


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


def _readers(g: Graph) -> dict[str, list[str]]:
    """The nodes that read each node's outputs."""
    reads: dict[str, list[str]] = {}
    for node in g.nodes:
        for v in node.inputs:
            reads.setdefault(v, []).append(node.name)
    return {node.name: [m for v in node.outputs for m in reads.get(v, ())] for node in g.nodes}


def _phases(g: Graph, layers: Sequence[Layer]) -> list[list[Layer]]:
    """The layers in groups none of which reads another's output (``_phase_indices``)."""
    return [[layers[k] for k in phase] for phase in _phase_indices(g, layers)]


def _phase_indices(g: Graph, layers: Sequence[Layer]) -> list[list[int]]:
    """The layers (by index) in groups none of which reads another's output (greedy colouring of the layers, in
    network order, by the producer-reader pairs of their nodes): a phase varies its layers while the others keep
    their choice, so what a layer's readers spend is the layer's doing."""
    layer_of = {n: k for k, layer in enumerate(layers) for n in layer.nodes}
    readers = _readers(g)
    neighbours: list[set[int]] = [set() for _ in layers]
    for k, layer in enumerate(layers):
        for n in layer.nodes:
            for m in readers[n]:
                other = layer_of.get(m)
                if other is not None and other != k:
                    neighbours[k].add(other)
                    neighbours[other].add(k)
    colour: list[int] = []
    for k in range(len(layers)):
        taken = {colour[o] for o in neighbours[k] if o < k}
        colour.append(next(c for c in range(len(layers) + 1) if c not in taken))
    return [[k for k in range(len(layers)) if colour[k] == c] for c in sorted(set(colour))]


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
    guard = SlowSpellGuard(SpeedProbe(num_threads or settings().num_threads), retries)

    def steady(timing: Callable[[], T]) -> T:
        result, note = guard.time(timing)
        if note:
            say(f"refine: a round {note}")
        return result

    return steady

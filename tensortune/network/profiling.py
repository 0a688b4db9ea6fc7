"""Where a compiled network's time goes: each kernel call timed inside the network, beside its kernel's time alone.

``profile_network`` compiles a model (with a tuning log, as ``compile`` does) and profiles it on this machine:
``rounds`` profiles of ``repeat`` runs each (``NetworkModule.profile``), each call's median over the rounds, and the
whole network timed as one run. With a log, each call names the config that runs it (template and config index,
"default" for an untuned kernel; ``refined`` when ``refine`` chose it by timings inside the network) and that
config's time alone from the log: a call far slower inside the network than alone is where timings alone mislead
(weights streamed from memory, inputs written by other threads), the calls of largest share are where more trials
pay. The calls' times need not add up to the whole run's: each call is timed between two clock reads (the
threads wait for the clock), and the whole run is timed on its own.
"""
from __future__ import annotations

import os
import statistics
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

from ..build import resolve_target
from ..errors import ArgumentError
from ..operators.conv_tasks import is_default, is_flat
from ..operators.expansion import KIND as EXPANSION_KIND
from ..operators.expression_tasks import is_expression
from ..target import Target
from .compile_model import load_program, optimized_graph
from .module import random_inputs, runs_here
from .program import build_program
from .tasks import candidate_tasks
from .tuned import TunedKernels


@dataclass(frozen=True)
class CallProfile:
    """One kernel call of a network: its median seconds inside the network and, with a log, its config's time
    alone."""

    node: str
    kind: str
    function: str
    flops: int
    seconds: float
    kernel: str  # "TEMPLATE #INDEX" for a tuned config, "default" for a layer's untuned kernel, "-" for the rest
    # (and "1x1 expansion fused in" for a depthwise layer computing its expansion: ``operators.expansion``)
    refined: bool = False  # chosen by its timing inside the network (``refine``)
    alone: float | None = None  # its config's fastest time alone in the log, when it has one

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class NetworkProfile:
    """A profiled network: its calls in the order they run, and the median seconds of one whole run."""

    name: str
    target: str
    threads: int
    calls: tuple[CallProfile, ...]
    whole_s: float  # median seconds of one whole run (not profiled)
    log: str | None = None

    @property
    def calls_s(self) -> float:
        """The calls' seconds in sum (not ``whole_s``: each call is timed between two clock reads)."""
        return sum(c.seconds for c in self.calls)

    def to_json(self) -> dict:
        total = self.calls_s
        return {"name": self.name, "target": self.target, "threads": self.threads, "log": self.log,
                "whole_s": self.whole_s, "calls_s": total,
                "calls": [dict(asdict(c), gflops=c.gflops, share=c.seconds / total if total else 0.0)
                          for c in self.calls]}


def profile_network(model, log: str | os.PathLike | None = None, target: Target | str | None = None,
                    shapes: Mapping[str, Sequence[int]] | None = None, num_threads: int | None = None,
                    rounds: int = 5, repeat: int = 10) -> NetworkProfile:
    """Profile ``model`` (a path, bytes, ``ModelProto`` or ``Graph``) compiled with ``log`` on this machine, on
    random inputs: each call's median seconds over ``rounds`` profiles of ``repeat`` runs."""
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in (rounds, repeat)):
        raise ArgumentError(f"rounds and repeat must be integers >= 1, got {rounds!r} and {repeat!r}")
    tgt = resolve_target(target)
    if not runs_here(tgt):
        raise ArgumentError(f"profiling runs the network on this machine ('{Target.host()}'), which cannot run code "
                            f"for '{tgt}'; profile on a machine of that target")
    choose = None
    if log is not None:
        choose = TunedKernels(log, tgt)
    g = optimized_graph(model, tgt, shapes, records=choose.records if choose is not None else None)
    module = load_program(build_program(g, tgt, choose), tgt, num_threads)
    inputs = random_inputs(module)
    threads = module.num_threads if num_threads is None else num_threads
    runs = [module.profile(*inputs, repeat=repeat, num_threads=threads) for _ in range(rounds)]
    whole = module.time_evaluator(number=repeat, repeat=rounds, num_threads=threads)(*inputs).median
    nodes = {n.name: n for n in g.nodes}
    calls = []
    for i, row in enumerate(runs[0]):
        kernel, alone = "-", None
        node = nodes.get(row["node"])
        if row["kind"] == EXPANSION_KIND:  # no config of either node: the fused kernel's tiling is a rule
            kernel = "1x1 expansion fused in"
        elif node is not None:
            kernel, alone = (_config_of(choose, g, node, tgt) if choose is not None
                             else ("default" if candidate_tasks(g, node, tgt) else "-", None))
        calls.append(CallProfile(row["node"], row["kind"], row["function"], row["flops"],
                                 statistics.median(r[i]["seconds"] for r in runs), kernel,
                                 choose is not None and row["node"] in choose.refined, alone))
    return NetworkProfile(g.name, str(tgt), threads, tuple(calls), whole, None if log is None else os.fspath(log))


def _config_of(choose, g, node, target: Target) -> tuple[str, float | None]:
    """The label of the config ``choose`` (a ``TunedKernels`` that compiled the network) ran ``node`` with, and its
    fastest time alone in the log."""
    tasks = candidate_tasks(g, node, target)
    if not tasks:  # not a tunable layer (a pooling, a layout copy)
        return "-", None
    task = choose.applied_task.get(node.name) or next(t for t in tasks if is_default(t))
    index = choose.applied.get(node.name, (None, 0))[1]
    if is_default(task):
        return "default", choose.alone_seconds(task, index)
    view = " (one row)" if not is_expression(task) and is_flat(g, node, task) else ""
    return f"{task.name}{view} #{index}", choose.alone_seconds(task, index)

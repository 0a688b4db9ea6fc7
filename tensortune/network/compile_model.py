"""``compile``: an ONNX model (or a graph) -> one loaded ``NetworkModule``.

Import, the graph passes for the target's vector length, one kernel per remaining node (tuned configs from a
log where it has them, default schedules elsewhere), lowering once per distinct kernel, memory planning, one
C translation unit with the entry point, one shared library (cached by content). A model file compiled before
(same bytes, shapes, target and log) is loaded from the network cache instead (``cache.py``).
"""
from __future__ import annotations

import os
from typing import Callable, Mapping, Sequence

import numpy as np

from ..autotvm.record import Record
from ..build import resolve_target
from ..frontend.onnx import import_onnx
from ..graph.ir import Graph
from ..passes import optimize
from ..target import Target
from . import cache
from .backends import network_backend
from .layouts import choose_blocks
from .module import MANIFEST, ExportError, Manifest, NetworkLoadError, NetworkModule, load
from .program import ConstantArena, Program, build_program
from .tuned import TunedKernels


def optimized_graph(model, target: Target, shapes: Mapping[str, Sequence[int]] | None = None,
                    trace: Callable[[str, Graph], None] | None = None,
                    records: Sequence[Record] | None = None) -> Graph:
    """The graph of ``model`` (a path, bytes, ``ModelProto`` or ``Graph``) after every graph pass; with the
    ``records`` of a tuning log (timed alone), each convolution's channel block chosen from them
    (``layouts.choose_blocks``), else the default blocks."""
    graph = model if isinstance(model, Graph) else import_onnx(model, shapes)
    blocks = None
    if records:
        def blocks(g: Graph, tgt: Target):
            return choose_blocks(g, tgt, records)
    return optimize(graph, target, trace, blocks)


def compile(model, target: Target | str | None = None, log: str | os.PathLike | None = None,
            shapes: Mapping[str, Sequence[int]] | None = None, num_threads: int | None = None,
            trace: Callable[[str, Graph], None] | None = None) -> NetworkModule:
    """Compile a whole network for ``target`` (default: this machine) into one module.

    ``log``: a tuning log; each convolution or dense task it has a successful record for runs with that config, and
    the channel blocks of the layout between layers are chosen from it (``layouts``).
    ``shapes``: static shapes of inputs by name (needed for dynamic dimensions). ``trace(pass, graph)`` sees the
    graph after each pass.
    """
    tgt = resolve_target(target)
    key = cache.network_key(model, tgt, log, shapes) if trace is None else None
    if key is not None and (cache.network_dir(key) / MANIFEST).is_file():
        try:
            return load(cache.network_dir(key), num_threads)
        except NetworkLoadError:  # a damaged cache entry: compile again and replace it
            pass
    choose = TunedKernels(log, tgt) if log is not None else None
    module = load_program(network_program(model, tgt, choose, shapes, trace), tgt, num_threads)
    if key is not None:
        try:
            module.export(cache.network_dir(key))
        except ExportError:  # another process wrote it at the same time, or the cache is read-only: no cache
            pass
    return module


def network_program(model, target: Target, choose: TunedKernels | None = None,
                    shapes: Mapping[str, Sequence[int]] | None = None,
                    trace: Callable[[str, Graph], None] | None = None, arena: ConstantArena | None = None) -> Program:
    """The program of ``model`` (``optimized_graph``, then ``build_program`` with the tuned kernels of ``choose``
    and its constants placed in ``arena``)."""
    graph = optimized_graph(model, target, shapes, trace, choose.records if choose is not None else None)
    return build_program(graph, target, choose, arena=arena)


def load_program(program: Program, target: Target, num_threads: int | None = None,
                 constants: np.ndarray | None = None) -> NetworkModule:
    """Build (or find in the cache) and load a program, with its target's backend (``backends.py``);
    ``constants``: its arena when already packed (shared with other programs)."""
    source = program.source
    library = network_backend(target).build(source, target)
    manifest = Manifest(program.name, str(target), program.inputs, program.outputs, program.constants_bytes,
                        program.workspace_bytes, tuple(program.kernels), len(program.calls),
                        tuple(c.node for c in program.calls), program.buffers_bytes)
    arena = program.constant_arena() if constants is None else constants
    return NetworkModule(library, manifest, arena, source, num_threads)

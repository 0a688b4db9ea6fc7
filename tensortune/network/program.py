"""The program of a compiled network: kernel calls in order, each argument placed in an input, an output, the
constant arena or the planned workspace, and the source its target's backend emits for it (``backends.py``: for a
CPU, C with one entry point that runs the whole network).

``build_program`` lowers each distinct kernel once and plans the memory; nothing in it depends on the target's
language. The entry point has the runtime's kernel convention, so the native timer times it like any kernel::

    int32_t network_run(void** args, int32_t num_threads)

``args`` holds the inputs, then the outputs, then the constant arena, then the workspace.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import te
from ..arith import Analyzer
from ..graph.ir import Graph, Node, Value
from ..ir import PrimFunc
from ..lower import lower
from ..operators.kernel import Arg, KernelDef, schedule_elementwise
from ..runtime import ArgSpec
from ..schedule import create_schedule
from ..target import Target
from . import cache
from .backends import network_backend
from .memory import Buffer, align, plan_memory
from .plan import Call, KernelInfo, Place, Program, Slot

# ------------------------------------------------------------------------------------------- building

def default_kernel(g: Graph, node: Node, target: Target) -> KernelDef:
    """The node's kernel with its default schedule (``Op.kernel``)."""
    return node.op.kernel(g, node, target)


def _roots(g: Graph) -> dict[str, str]:
    """Value -> the value whose memory it shares (itself unless an alias node made it)."""
    root = {name: name for name in g.values}
    for node in g.nodes:
        if node.op.is_alias(g, node):
            root[node.outputs[0]] = root[node.inputs[0]]
    return root


def _copy_kernel(g: Graph, src: str, dst: Value) -> KernelDef:
    """A flat copy of ``src``'s memory into the graph output ``dst`` (same elements, same order)."""
    n = math.prod(dst.shape) or 1
    x = te.placeholder((n,), dst.dtype, "src")
    out = te.compute((n,), lambda i: x[i], "out")
    s = create_schedule(out)
    schedule_elementwise(s, out, 1)
    arg = Arg(const=g.constants[src]) if g.is_constant(src) else Arg(value=src)
    return KernelDef("copy", s, (x, out), (arg, Arg(value=dst.name)), ("copy", n, dst.dtype))


@dataclass
class _Steps:
    """The calls of a network before lowering: each node's kernel, and where each value's memory is."""

    steps: list[tuple[str, KernelDef]]  # (node name, kernel)
    root: dict[str, str]  # value -> the value whose memory it is
    output_of: dict[str, int]  # root value -> graph output number it is written into
    input_of: dict[str, int]  # graph input -> its number


def network_steps(g: Graph, target: Target, choose: Callable[[Graph, Node, Target], KernelDef]) -> _Steps:
    root = _roots(g)
    steps = [(node.name, choose(g, node, target)) for node in g.nodes if not node.op.is_alias(g, node)]
    # a kernel whose output no kernel reads, no alias passes on and no graph output is does not run: a relayout whose
    # readers read its source and block it themselves (operators.conv_kernels.plain_source)
    read = {arg.value for _, kd in steps for arg in kd.args[:-1] if arg.value is not None}
    read |= {i for node in g.nodes if node.op.is_alias(g, node) for i in node.inputs}
    steps = [(name, kd) for name, kd in steps if kd.args[-1].value in read or kd.args[-1].value in g.outputs]
    # graph outputs: written in place by their producer, or copied when their memory is not theirs alone
    output_of: dict[str, int] = {}
    for j, o in enumerate(g.outputs):
        r = root[o]
        if r in g.inputs or g.is_constant(r) or r in output_of:
            steps.append((f"output {o}", _copy_kernel(g, r, g.values[o])))
            root[o] = o
            output_of[o] = j
        else:
            output_of[r] = j
    return _Steps(steps, root, output_of, {name: k for k, name in enumerate(g.inputs)})


class ConstantArena:
    """Constants laid out one after another: an array several calls share is stored once, and with
    ``by_content`` an array equal to one placed before too: a weight that each call packed for itself (a recurrent
    layer unrolled into steps: one copy, not one per step, which also keeps it in the cache from step to step), or
    that another program placed (the sizes of a bucketed module)."""

    def __init__(self, by_content: bool = False):
        self.constants: list[tuple[int, np.ndarray]] = []  # (offset, array)
        self.top = 0
        self._by_content: dict[tuple, int] | None = {} if by_content else None

    def place(self, a: np.ndarray) -> int:
        """The offset of ``a`` in the arena (appended unless an equal array is there)."""
        key = None
        if self._by_content is not None:
            raw = np.ascontiguousarray(a)
            key = (raw.dtype.str, raw.shape, hashlib.sha256(raw.view(np.uint8).reshape(-1)).digest())
            if key in self._by_content:
                return self._by_content[key]
        offset = self.top
        self.constants.append((offset, a))
        self.top += align(a.nbytes)
        if key is not None:
            self._by_content[key] = offset
        return offset


def place_constants(steps: list[tuple[str, KernelDef]], arena: ConstantArena | None = None) -> dict[int, int]:
    """The offset in ``arena`` (default: a new one) of each constant of ``steps``, by ``id(array)``."""
    arena = arena if arena is not None else ConstantArena()
    at: dict[int, int] = {}
    for _, kd in steps:
        for arg in kd.args:
            if arg.const is not None and id(arg.const) not in at:
                at[id(arg.const)] = arena.place(arg.const)
    return at


def build_program(g: Graph, target: Target, choose: Callable[[Graph, Node, Target], KernelDef] | None = None,
                  use_cache: bool = True, arena: ConstantArena | None = None) -> Program:
    """Kernels for every node of ``g`` (``choose`` may pick a tuned one; default schedules otherwise), lowered
    once per distinct kernel, with their calls and memory planned, and the source the target's backend emits for
    it all (``backends.py``; a ``NetworkCompileError`` for a target kind it has no backend for).

    Lowering and code generation are skipped when a program with the same kernels was built before on this
    machine (``cache.py``); only the constants are packed again. ``arena``: the constants are placed in this one,
    shared with other programs (the program's ``constants`` are then the arena's as it stands).
    """
    backend = network_backend(target)
    st = network_steps(g, target, choose or default_kernel)
    arena = arena if arena is not None else ConstantArena(by_content=True)  # one copy of a weight packed per call
    const_at = place_constants(st.steps, arena)
    constants, const_bytes = list(arena.constants), arena.top
    specs = (tuple(_spec(g, i) for i in g.inputs), tuple(_spec(g, o) for o in g.outputs))
    key = cache.program_key(g, target, st, const_at) if use_cache else None
    if key is not None:
        hit = cache.load(key)
        if hit is not None:
            return Program(g.name, *specs, hit.source, hit.calls, constants, const_bytes, hit.workspace_bytes,
                           hit.kernels, hit.buffers_bytes)
    program = _lower_and_plan(g, target, st, specs, constants, const_at, const_bytes, backend.emit)
    if key is not None:
        cache.store(key, program)
    return program


def _spec(g: Graph, name: str) -> ArgSpec:
    v = g.values[name]
    return ArgSpec(name, v.shape, v.dtype, is_output=name in g.outputs)


def _lower_and_plan(g: Graph, target: Target, st: _Steps, specs, constants, const_at, const_bytes, emit) -> Program:
    steps, root, output_of, input_of = st.steps, st.root, st.output_of, st.input_of
    # one lowered function per distinct kernel
    functions: list[tuple[PrimFunc, Analyzer]] = []
    by_key: dict[tuple, int] = {}
    kernels: list[KernelInfo] = []
    chosen: list[int] = []
    for node_name, kd in steps:
        k = by_key.get(kd.key)
        if k is None:
            k = by_key[kd.key] = len(functions)
            analyzer = Analyzer()
            name = f"k{k}_{kd.kind}"
            functions.append((lower(kd.schedule, list(kd.tensors), name, analyzer=analyzer), analyzer))
            kernels.append(KernelInfo(name, kd.kind, (), kd.flops, kd.template))
        info = kernels[k]
        kernels[k] = KernelInfo(info.function, info.kind, info.nodes + (node_name,), info.flops, info.template)
        chosen.append(k)

    # lifetimes of the values kept in the workspace, and of each call's scratch buffers
    last_read: dict[str, int] = {}
    first_write: dict[str, int] = {}
    for i, (_, kd) in enumerate(steps):
        for arg in kd.args[:-1]:
            if arg.value is not None:
                last_read[root[arg.value]] = i
        first_write.setdefault(root[kd.args[-1].value], i)
    buffers = []
    for r, i in first_write.items():
        if r not in output_of and r not in input_of:
            v = g.values[r]
            size = math.prod(v.layout.storage_shape(v.shape)) * v.type.dt.bytes
            buffers.append(Buffer(r, size, i, max(i, last_read.get(r, i))))
    for i, k in enumerate(chosen):
        for w in functions[k][0].workspaces:
            buffers.append(Buffer(f"{i}:{w.name}", w.size * w.dtype.bytes, i, i))
    plan = plan_memory(buffers)

    calls = []
    for i, ((node_name, kd), k) in enumerate(zip(steps, chosen)):
        slots = []
        for arg in kd.args:
            if arg.const is not None:
                slots.append(Slot(Place.CONSTANT, const_at[id(arg.const)]))
                continue
            r = root[arg.value]
            if r in input_of:
                slots.append(Slot(Place.INPUT, input_of[r]))
            elif r in output_of:
                slots.append(Slot(Place.OUTPUT, output_of[r]))
            else:
                slots.append(Slot(Place.WORKSPACE, plan.offsets[r]))
        for w in functions[k][0].workspaces:
            slots.append(Slot(Place.WORKSPACE, plan.offsets[f"{i}:{w.name}"]))
        calls.append(Call(functions[k][0].name, node_name, tuple(slots)))

    source = emit(g.name, functions, calls, len(specs[0]), len(specs[1]), target)
    return Program(g.name, *specs, source, calls, constants, const_bytes, plan.total, kernels,
                   sum(align(b.size) for b in buffers))

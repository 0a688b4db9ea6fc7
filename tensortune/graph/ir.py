"""The graph IR: values with static types and layouts, nodes applying operators, constants as numpy arrays.

A ``Graph`` is immutable and checks itself when built: every value is defined once, before it is read;
every node's output types are what its operator infers from its inputs; constants are read-only arrays
whose shapes match their values. Passes build new graphs with a ``GraphBuilder`` and never change
theirs. ``print(graph)`` shows one line per node.

The operators themselves (what a node computes) are defined in ``tensortune.operators``; this module knows only
their common interface (``graph.op.Op``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..dtype import DType
from ..errors import DTypeError
from .errors import GraphError
from .op import Op


@dataclass(frozen=True, slots=True)
class TensorType:
    """Static shape and dtype (a numpy dtype name such as ``float32``, ``int64`` or ``bfloat16``). Kernels compute
    the dtypes of ``DType``; a graph may hold others in constants that are folded at compile time."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        shape = tuple(self.shape)
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in shape):
            raise GraphError(f"a shape needs non-negative integer dimensions, got {self.shape!r}")
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))
        try:
            name = DType.of(self.dtype).value
        except DTypeError:
            try:
                name = np.dtype(self.dtype).name
            except TypeError:
                raise GraphError(f"unknown dtype {self.dtype!r}") from None
        object.__setattr__(self, "dtype", name)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def dt(self) -> DType:
        """The dtype as a ``DType`` (a ``DTypeError`` for one no kernel computes)."""
        return DType.of(self.dtype)

    @property
    def nbytes(self) -> int:
        return self.size * self.dt.bytes

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


@dataclass(frozen=True, slots=True)
class Layout:
    """How a value's elements lie in memory: row-major (``block`` 0), or blocked along ``axis``: that axis split
    into blocks of ``block`` elements, the block the innermost axis of the storage (for an NCHW tensor, axis 1:
    NCHW[x]c, ``[N, C/block, H, W, block]``; for NCL, ``[N, C/block, L, block]``)."""

    block: int = 0
    axis: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.block, int) or self.block < 0:
            raise GraphError(f"a layout block must be a non-negative integer, got {self.block!r}")
        if not isinstance(self.axis, int) or self.axis < 0:
            raise GraphError(f"a layout's blocked axis must be a non-negative integer, got {self.axis!r}")

    @property
    def blocked(self) -> bool:
        return self.block > 0

    def check(self, shape: tuple[int, ...], what: str) -> None:
        if self.blocked and (len(shape) <= self.axis or shape[self.axis] % self.block):
            raise GraphError(f"{what}: layout {self.name(len(shape))} needs axis {self.axis} to divide into blocks "
                             f"of {self.block}, got shape {shape}")

    def storage_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The shape of the array that holds a tensor of logical ``shape`` in this layout."""
        if not self.blocked:
            return shape
        a = self.axis
        return (*shape[:a], shape[a] // self.block, *shape[a + 1:], self.block)

    def storage_index(self, idx: Sequence) -> tuple:
        """The storage index of logical element ``idx`` (integers or expressions)."""
        if not self.blocked:
            return tuple(idx)
        a = self.axis
        return (*idx[:a], idx[a] // self.block, *idx[a + 1:], idx[a] % self.block)

    def logical_index(self, axes: Sequence) -> tuple:
        """The logical index of the element at storage index ``axes``."""
        if not self.blocked:
            return tuple(axes)
        a = self.axis
        return (*axes[:a], axes[a] * self.block + axes[-1], *axes[a + 1:-1])

    def name(self, rank: int = 4) -> str:
        if not self.blocked:
            return ""
        if rank == 4 and self.axis == 1:
            return f"NCHW{self.block}c"
        return f"blocked(axis={self.axis}, {self.block})"

    def __str__(self) -> str:
        return self.name()


PLAIN = Layout()


@dataclass(frozen=True, slots=True)
class Value:
    """A tensor of the graph: a graph input, a node output or a constant."""

    name: str
    type: TensorType
    layout: Layout = PLAIN

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise GraphError(f"a value needs a non-empty name, got {self.name!r}")
        self.layout.check(self.type.shape, f"value '{self.name}'")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    def __str__(self) -> str:
        return f"{self.type}" + (f" {self.layout.name(len(self.shape))}" if self.layout.blocked else "")


@dataclass(frozen=True, slots=True)
class Node:
    """``outputs = op(inputs)``; inputs and outputs are value names."""

    op: Op
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.op, Op):
            raise GraphError(f"node '{self.name}': {self.op!r} is not a graph operator")
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if not self.outputs:
            raise GraphError(f"node '{self.name}' has no outputs")


@dataclass(frozen=True)
class Graph:
    """A topologically ordered list of nodes over values, some of which are constants."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    nodes: tuple[Node, ...]
    values: Mapping[str, Value]
    constants: Mapping[str, np.ndarray] = field(repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "values", MappingProxyType(dict(self.values)))
        consts = {}
        for name, arr in self.constants.items():
            arr = np.asarray(arr)
            if arr.flags.writeable:
                arr = arr.copy()
                arr.flags.writeable = False
            consts[name] = arr
        object.__setattr__(self, "constants", MappingProxyType(consts))
        _verify(self)

    # ------------------------------------------------------------------ queries
    def producers(self) -> dict[str, Node]:
        """Value name -> the node that computes it (graph inputs and constants have none)."""
        return {o: n for n in self.nodes for o in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        """Value name -> the nodes that read it, in graph order (a node reading a value twice counts once)."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                out.setdefault(i, []).append(n)
        return out

    def is_constant(self, name: str) -> bool:
        return name in self.constants

    def __str__(self) -> str:
        return format_graph(self)


def _verify(g: Graph) -> None:
    """The structural rules of a graph (see the module docstring); a ``GraphError`` for the first broken one."""
    defined: set[str] = set()
    for name in g.inputs:
        if name not in g.values:
            raise GraphError(f"graph '{g.name}': input '{name}' has no value")
        if name in defined:
            raise GraphError(f"graph '{g.name}': input '{name}' is listed twice")
        defined.add(name)
    for name, arr in g.constants.items():
        v = g.values.get(name)
        if v is None:
            raise GraphError(f"graph '{g.name}': constant '{name}' has no value")
        if v.shape != arr.shape or v.dtype != arr.dtype.name or v.layout.blocked:
            raise GraphError(f"graph '{g.name}': constant '{name}' is {arr.dtype}{list(arr.shape)} but its value says "
                             f"{v}")
        if name in defined:
            raise GraphError(f"graph '{g.name}': '{name}' is both a graph input and a constant")
        defined.add(name)
    for node in g.nodes:
        for i in node.inputs:
            if i not in defined:
                raise GraphError(f"node '{node.name}' ({node.op.kind}) reads '{i}', which is not defined before it")
        inferred = node.op.infer([g.values[i].type for i in node.inputs])
        if len(inferred) != len(node.outputs):
            raise GraphError(f"node '{node.name}' ({node.op.kind}) has {len(node.outputs)} outputs, its operator "
                             f"makes {len(inferred)}")
        for o, t in zip(node.outputs, inferred):
            if o in defined:
                raise GraphError(f"value '{o}' is defined twice (again by node '{node.name}')")
            v = g.values.get(o)
            if v is None or v.type != t:
                raise GraphError(f"node '{node.name}' ({node.op}) makes {t} but its output '{o}' is declared as "
                                 f"{v.type if v else 'nothing'}")
            defined.add(o)
    for name in g.outputs:
        if name not in defined:
            raise GraphError(f"graph '{g.name}': output '{name}' is never defined")
    unused = set(g.values) - defined
    if unused:
        raise GraphError(f"graph '{g.name}': values {sorted(unused)[:5]} are declared but never defined")


def format_graph(g: Graph, max_constants: int = 40) -> str:
    """One line per node: ``%out = Op[attrs](%in, $const) : type layout``, then the constants."""
    def ref(name: str) -> str:
        return f"${name}" if name in g.constants else f"%{name}"

    ins = ", ".join(f"%{i}: {g.values[i]}" for i in g.inputs)
    outs = ", ".join(f"%{o}" for o in g.outputs)
    lines = [f"graph {g.name}({ins}) -> ({outs})"]
    for n in g.nodes:
        results = ", ".join(f"%{o}" for o in n.outputs)
        types = ", ".join(str(g.values[o]) for o in n.outputs)
        lines.append(f"  {results} = {n.op}({', '.join(ref(i) for i in n.inputs)})  : {types}")
    if g.constants:
        total = sum(a.size for a in g.constants.values())
        nbytes = sum(a.nbytes for a in g.constants.values())
        lines.append(f"  constants: {len(g.constants)} ({total} elements, {nbytes / 2**20:.1f} MiB)")
        for name in list(g.constants)[:max_constants]:
            lines.append(f"    ${name}: {g.values[name]}")
        if len(g.constants) > max_constants:
            lines.append(f"    ... {len(g.constants) - max_constants} more")
    return "\n".join(lines)


class GraphBuilder:
    """Builds a new graph: passes copy what they keep from the old one and add what they make.

    ``fresh(hint)`` gives an unused value or node name; ``add(op, inputs)`` appends a node, inferring
    the types of its outputs; ``constant(array)`` adds a constant.
    """

    def __init__(self, name: str, taken: Iterable[str] = ()):
        self.name = name
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.nodes: list[Node] = []
        self.values: dict[str, Value] = {}
        self.constants: dict[str, np.ndarray] = {}
        self._taken = set(taken)  # value names
        self._node_names: set[str] = set()
        self._counters: dict[str, int] = {}

    @staticmethod
    def like(g: Graph) -> "GraphBuilder":
        """A builder with ``g``'s name, inputs, outputs and constants, and no nodes yet (``build`` drops the
        constants nothing reads). Value names of ``g`` stay reserved so that new values never take them."""
        b = GraphBuilder(g.name, set(g.values))
        b.inputs = list(g.inputs)
        b.outputs = list(g.outputs)
        for i in g.inputs:
            b.values[i] = g.values[i]
        for name, array in g.constants.items():
            b.add_constant(name, array)
        return b

    def fresh(self, hint: str) -> str:
        """An unused value name starting with ``hint``."""
        return _fresh(hint, self._taken, self._counters)

    def keep(self, node: Node, g: Graph) -> Node:
        """Copy ``node`` of ``g`` with its output values."""
        for o in node.outputs:
            self.values[o] = g.values[o]
        self.nodes.append(node)
        self._node_names.add(node.name)
        return node

    def add(self, op: Op, inputs: Sequence[str], name: str, outputs: Sequence[str] | None = None,
            layouts: Sequence[Layout] | None = None) -> tuple[str, ...]:
        """Append ``op(inputs)``; outputs get fresh names derived from ``name`` unless given."""
        types = op.infer([self.values[i].type for i in inputs])
        node_name = _fresh(name, self._node_names, {})
        if outputs is None:
            outputs = [self.fresh(node_name if len(types) == 1 else f"{node_name}:{k}") for k in range(len(types))]
        layouts = layouts or [PLAIN] * len(types)
        for o, t, lay in zip(outputs, types, layouts):
            self._taken.add(o)
            self.values[o] = Value(o, t, lay)
        self.nodes.append(Node(op, tuple(inputs), tuple(outputs), node_name))
        return tuple(outputs)

    def add_constant(self, name: str | None, array: np.ndarray, hint: str = "const") -> str:
        """Add a constant (a fresh name when ``name`` is None); returns its name."""
        array = np.asarray(array)
        if name is None:
            name = self.fresh(hint)
        self._taken.add(name)
        self.constants[name] = array
        self.values[name] = Value(name, TensorType(array.shape, array.dtype.name))
        return name

    def build(self) -> Graph:
        used = set(self.inputs) | {o for n in self.nodes for o in n.outputs}
        used |= {i for n in self.nodes for i in n.inputs} | set(self.outputs)
        constants = {k: v for k, v in self.constants.items() if k in used}
        values = {k: v for k, v in self.values.items() if k in used}
        return Graph(self.name, tuple(self.inputs), tuple(self.outputs), tuple(self.nodes), values, constants)


def _fresh(hint: str, taken: set[str], counters: dict[str, int]) -> str:
    """``hint``, or ``hint_1``, ``hint_2``... whichever is first not in ``taken`` (then taken)."""
    k = counters.get(hint, 0)
    while True:
        name = hint if k == 0 else f"{hint}_{k}"
        k += 1
        if name not in taken:
            counters[hint] = k
            taken.add(name)
            return name

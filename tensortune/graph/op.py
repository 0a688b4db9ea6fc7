"""What every operator kind of the graph IR declares: the interface the importer, the interpreter, the graph passes,
task extraction and the network compiler read.

An operator kind is a frozen dataclass whose fields are its attributes, subclassing ``Op``, defined in one module of
``tensortune.operators`` together with everything else about it: its ONNX converters, shape and dtype inference
(``infer``), its numpy reference (``reference``: the interpreter and constant folding run it), its fusion
``pattern``, how it takes part in the layout plan (``layout_rule``), its kernel (a tensor expression and its
default schedule per target, ``kernel``), and, for the operators templates tune, its workload kind, tuning tasks,
FLOPs and the kernel a tuned config schedules (``workload_kind``, ``tasks``, ``flops``, ``tuned_kernel``,
``layer_blocks``). Nothing outside that module tells operator kinds apart
by name.

``op.infer(input_types)`` returns the output types and raises ``GraphError`` for inputs the operator cannot take,
so any node a pass builds is checked the same way as an imported one.
"""
from __future__ import annotations

from dataclasses import MISSING, fields
from enum import Enum, IntEnum
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence

import numpy as np

from ..dtype import DType
from ..errors import DTypeError
from .errors import GraphError, NetworkCompileError

if TYPE_CHECKING:  # pragma: no cover - names for annotations only
    from .ir import Graph, Node, TensorType


class Pattern(IntEnum):
    """How an operator fuses with its neighbours (after TVM's operator patterns); lower fuses more freely.

    ``ELEMWISE``: each output element from the input element at the same index; ``BROADCAST``: the same with
    numpy broadcasting; ``INJECTIVE``: each output element from one input element anywhere (reshape, transpose,
    slice, concatenation); ``REDUCTION``: output elements reduce input elements; ``OUT_FUSABLE``: a complex
    operator whose elementwise consumers can be computed on its output in registers (convolution, dense);
    ``OPAQUE``: fuses with nothing."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    REDUCTION = 3
    OUT_FUSABLE = 4
    OPAQUE = 8


class LayoutRule(Enum):
    """How a node takes part in the plan of blocked layouts (``passes.plan_layout``).

    ``PLAIN``: reads and writes row-major tensors. ``ELEMENTWISE``: writes the layout of its first blocked input of
    the output's shape and reads every input of that shape in it (others plain). ``WINDOW``: writes its first
    input's blocked layout and reads that input in it (pooling and normalization windows stay inside a channel
    block). ``CONV``: a convolution (reads its data in the block it arrives in where its groups hold whole blocks,
    writes the planned block). ``CONCAT``: a channel concatenation (copies any layouts into the default block)."""

    PLAIN = "plain"
    ELEMENTWISE = "elementwise"
    WINDOW = "window"
    CONV = "conv"
    CONCAT = "concat"


class Op:
    """Base of the operator kinds (see the module docstring). Defaults: opaque, plain layouts, no kernel, no tasks."""

    __slots__ = ()

    #: how the operator fuses (``Pattern``)
    pattern: ClassVar[Pattern] = Pattern.OPAQUE
    #: how it takes part in the layout plan (``LayoutRule``)
    layout_rule: ClassVar[LayoutRule] = LayoutRule.PLAIN

    @property
    def kind(self) -> str:
        return type(self).__name__

    # ------------------------------------------------------------------ meaning
    def infer(self, inputs: Sequence["TensorType"]) -> tuple["TensorType", ...]:  # pragma: no cover - abstract
        raise NotImplementedError

    def reference(self, *args: np.ndarray) -> np.ndarray | Sequence[np.ndarray]:  # pragma: no cover - abstract
        """The outputs for ``args`` computed with numpy (one array, or a sequence for several outputs)."""
        raise NotImplementedError

    def unfused(self, g: "Graph", node: "Node") -> tuple["Graph", tuple["Node", ...]]:
        """The nodes this node computes, in a graph that holds them: ``(g, (node,))`` but for a fused node."""
        return g, (node,)

    # ------------------------------------------------------------------ compiling
    def is_alias(self, g: "Graph", node: "Node") -> bool:
        """Whether the node's output can share its input's memory (no kernel runs for it)."""
        return False

    def kernel(self, g: "Graph", node: "Node", target: Any) -> Any:
        """The node's kernel (``operators.kernel.KernelDef``) with its default schedule for ``target``."""
        raise NetworkCompileError(f"node '{node.name}' ({self}) has no kernel: {self.kind} is only supported when it "
                                  "is folded into a constant at compile time")

    def workload_kind(self, g: "Graph", node: "Node") -> str | None:
        """The kind of workload templates tune this node as (``conv2d``, ``dense``...), or None for an operator
        kind no template tunes."""
        return None

    def tasks(self, g: "Graph", node: "Node", target: Any) -> tuple:
        """The node's tuning tasks (``autotvm.task.Task``): its template's task first, then alternatives computing
        the same node; () when no template computes it."""
        return ()

    def flops(self, g: "Graph", node: "Node") -> int:
        """Floating-point operations of one run of the node (0 where nobody counts them)."""
        return 0

    def untuned_key(self, g: "Graph", node: "Node") -> str:
        """A readable workload of a node of a tuned kind that no template computes (its task group's name)."""
        return f"{self} {', '.join(str(g.values[i].type) for i in node.inputs)}"

    def layer_blocks(self, g: "Graph", node: "Node") -> tuple[int, int] | None:
        """The (input, output) channel blocks a tuned config must run (None: any)."""
        return None

    def tuned_kernel(self, g: "Graph", node: "Node", task: Any, index: int) -> Any:
        """The node's kernel scheduled by config ``index`` of ``task`` (one of ``tasks``)."""
        raise NetworkCompileError(f"node '{node.name}' ({self}) has no tuning task: no config schedules it")

    # ------------------------------------------------------------------ printing
    def attrs(self) -> dict[str, object]:
        """The attributes that differ from their defaults (for printing)."""
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.default is MISSING or v != f.default:
                out[f.name] = v.name.lower() if isinstance(v, Enum) else v
        return out

    def __str__(self) -> str:
        attrs = self.attrs()
        return self.kind + (f"[{', '.join(f'{k}={_fmt(v)}' for k, v in attrs.items())}]" if attrs else "")


def _fmt(v: object) -> str:
    if isinstance(v, tuple) and v and all(not isinstance(x, (int, float, str)) for x in v):
        return "(" + ", ".join(str(x) for x in v) + ")"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


# ------------------------------------------------------------------------------------------- checks for ``infer``

def check_count(op: Op, inputs: Sequence["TensorType"], low: int, high: int | None = None) -> None:
    high = low if high is None else high
    if not low <= len(inputs) <= high:
        want = str(low) if low == high else f"{low} to {high}"
        raise GraphError(f"{op.kind} takes {want} inputs, got {len(inputs)}")


def check_rank(op: Op, t: "TensorType", rank: int, what: str) -> None:
    if len(t.shape) != rank:
        raise GraphError(f"{op.kind}: {what} must have rank {rank}, got shape {t.shape}")


def is_float(dtype: str) -> bool:
    """Whether a dtype name is a floating-point type (bfloat16 included, which numpy does not count as one)."""
    try:
        return DType.of(dtype).is_float
    except DTypeError:
        return bool(np.issubdtype(np.dtype(dtype), np.floating))


def check_float(op: Op, t: "TensorType", what: str) -> None:
    if not is_float(t.dtype):
        raise GraphError(f"{op.kind}: {what} must be a float tensor, got {t.dtype}")


def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype of a dtype name: ``DType.numpy`` for the dtypes kernels compute (bfloat16 is ``ml_dtypes``'s),
    numpy's own for the others a graph's constants may hold."""
    try:
        return DType.of(name).numpy
    except DTypeError:
        return np.dtype(name)


def check_ints(op: Op, name: str, values: tuple[int, ...], length: int, minimum: int = 1) -> None:
    if len(values) != length or not all(isinstance(v, int) and v >= minimum for v in values):
        raise GraphError(f"{op.kind}: {name} must be {length} integers >= {minimum}, got {values!r}")


def broadcast_shapes(op: Op, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Numpy (multidirectional) broadcasting; a ``GraphError`` naming the operator when shapes do not broadcast."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise GraphError(f"{op.kind}: shapes {', '.join(map(str, shapes))} do not broadcast") from None


#: rules by which a node's kernel computes the producer of one of its inputs itself: ``rule(graph, node, target)``
#: gives that producer and the fused node that takes ``node``'s place, or None. Operator modules register theirs
#: (``producer_fusion``); ``passes.fuse_producers`` applies them.
PRODUCER_FUSIONS: list[Callable[["Graph", "Node", Any], "tuple[Node, Node] | None"]] = []


def producer_fusion(rule: Callable[["Graph", "Node", Any], "tuple[Node, Node] | None"]):
    """Register a rule of ``PRODUCER_FUSIONS`` (a decorator)."""
    PRODUCER_FUSIONS.append(rule)
    return rule

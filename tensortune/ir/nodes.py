"""Loop IR: flat buffers, loads/stores and loop statements. One frozen class per construct."""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from math import prod

from ..dtype import DType
from ..errors import DTypeError
from ..te.expr import ATOM, Expr, StmtBase, Var


class Scope(Enum):
    """Where a buffer lives."""

    GLOBAL = "global"  # kernel argument or runtime-owned workspace
    LOCAL = "local"  # allocated inside the kernel at its compute_at point (stack or registers)
    SHARED = "shared"  # GPU: one copy per thread block, filled cooperatively by its threads


class ForKind(Enum):
    """How a loop runs: the one vocabulary of loop kinds, used by schedules (``Annotate`` steps), the
    loop IR (``For.kind``), config-space knobs and features. The GPU members are set by ``bind``
    (schedules) and mean: the loop's iterations are spread over the block or thread index of that name,
    and the loop variable is that index (a loop nested in another of the same name is the same index:
    a cooperative loop of the block's threads). ``vthread`` is a virtual thread: an unrolled loop."""

    SERIAL = "serial"
    UNROLLED = "unrolled"
    VECTORIZED = "vectorized"
    PARALLEL = "parallel"
    BLOCK_X = "blockIdx.x"
    BLOCK_Y = "blockIdx.y"
    BLOCK_Z = "blockIdx.z"
    THREAD_X = "threadIdx.x"
    THREAD_Y = "threadIdx.y"
    THREAD_Z = "threadIdx.z"
    VTHREAD = "vthread"

    @property
    def is_block(self) -> bool:
        return self in _BLOCKS

    @property
    def is_thread(self) -> bool:
        """A hardware thread index (``threadIdx.*``), not a virtual thread."""
        return self in _THREADS

    @property
    def is_gpu(self) -> bool:
        """A binding made by ``bind``: block, thread or virtual thread."""
        return self in _BLOCKS or self in _THREADS or self is ForKind.VTHREAD

    @staticmethod
    def parse(text: str) -> "ForKind":
        """A kind from its value, or from the short spellings of schedules and knobs (``unroll``, ``vec``...)."""
        kind = _FOR_KIND_ALIASES.get(text)
        if kind is None:
            try:
                return ForKind(text)
            except ValueError:
                names = sorted({k.value for k in ForKind} | set(_FOR_KIND_ALIASES))
                raise ValueError(f"unknown loop kind {text!r}; use one of {', '.join(names)}") from None
        return kind


_BLOCKS = frozenset({ForKind.BLOCK_X, ForKind.BLOCK_Y, ForKind.BLOCK_Z})
_THREADS = frozenset({ForKind.THREAD_X, ForKind.THREAD_Y, ForKind.THREAD_Z})
_FOR_KIND_ALIASES = {"none": ForKind.SERIAL, "unroll": ForKind.UNROLLED, "vectorize": ForKind.VECTORIZED,
                     "vec": ForKind.VECTORIZED}


@dataclass(frozen=True, slots=True)
class Buffer:
    """A dense row-major array; loads and stores address it with one flat index."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    scope: Scope = Scope.GLOBAL

    @property
    def size(self) -> int:
        return prod(self.shape)


@dataclass(frozen=True, slots=True)
class Load(Expr):
    """``buffer[index]``."""

    buffer: Buffer
    index: Expr

    def __post_init__(self):
        if not self.index.dtype.is_int:
            raise DTypeError(f"index of buffer '{self.buffer.name}' must be an integer, got {self.index.dtype}")

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype

    def text(self) -> tuple[str, int]:
        return f"{self.buffer.name}[{self.index}]", ATOM


class Stmt(StmtBase):
    """Base of statements. ``str(stmt)`` is readable Python-like text: each kind writes its ``lines``."""

    __slots__ = ()

    def lines(self) -> list[str]:  # pragma: no cover - every statement kind has its own
        raise AssertionError(f"no text for statement {type(self).__name__}")

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _indent(lines: list[str]) -> list[str]:
    return ["  " + line for line in lines]


@dataclass(frozen=True, slots=True)
class Store(Stmt):
    """``buffer[index] = value``."""

    buffer: Buffer
    index: Expr
    value: Expr

    def __post_init__(self):
        if self.value.dtype != self.buffer.dtype:
            raise DTypeError(
                f"storing a {self.value.dtype} value into buffer '{self.buffer.name}' of {self.buffer.dtype}"
            )

    def lines(self) -> list[str]:
        return [f"{self.buffer.name}[{self.index}] = {self.value}"]


@dataclass(frozen=True, slots=True)
class For(Stmt):
    """``for var in [0, extent)`` run ``body``, serially, unrolled, vectorized or in parallel."""

    var: Var
    extent: int
    kind: ForKind
    body: Stmt

    def __post_init__(self):
        assert isinstance(self.extent, int) and self.extent >= 1, f"loop {self.var.name}: extent {self.extent}"

    def lines(self) -> list[str]:
        kind = "" if self.kind is ForKind.SERIAL else f"  # {self.kind.value}"
        return [f"for {self.var.name} in range({self.extent}):{kind}", *_indent(self.body.lines())]


@dataclass(frozen=True, slots=True)
class Seq(Stmt):
    """Statements run in order."""

    stmts: tuple[Stmt, ...]

    def lines(self) -> list[str]:
        return [line for s in self.stmts for line in s.lines()]


@dataclass(frozen=True, slots=True)
class IfThenElse(Stmt):
    cond: Expr
    then: Stmt
    otherwise: Stmt | None = None

    def __post_init__(self):
        assert self.cond.dtype is DType.bool

    def lines(self) -> list[str]:
        out = [f"if {self.cond}:", *_indent(self.then.lines())]
        return out + (["else:", *_indent(self.otherwise.lines())] if self.otherwise is not None else [])


@dataclass(frozen=True, slots=True)
class Allocate(Stmt):
    """A local buffer that exists while ``body`` runs."""

    buffer: Buffer
    body: Stmt

    def lines(self) -> list[str]:
        b = self.buffer
        return [f"{b.name} = allocate({b.dtype.value}{list(b.shape)}, {b.scope.value})", *self.body.lines()]


@dataclass(frozen=True, slots=True)
class Prefetch(Stmt):
    """A hint: start bringing the cache line that holds ``buffer[index]`` into the cache (a CPU's prefetch
    instruction; it never faults and changes no value). Placed by lowering for a stage's ``prefetch``."""

    buffer: Buffer
    index: Expr

    def __post_init__(self):
        if not self.index.dtype.is_int:
            raise DTypeError(f"index of buffer '{self.buffer.name}' must be an integer, got {self.index.dtype}")

    def lines(self) -> list[str]:
        return [f"prefetch({self.buffer.name}[{self.index}])"]


@dataclass(frozen=True, slots=True)
class Barrier(Stmt):
    """Every thread of a GPU thread block waits here until all have arrived (``__syncthreads()``); placed by
    lowering around the cooperative fills of shared buffers."""

    def lines(self) -> list[str]:
        return ["barrier()  # __syncthreads"]


@dataclass(frozen=True, slots=True)
class PrimFunc:
    """A lowered kernel: arguments (inputs then outputs), runtime-owned workspaces, and a body."""

    name: str
    args: tuple[Buffer, ...]
    workspaces: tuple[Buffer, ...]
    body: Stmt

    def __str__(self) -> str:
        def sig(b):
            return f"{b.name}: {b.dtype.value}{list(b.shape)}"

        head = [f"def {self.name}({', '.join(sig(b) for b in self.args)}):"]
        return "\n".join(head + [f"  workspace {sig(w)}" for w in self.workspaces] + _indent(self.body.lines()))


def seq(*stmts: Stmt | None) -> Stmt:
    """Build a statement sequence, flattening nested sequences and dropping ``None``."""
    out: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            out.extend(s.stmts)
        else:
            out.append(s)
    return out[0] if len(out) == 1 else Seq(tuple(out))

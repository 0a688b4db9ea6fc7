"""GPU lowering: barriers around the cooperative fills of shared buffers, the launch of a kernel (its grid,
its blocks and their shared memory, checked against the target), and the serial reading of a GPU
kernel that the C backend can run on a CPU (to check its indexing against numpy without a GPU).

A loop bound to ``threadIdx.x`` runs its iterations on the threads of a block, its variable being the
thread index; a loop of another stage nested inside it and bound to ``threadIdx.x`` too is the same index
(a *cooperative* loop: the block's threads share its iterations). A stage in shared memory is filled so,
then read by every thread: ``insert_gpu_sync`` puts a barrier after each fill (the reads wait for all the
writes) and, where an enclosing loop fills it again, one before it (the writes wait for the last reads).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..arith import Analyzer
from ..errors import ScheduleError
from ..ir.nodes import Allocate, Barrier, For, ForKind, IfThenElse, PrimFunc, Scope, Seq, Stmt, Store, seq
from ..ir.visitor import Mutator, Visitor
from ..target import Target
from ..te.expr import Expr, Var, free_vars, walk

_EMPTY = Seq(())
_BLOCK_KINDS = (ForKind.BLOCK_X, ForKind.BLOCK_Y, ForKind.BLOCK_Z)
_THREAD_KINDS = (ForKind.THREAD_X, ForKind.THREAD_Y, ForKind.THREAD_Z)


def has_gpu_loops(func: PrimFunc) -> bool:
    """Whether any loop of ``func`` is bound to a GPU index (or a barrier is placed)."""
    return any((isinstance(n, For) and n.kind.is_gpu) or isinstance(n, Barrier) for n in walk(func.body))


# ----------------------------------------------------------------------------------------- barriers

def insert_gpu_sync(func: PrimFunc, analyzer: Analyzer | None = None) -> PrimFunc:
    """Barriers around the fills of shared buffers (see the module docstring); the identity for a function
    with no shared buffer (every CPU kernel: lowering gives CPU kernels local buffers only)."""
    if not any(isinstance(n, Allocate) and n.buffer.scope is Scope.SHARED for n in walk(func.body)):
        return func
    return replace(func, body=_InsertSync().visit(func.body))


class _InsertSync(Mutator):
    def __init__(self) -> None:
        self.serial_depth = 0  # loops around this point that are not bound to a block or thread index
        self.thread_vars: set[Var] = set()
        self.conditions: list[Expr] = []  # conditions around this point

    def visit_Expr(self, e: Expr) -> Expr:
        return e

    def visit_Seq(self, s: Seq) -> Stmt:
        return seq(*(self.visit(x) for x in s.stmts)) if s.stmts else s

    def visit_For(self, s: For) -> Stmt:
        bound = s.kind.is_block or s.kind.is_thread
        if s.kind.is_thread or s.kind is ForKind.VTHREAD:
            self.thread_vars.add(s.var)
        self.serial_depth += 0 if bound else 1
        body = self.visit(s.body)
        self.serial_depth -= 0 if bound else 1
        return replace(s, body=body)

    def visit_IfThenElse(self, s: IfThenElse) -> Stmt:
        self.conditions.append(s.cond)
        then = self.visit(s.then)
        other = self.visit(s.otherwise) if s.otherwise is not None else None
        self.conditions.pop()
        return IfThenElse(s.cond, then, other)

    def visit_Allocate(self, s: Allocate) -> Stmt:
        if s.buffer.scope is not Scope.SHARED:
            return replace(s, body=self.visit(s.body))
        # A chain Allocate(A, [fill A, Allocate(B, [fill B, rest])]): all fills, one barrier, then the rest.
        chain: list[tuple[Allocate, Stmt]] = []
        cur: Stmt = s
        while isinstance(cur, Allocate) and cur.buffer.scope is Scope.SHARED:
            stmts = cur.body.stmts if isinstance(cur.body, Seq) else (cur.body,)
            if len(stmts) < 2 or not _writes(stmts[0], cur.buffer.name):
                break
            chain.append((cur, stmts[0]))
            cur = seq(*stmts[1:])
        if not chain:
            return replace(s, body=self.visit(s.body))
        names = [a.buffer.name for a, _ in chain]
        divergent = [c for c in self.conditions if free_vars(c) & self.thread_vars]
        if divergent:
            raise ScheduleError(names[0], None, f"the shared buffer is filled under a condition on the thread "
                                                f"index ({divergent[0]}), so not every thread of a block would "
                                                "reach its barrier; make the splits around it divide their axes")
        fills = [self.visit(f) for _, f in chain]
        rest = self.visit(cur)
        body = seq(Barrier() if self.serial_depth else None, *fills, Barrier(), rest)
        for alloc, _ in reversed(chain):
            body = Allocate(alloc.buffer, body)
        return body


def _writes(s: Stmt, name: str) -> bool:
    return any(isinstance(n, Store) and n.buffer.name == name for n in walk(s))


# ----------------------------------------------------------------------------------------- launch

@dataclass(frozen=True)
class Launch:
    """How a kernel is launched: blocks in the grid and threads in a block (x, y, z), and the bytes of
    shared memory of one block."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int

    @property
    def threads(self) -> int:
        return math.prod(self.block)

    def to_json(self) -> dict:
        return {"grid": list(self.grid), "block": list(self.block), "shared_bytes": self.shared_bytes}


def gpu_launch(func: PrimFunc, target: Target) -> Launch:
    """The launch of ``func`` as one CUDA kernel on ``target``: each index's extent is the largest of the
    loops bound to it. A ``ScheduleError`` names what breaks the target's limits: several stages computed
    at the root (one kernel computes one), too many threads or too much shared memory per block, a
    parallel or vectorized CPU loop around bound loops, or a barrier that only some threads would reach."""
    limits = target.gpu
    roots = func.body.stmts if isinstance(func.body, Seq) else (func.body,)
    if len(roots) > 1:
        stages = [sorted({n.buffer.name for n in walk(r) if isinstance(n, Store)}) for r in roots]
        names = [x[-1] if x else "?" for x in stages]
        raise ScheduleError(names[0], None, f"stages {names} are each computed at the root: one GPU kernel "
                                            "computes one root stage; compute_inline or compute_at the others")
    dims: dict[ForKind, int] = {}
    for n in walk(func.body):
        if isinstance(n, For):
            if n.kind in (ForKind.PARALLEL,):
                raise ScheduleError(n.var.name, None, "a parallel (CPU) loop in a GPU kernel; bind it to "
                                                      "blockIdx or threadIdx instead")
            if n.kind.is_block or n.kind.is_thread:
                dims[n.kind] = max(dims.get(n.kind, 1), n.extent)
    grid = tuple(dims.get(k, 1) for k in _BLOCK_KINDS)
    block = tuple(dims.get(k, 1) for k in _THREAD_KINDS)
    for kinds, got, most in ((_BLOCK_KINDS, grid, limits.max_grid_dims), (_THREAD_KINDS, block,
                                                                           limits.max_block_dims)):
        for k, g, m in zip(kinds, got, most):
            if g > m:
                raise ScheduleError(k.value, None, f"{g} {k.value} in a launch; at most {m}")
    threads = math.prod(block)
    if threads > limits.max_threads_per_block:
        raise ScheduleError("kernel", None, f"blocks of {threads} threads {block}; at most "
                                            f"{limits.max_threads_per_block}")
    shared = [n.buffer for n in walk(func.body) if isinstance(n, Allocate) and n.buffer.scope is Scope.SHARED]
    names = [b.name for b in shared]
    if len(set(names)) != len(names):
        raise ScheduleError(names[0], None, "a shared buffer allocated twice in one kernel (unrolled?); compute "
                                            "it at a loop that is not unrolled")
    nbytes = sum(_aligned(b.size * b.dtype.bytes) for b in shared)
    if nbytes > limits.shared_memory_per_block:
        detail = ", ".join(f"{b.name} {b.size * b.dtype.bytes} B" for b in shared)
        raise ScheduleError(names[0], None, f"blocks need {nbytes} bytes of shared memory ({detail}), more than the "
                                            f"{limits.shared_memory_per_block} of target '{target}'; use smaller "
                                            f"tiles, or opt in to more with '-shared_memory=' (at most "
                                            f"{limits.max_shared_memory_per_block} on {target.arch})")
    _DivergentBarriers(dims).visit(func.body)
    return Launch(grid, block, nbytes)  # type: ignore[arg-type]


def shared_layout(func: PrimFunc) -> dict[str, int]:
    """Byte offset of each shared buffer in the block's shared memory, in program order."""
    out: dict[str, int] = {}
    offset = 0
    for n in walk(func.body):
        if isinstance(n, Allocate) and n.buffer.scope is Scope.SHARED and n.buffer.name not in out:
            out[n.buffer.name] = offset
            offset += _aligned(n.buffer.size * n.buffer.dtype.bytes)
    return out


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 16) * 16  # every buffer starts on 16 bytes: float4 loads and stores


class _DivergentBarriers(Visitor):
    """A loop bound to fewer threads than the block has runs under a guard; a barrier inside it would be
    reached by some threads only (a deadlock)."""

    def __init__(self, dims: dict[ForKind, int]):
        self.dims = dims
        self.guarded: list[For] = []

    def visit_Expr(self, e) -> None:
        pass

    def visit_For(self, s: For) -> None:
        guarded = s.kind.is_thread and s.extent < self.dims[s.kind]
        if guarded:
            self.guarded.append(s)
        self.visit(s.body)
        if guarded:
            self.guarded.pop()

    def visit_Barrier(self, s: Barrier) -> None:
        if self.guarded:
            loop = self.guarded[-1]
            raise ScheduleError(loop.var.name, None, f"bound to {loop.extent} {loop.kind.value} in blocks of "
                                                     f"{self.dims[loop.kind]}, it runs on some threads only, and "
                                                     "a shared buffer is filled inside it (a barrier only those "
                                                     "threads reach); bind as many threads as the block has")


# ----------------------------------------------------------------------------------------- emulation

def serialize_gpu(func: PrimFunc) -> PrimFunc:
    """``func`` with every GPU-bound loop run as a serial loop and no barriers: what the C backend can build
    and run on a CPU. Each thread's loop then runs its cooperative loops whole (filling a shared buffer
    completely, redundantly), so results equal the GPU's when the indexing is right; it checks indexing, not
    the placement of barriers."""
    return replace(func, body=_Serialize().visit(func.body) or _EMPTY)


class _Serialize(Mutator):
    def visit_Expr(self, e: Expr) -> Expr:
        return e

    def visit_Seq(self, s: Seq) -> Stmt:
        return seq(*(x for x in (self.visit(x) for x in s.stmts) if not (isinstance(x, Seq) and not x.stmts)))

    def visit_Barrier(self, s: Barrier) -> Stmt:
        return _EMPTY

    def visit_For(self, s: For) -> Stmt:
        body = self.visit(s.body)
        return For(s.var, s.extent, ForKind.SERIAL if s.kind.is_gpu else s.kind, body)

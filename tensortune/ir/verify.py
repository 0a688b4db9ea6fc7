"""IR verifier: structural invariants every pass must keep. Failures are compiler bugs (AssertionError)."""
from __future__ import annotations

from ..te.expr import Const, Expr, Reduce, TensorRead, Var
from .nodes import Allocate, Barrier, Buffer, For, ForKind, Load, Prefetch, PrimFunc, Stmt, Store
from .visitor import Visitor


class IRVerifyError(AssertionError):
    """The lowered IR breaks an invariant (a bug in a pass, not a user error)."""


def verify(func: PrimFunc, after: str = "") -> None:
    where = f" after pass '{after}'" if after else ""
    names = [b.name for b in func.args + func.workspaces]
    if len(set(names)) != len(names):
        raise IRVerifyError(f"duplicate buffer names {names}{where}")
    _Verifier(where, set(func.args + func.workspaces)).visit(func.body)


class _Verifier(Visitor):
    """Walks the IR keeping the loop variables and buffers in scope, and whether a parallel loop encloses."""

    def __init__(self, where: str, buffers: set[Buffer]):
        self.where = where
        self.vars: set[Var] = set()
        self.bufs = buffers
        self.in_parallel = False
        self.expr: Expr | None = None  # the expression being checked, for messages

    def fail(self, msg: str) -> None:
        raise IRVerifyError(msg + self.where)

    def check(self, e: Expr) -> None:
        self.expr = e
        self.visit(e)

    def access(self, buf: Buffer, index: Expr) -> None:
        if buf not in self.bufs:
            self.fail(f"buffer '{buf.name}' accessed outside its allocation")
        if not index.dtype.is_int:
            self.fail(f"index of '{buf.name}' is {index.dtype}")
        if isinstance(index, Const) and not 0 <= index.value < buf.size:
            self.fail(f"constant index {index.value} out of bounds of '{buf.name}' (size {buf.size})")

    # -- expressions
    def visit_Var(self, v: Var) -> None:
        if v not in self.vars:
            self.fail(f"variable '{v.name}' used outside the loops that define it in ({self.expr})")

    def visit_Load(self, e: Load) -> None:
        self.access(e.buffer, e.index)
        self.generic_visit(e)

    def visit_TensorRead(self, e: TensorRead) -> None:
        self.fail(f"tensor-expression node TensorRead survived lowering: ({self.expr})")

    def visit_Reduce(self, e: Reduce) -> None:
        self.fail(f"tensor-expression node Reduce survived lowering: ({self.expr})")

    # -- statements
    def visit_Seq(self, s) -> None:
        for x in s.stmts:
            self.visit(x)

    def visit_For(self, s: For) -> None:
        if s.var in self.vars:
            self.fail(f"loop variable '{s.var.name}' redefined inside its own loop")
        if s.extent < 1:
            self.fail(f"loop '{s.var.name}' has extent {s.extent}")
        parallel = s.kind is ForKind.PARALLEL
        if parallel and self.in_parallel:
            self.fail(f"parallel loop '{s.var.name}' nested in a parallel loop")
        saved = self.in_parallel
        self.vars.add(s.var)
        self.in_parallel = saved or parallel
        self.visit(s.body)
        self.vars.discard(s.var)
        self.in_parallel = saved

    def visit_Store(self, s: Store) -> None:
        self.access(s.buffer, s.index)
        self.check(s.index)
        self.check(s.value)
        if s.value.dtype != s.buffer.dtype:
            self.fail(f"store of {s.value.dtype} into '{s.buffer.name}' of {s.buffer.dtype}")

    def visit_Prefetch(self, s: Prefetch) -> None:
        self.access(s.buffer, s.index)
        self.check(s.index)

    def visit_IfThenElse(self, s) -> None:
        self.check(s.cond)
        self.visit(s.then)
        if s.otherwise is not None:
            self.visit(s.otherwise)

    def visit_Allocate(self, s: Allocate) -> None:
        if any(b.name == s.buffer.name for b in self.bufs):
            self.fail(f"buffer '{s.buffer.name}' allocated twice in one scope")
        self.bufs = self.bufs | {s.buffer}
        self.visit(s.body)
        self.bufs = self.bufs - {s.buffer}

    def visit_Barrier(self, s: Barrier) -> None:
        pass

    def visit_Stmt(self, s: Stmt) -> None:
        self.fail(f"unknown statement {type(s).__name__}")

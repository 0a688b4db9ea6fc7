"""IR verifier: structural invariants every pass must keep. Failures are compiler bugs (AssertionError)."""
from __future__ import annotations

from ..te.expr import Const, Expr, Var, walk
from .nodes import Allocate, Buffer, For, ForKind, IfThenElse, Load, PrimFunc, Seq, Stmt, Store


class IRVerifyError(AssertionError):
    """The lowered IR breaks an invariant (a bug in a pass, not a user error)."""


def verify(func: PrimFunc, after: str = "") -> None:
    where = f" after pass '{after}'" if after else ""
    names = [b.name for b in func.args + func.workspaces]
    if len(set(names)) != len(names):
        raise IRVerifyError(f"duplicate buffer names {names}{where}")
    _Verifier(where).stmt(func.body, set(), set(func.args + func.workspaces), False)


class _Verifier:
    def __init__(self, where: str):
        self.where = where

    def fail(self, msg: str) -> None:
        raise IRVerifyError(msg + self.where)

    def expr(self, e: Expr, vars_: set, bufs: set) -> None:
        for n in walk(e):
            if isinstance(n, Var) and n not in vars_:
                self.fail(f"variable '{n.name}' used outside the loops that define it in ({e})")
            if isinstance(n, Load):
                self.access(n.buffer, n.index, vars_, bufs)
            if type(n).__name__ in ("TensorRead", "Reduce"):
                self.fail(f"tensor-expression node {type(n).__name__} survived lowering: ({e})")

    def access(self, buf: Buffer, index: Expr, vars_: set, bufs: set) -> None:
        if buf not in bufs:
            self.fail(f"buffer '{buf.name}' accessed outside its allocation")
        if not index.dtype.is_int:
            self.fail(f"index of '{buf.name}' is {index.dtype}")
        if isinstance(index, Const) and not 0 <= index.value < buf.size:
            self.fail(f"constant index {index.value} out of bounds of '{buf.name}' (size {buf.size})")

    def stmt(self, s: Stmt, vars_: set, bufs: set, in_parallel: bool) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self.stmt(x, vars_, bufs, in_parallel)
        elif isinstance(s, For):
            if s.var in vars_:
                self.fail(f"loop variable '{s.var.name}' redefined inside its own loop")
            if s.extent < 1:
                self.fail(f"loop '{s.var.name}' has extent {s.extent}")
            if s.kind is ForKind.PARALLEL and in_parallel:
                self.fail(f"parallel loop '{s.var.name}' nested in a parallel loop")
            self.stmt(s.body, vars_ | {s.var}, bufs, in_parallel or s.kind is ForKind.PARALLEL)
        elif isinstance(s, Store):
            self.access(s.buffer, s.index, vars_, bufs)
            self.expr(s.index, vars_, bufs)
            self.expr(s.value, vars_, bufs)
            if s.value.dtype != s.buffer.dtype:
                self.fail(f"store of {s.value.dtype} into '{s.buffer.name}' of {s.buffer.dtype}")
        elif isinstance(s, IfThenElse):
            self.expr(s.cond, vars_, bufs)
            self.stmt(s.then, vars_, bufs, in_parallel)
            if s.otherwise is not None:
                self.stmt(s.otherwise, vars_, bufs, in_parallel)
        elif isinstance(s, Allocate):
            if any(b.name == s.buffer.name for b in bufs):
                self.fail(f"buffer '{s.buffer.name}' allocated twice in one scope")
            self.stmt(s.body, vars_, bufs | {s.buffer}, in_parallel)
        else:
            self.fail(f"unknown statement {type(s).__name__}")

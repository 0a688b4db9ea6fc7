"""Reference semantics for tests: integer expressions of the loop IR, and a run of a lowered kernel's loops that
reports the element of each buffer every statement touches."""
from __future__ import annotations

import operator
from typing import Callable

from tensortune.ir import Allocate, For, IfThenElse, Load, Prefetch, Seq, Store
from tensortune.te.expr import Binary, BinOp, CmpOp, Compare, Const, Not, Select, Var, walk

_BINOPS = {BinOp.ADD: operator.add, BinOp.SUB: operator.sub, BinOp.MUL: operator.mul,
           BinOp.FLOORDIV: operator.floordiv, BinOp.FLOORMOD: operator.mod, BinOp.MIN: min, BinOp.MAX: max,
           BinOp.AND: lambda a, b: int(bool(a) and bool(b)), BinOp.OR: lambda a, b: int(bool(a) or bool(b))}
_CMPS = {CmpOp.LT: operator.lt, CmpOp.LE: operator.le, CmpOp.GT: operator.gt, CmpOp.GE: operator.ge,
         CmpOp.EQ: operator.eq, CmpOp.NE: operator.ne}


def evaluate(e, env: dict) -> int:
    """Reference semantics of integer expressions (floor division and modulo, like Python)."""
    if isinstance(e, Const):
        return int(e.value)
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Binary):
        return _BINOPS[e.op](evaluate(e.a, env), evaluate(e.b, env))
    if isinstance(e, Compare):
        return int(_CMPS[e.op](evaluate(e.a, env), evaluate(e.b, env)))
    if isinstance(e, Not):
        return int(not evaluate(e.a, env))
    if isinstance(e, Select):
        return evaluate(e.true_value, env) if evaluate(e.cond, env) else evaluate(e.false_value, env)
    raise TypeError(f"no evaluator for {type(e).__name__}")


def run_indices(stmt, on_access: Callable[[str, str, int, dict], None], env: dict | None = None) -> None:
    """Run the loops of ``stmt`` (conditions included), calling ``on_access(kind, buffer, index, env)`` for every
    element a statement touches: kind ``"load"`` (each load in a stored value), ``"store"`` or ``"prefetch"``."""
    env = {} if env is None else env
    if isinstance(stmt, Seq):
        for s in stmt.stmts:
            run_indices(s, on_access, env)
    elif isinstance(stmt, For):
        for i in range(stmt.extent):
            env[stmt.var] = i
            run_indices(stmt.body, on_access, env)
        del env[stmt.var]
    elif isinstance(stmt, IfThenElse):
        branch = stmt.then if evaluate(stmt.cond, env) else stmt.otherwise
        if branch is not None:
            run_indices(branch, on_access, env)
    elif isinstance(stmt, Allocate):
        run_indices(stmt.body, on_access, env)
    elif isinstance(stmt, Store):
        for n in walk(stmt.value):
            if isinstance(n, Load):
                on_access("load", n.buffer.name, evaluate(n.index, env), env)
        on_access("store", stmt.buffer.name, evaluate(stmt.index, env), env)
    elif isinstance(stmt, Prefetch):
        on_access("prefetch", stmt.buffer.name, evaluate(stmt.index, env), env)
    else:
        raise TypeError(f"no rule for statement {type(stmt).__name__}")

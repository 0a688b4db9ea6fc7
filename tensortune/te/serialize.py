"""A tensor-expression DAG as text and back: ``dumps(tensors)`` and ``loads(text)``.

A network's fused node is tuned as the expression it computes (the template-free search needs no template for it),
and its task must travel in a tuning log and to a measuring worker as plain JSON: the expression is that JSON. The
text holds every tensor the given ones read (placeholders first where they are first read), each compute's axes and
body, and the variables by number; ``loads`` gives tensors with the same names, shapes, dtypes and bodies, so that
one schedule lowers both to the same C. Equal DAGs give equal text (variables are numbered in order of appearance),
which makes the text a workload key.

Format: ``{"tensors": [...], "args": [i, ...]}``; a tensor is ``[name, shape, dtype]`` (a placeholder) or
``[name, shape, dtype, axes, body, scan_axis]``; an axis ``[var, extent, kind]``; an expression a list headed by
its kind (``v`` variable, ``c`` constant, ``b`` binary, ``cmp``, ``not``, ``sel``, ``cast``, ``call``, ``r`` read,
``red`` reduction).
"""
from __future__ import annotations

import json
import math
from typing import Any, Sequence

from ..dtype import DType
from ..errors import ExprError
from .expr import (AxisKind, Binary, BinOp, Call, Cast, CmpOp, Compare, Const, Expr, IterVar, MathFunc, Not, Reduce,
                   Reducer, Select, TensorRead, Var)
from .tensor import ComputeOp, PlaceholderOp, Tensor

_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class _Writer:
    def __init__(self) -> None:
        self.tensors: list[list] = []
        self.index: dict[int, int] = {}  # id(tensor) -> its number
        self.vars: dict[int, int] = {}  # var uid -> its number
        self.var_table: list[list] = []

    def tensor(self, t: Tensor) -> int:
        if id(t) in self.index:
            return self.index[id(t)]
        entry: list = [t.name, list(t.shape), t.dtype.value]
        if isinstance(t.op, ComputeOp):
            axes = [self.axis(a) for a in t.op.axes]
            entry += [axes, self.expr(t.op.body), t.op.scan_axis]
        self.index[id(t)] = len(self.tensors)
        self.tensors.append(entry)
        return self.index[id(t)]

    def var(self, v: Var) -> int:
        if v.uid not in self.vars:
            self.vars[v.uid] = len(self.var_table)
            self.var_table.append([v.name, v.dtype.value])
        return self.vars[v.uid]

    def axis(self, a: IterVar) -> list:
        return [self.var(a.var), a.extent, a.kind.value]

    def expr(self, e: Expr) -> list:
        if isinstance(e, Var):
            return ["v", self.var(e)]
        if isinstance(e, Const):
            value = e.value if math.isfinite(e.value) else str(e.value)
            return ["c", value, e.dtype.value]
        if isinstance(e, Binary):
            return ["b", e.op.name, self.expr(e.a), self.expr(e.b)]
        if isinstance(e, Compare):
            return ["cmp", e.op.name, self.expr(e.a), self.expr(e.b)]
        if isinstance(e, Not):
            return ["not", self.expr(e.a)]
        if isinstance(e, Select):
            return ["sel", self.expr(e.cond), self.expr(e.true_value), self.expr(e.false_value)]
        if isinstance(e, Cast):
            return ["cast", e.to.value, self.expr(e.value)]
        if isinstance(e, Call):
            return ["call", e.func.name, [self.expr(a) for a in e.args]]
        if isinstance(e, TensorRead):
            return ["r", self.tensor(e.tensor), [self.expr(i) for i in e.indices]]
        if isinstance(e, Reduce):
            return ["red", e.combiner.name, self.expr(e.source), [self.axis(a) for a in e.axes]]
        raise ExprError(f"cannot write {type(e).__name__} ({e}) as text: not a tensor-expression node")


def dumps(tensors: Sequence[Tensor]) -> str:
    """The text of the DAG that computes ``tensors`` (a kernel's arguments: inputs, then the output), compact
    JSON."""
    w = _Writer()
    args = [w.tensor(t) for t in tensors]
    return json.dumps({"vars": w.var_table, "tensors": w.tensors, "args": args}, separators=(",", ":"))


class _Reader:
    def __init__(self, doc: dict) -> None:
        self.vars = [Var(name, DType(dtype)) for name, dtype in doc["vars"]]
        self.tensors: list[Tensor] = []

    def tensor(self, entry: list) -> Tensor:
        name, shape, dtype = entry[:3]
        if len(entry) == 3:
            return Tensor(tuple(shape), DType(dtype), PlaceholderOp(name))
        axes, body, scan_axis = entry[3:]
        op = ComputeOp(name, tuple(self.axis(a) for a in axes), self.expr(body), scan_axis)
        return Tensor(tuple(shape), DType(dtype), op)

    def axis(self, a: list) -> IterVar:
        return IterVar(self.vars[a[0]], a[1], AxisKind(a[2]))

    def expr(self, e: list) -> Expr:
        kind = e[0]
        if kind == "v":
            return self.vars[e[1]]
        if kind == "c":
            return Const(_NON_FINITE.get(e[1], e[1]) if isinstance(e[1], str) else e[1], DType(e[2]))
        if kind == "b":
            return Binary(BinOp[e[1]], self.expr(e[2]), self.expr(e[3]))
        if kind == "cmp":
            return Compare(CmpOp[e[1]], self.expr(e[2]), self.expr(e[3]))
        if kind == "not":
            return Not(self.expr(e[1]))
        if kind == "sel":
            return Select(self.expr(e[1]), self.expr(e[2]), self.expr(e[3]))
        if kind == "cast":
            return Cast(DType(e[1]), self.expr(e[2]))
        if kind == "call":
            return Call(MathFunc[e[1]], tuple(self.expr(a) for a in e[2]))
        if kind == "r":
            return TensorRead(self.tensors[e[1]], tuple(self.expr(i) for i in e[2]))
        if kind == "red":
            return Reduce(Reducer[e[1]], self.expr(e[2]), tuple(self.axis(a) for a in e[3]))
        raise ValueError(f"unknown expression kind {kind!r}")


def loads(text: str) -> tuple[Tensor, ...]:
    """The tensors (``dumps``' arguments, rebuilt) of a DAG's text; an ``ExprError`` saying what is malformed."""
    try:
        doc: dict[str, Any] = json.loads(text)
        r = _Reader(doc)
        for entry in doc["tensors"]:
            r.tensors.append(r.tensor(entry))
        return tuple(r.tensors[i] for i in doc["args"])
    except ExprError:
        raise
    except (ValueError, KeyError, IndexError, TypeError) as e:
        raise ExprError(f"malformed tensor-expression text ({type(e).__name__}: {e}); it is what "
                        "tensortune.te.serialize.dumps writes") from None

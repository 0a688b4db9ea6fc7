"""Readable, Python-like text for loop IR (``print(func)``)."""
from __future__ import annotations

from ..te.printer import expr_str
from .nodes import Allocate, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store


def stmt_str(s: Stmt) -> str:
    lines: list[str] = []
    _emit(s, 0, lines)
    return "\n".join(lines)


def func_str(f: PrimFunc) -> str:
    def sig(b):
        return f"{b.name}: {b.dtype.value}{list(b.shape)}"

    head = f"def {f.name}({', '.join(sig(b) for b in f.args)}):"
    lines = [head]
    for w in f.workspaces:
        lines.append(f"  workspace {sig(w)}")
    _emit(f.body, 1, lines)
    return "\n".join(lines)


def _emit(s: Stmt, depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    if isinstance(s, Seq):
        for x in s.stmts:
            _emit(x, depth, lines)
    elif isinstance(s, For):
        kind = "" if s.kind is ForKind.SERIAL else f"  # {s.kind.value}"
        lines.append(f"{pad}for {s.var.name} in range({s.extent}):{kind}")
        _emit(s.body, depth + 1, lines)
    elif isinstance(s, Store):
        lines.append(f"{pad}{s.buffer.name}[{expr_str(s.index)}] = {expr_str(s.value)}")
    elif isinstance(s, IfThenElse):
        lines.append(f"{pad}if {expr_str(s.cond)}:")
        _emit(s.then, depth + 1, lines)
        if s.otherwise is not None:
            lines.append(f"{pad}else:")
            _emit(s.otherwise, depth + 1, lines)
    elif isinstance(s, Allocate):
        b = s.buffer
        lines.append(f"{pad}{b.name} = allocate({b.dtype.value}{list(b.shape)}, {b.scope.value})")
        _emit(s.body, depth, lines)
    else:  # pragma: no cover
        raise AssertionError(f"unknown statement {type(s).__name__}")

"""ONNX Einsum in the forms exporters emit, imported as the operators that compute it: a ``Transpose`` of one
operand (``"ij->ji"``), or a product of two (``"bij,bjk->bik"``, ``"bhqd,bhkd->bhqk"``) as one ``MatMul`` between
transposes and reshapes. Each letter of a product is a batch axis (in both operands and the result), a reduced one
(in both, not in the result) or a free axis of one operand; ``...`` stands for the same trailing batch axes in each.
What a matrix product cannot compute is refused: a letter repeated in one operand (a diagonal), a sum over an axis
of one operand alone, three operands or more."""
from __future__ import annotations

import math
import string
from dataclasses import dataclass

from .matmul import MatMul
from .movement import Transpose
from .onnx_convert import ImportContext, OnnxNode, Reject, converter
from .reshape import Identity, Reshape


@dataclass(frozen=True)
class Equation:
    """An Einsum equation with ``...`` spelled out: each operand's letters, the result's, and each letter's size."""

    operands: tuple[str, ...]
    result: str
    sizes: dict[str, int]


def parse(equation: str, shapes: list[tuple[int, ...]]) -> Equation:
    """The equation for operands of ``shapes``: ``...`` becomes fresh capital letters (aligned at the right, as
    broadcasting aligns axes), an implicit result (no ``->``) is the ``...`` axes then the letters used once, in
    alphabetical order."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise Reject(f"equation '{equation}' has {len(terms)} operands, the node {len(shapes)}")
    if any(c not in string.ascii_letters + "." for c in text.replace("->", "").replace(",", "")):
        raise Reject(f"equation '{equation}' is not made of letters, ',', '->' and '...'")
    fresh = [c for c in string.ascii_uppercase if c not in text]
    ellipsis = max((len(s) - len(t.replace("...", "")) for t, s in zip(terms, shapes) if "..." in t), default=0)
    dots = "".join(fresh[:ellipsis])
    operands = []
    for t, shape in zip(terms, shapes):
        if "..." in t:
            n = len(shape) - len(t.replace("...", ""))
            t = t.replace("...", dots[ellipsis - n:] if n > 0 else "", 1)
        if len(t) != len(shape) or "." in t:
            raise Reject(f"operand '{t}' of equation '{equation}' does not match its shape {list(shape)}")
        operands.append(t)
    if arrow:
        result = rhs.replace("...", dots, 1)
    else:
        once = sorted(c for c in set("".join(operands)) if "".join(operands).count(c) == 1 and c not in dots)
        result = dots + "".join(once)
    sizes: dict[str, int] = {}
    for t, shape in zip(operands, shapes):
        for c, d in zip(t, shape):
            if sizes.get(c, d) != d and 1 not in (sizes[c], d):
                raise Reject(f"letter '{c}' of equation '{equation}' has sizes {sizes[c]} and {d}")
            sizes[c] = max(sizes.get(c, d), d)
    for t in operands:
        if len(set(t)) != len(t):
            raise Reject(f"a letter repeated in operand '{t}' (a diagonal) is not supported")
    if len(set(result)) != len(result) or any(c not in sizes for c in result):
        raise Reject(f"the result '{result}' of equation '{equation}' must name operand letters once each")
    return Equation(tuple(operands), result, sizes)


class _Emitter:
    """Emits the nodes of one Einsum, each named after it; ``last``: into the node's output."""

    def __init__(self, ctx: ImportContext, node: OnnxNode):
        self.ctx, self.node, self.count = ctx, node, 0

    def __call__(self, op, inputs: list[str], last: bool = False) -> str:
        self.count += 1
        outputs = self.node.outputs if last else None
        return self.ctx.emit(op, inputs, outputs, f"{self.node.name}_{self.count}")[0]

    def transpose(self, x: str, have: str, want: str, last: bool = False) -> str:
        if have == want:
            return self(Identity(), [x], True) if last else x
        return self(Transpose(tuple(have.index(c) for c in want)), [x], last)

    def reshape(self, x: str, shape: tuple[int, ...], last: bool = False) -> str:
        return x if self.ctx.shape(x) == shape and not last else self(Reshape(shape), [x], last)


def _product(emit: _Emitter, eq: Equation, a: str, b: str) -> None:
    """``a @ b`` over the equation's letters (batch, free of ``a``, free of ``b``), then in the result's order."""
    ta, tb = eq.operands
    if any(c not in tb and c not in eq.result for c in ta) or any(c not in ta and c not in eq.result for c in tb):
        raise Reject(f"a sum over an axis of one operand ({ta},{tb}->{eq.result}) is not supported")
    batch = "".join(c for c in eq.result if c in ta and c in tb)
    reduced = "".join(c for c in ta if c in tb and c not in eq.result)
    free_a = "".join(c for c in ta if c not in tb)
    free_b = "".join(c for c in tb if c not in ta)

    def dims(x: str, t: str, letters: str) -> tuple[int, ...]:
        shape = emit.ctx.shape(x)
        return tuple(shape[t.index(c)] for c in letters)

    a2 = emit.reshape(emit.transpose(a, ta, batch + free_a + reduced),
                      dims(a, ta, batch) + (math.prod(dims(a, ta, free_a)), math.prod(dims(a, ta, reduced))))
    b2 = emit.reshape(emit.transpose(b, tb, batch + reduced + free_b),
                      dims(b, tb, batch) + (math.prod(dims(b, tb, reduced)), math.prod(dims(b, tb, free_b))))
    letters = batch + free_a + free_b
    sizes = tuple(eq.sizes[c] for c in letters)
    product = sizes[:len(batch)] + (math.prod(sizes[len(batch):len(batch) + len(free_a)]),
                                    math.prod(sizes[len(batch) + len(free_a):]))
    ordered = letters == eq.result
    y = emit(MatMul(), [a2, b2], last=ordered and product == sizes)
    if product != sizes:
        y = emit.reshape(y, sizes, last=ordered)
    if not ordered:
        emit.transpose(y, letters, eq.result, last=True)


@converter("Einsum", attrs=("equation",), since=12)
def _einsum(ctx: ImportContext, node: OnnxNode) -> None:
    inputs = [i for i in node.inputs if i]
    equation = node.str_attr("equation", "")
    eq = parse(equation, [ctx.shape(i) for i in inputs])
    emit = _Emitter(ctx, node)
    if len(inputs) == 1:
        if set(eq.result) != set(eq.operands[0]):
            raise Reject(f"a sum over axes of one operand ('{equation}') is not supported")
        emit.transpose(inputs[0], eq.operands[0], eq.result, last=True)
    elif len(inputs) == 2:
        _product(emit, eq, *inputs)
    else:
        raise Reject(f"Einsum of {len(inputs)} operands is not supported (one or two are)")

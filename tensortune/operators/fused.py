"""Elementwise operators computed as one: a chain such as ``x * sigmoid(x)`` (SiLU) or ``tanh(a + b) * c`` becomes
one node whose kernel makes one pass over the output, instead of one pass and one stored tensor per operator.

``passes.fuse_elementwise`` makes them (the generic rule of fusion, for elementwise producers: an ``ELEMWISE`` or
``BROADCAST`` node whose only reader is one such node of the same output shape joins its reader). The fused
operator is itself ``Elementwise``: it is planned and scheduled like any other (it runs after the epilogue fusion,
which takes ``Unary`` and ``Binary`` steps).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..graph.errors import GraphError
from ..graph.op import Pattern
from .elementwise import Elementwise


@dataclass(frozen=True, slots=True)
class FusedElementwise(Elementwise):
    """``steps`` in order, each an elementwise operator and its arguments: an input of the node (by index, from 0)
    or the result of an earlier step (``-1`` the first step's, ``-2`` the second's...); the last step's result is the
    output. ``arity`` is the number of inputs."""

    steps: tuple[tuple[Elementwise, tuple[int, ...]], ...]
    inputs: int

    @property
    def arity(self) -> int:
        return self.inputs

    def __post_init__(self) -> None:
        if not self.steps:
            raise GraphError("FusedElementwise needs at least one step")
        for k, (op, args) in enumerate(self.steps):
            if not isinstance(op, Elementwise) or len(args) != op.arity:
                raise GraphError(f"FusedElementwise: step {k} must be an elementwise operator and its "
                                 f"{getattr(op, 'arity', '?')} arguments, got {op!r} of {args}")
            if any(a >= self.inputs or a < -k for a in args):
                raise GraphError(f"FusedElementwise: step {k} reads {args}: an input below {self.inputs} or an "
                                 "earlier step")

    @property
    def name(self) -> str:  # the kernel's kind: the names of its operators
        return "_".join(op.name for op, _ in self.steps)

    @property
    def pattern(self) -> Pattern:
        return max(op.pattern for op, _ in self.steps)

    def _run(self, xs: Sequence, apply: Callable) -> object:
        results: list = []
        for op, args in self.steps:
            results.append(apply(op, [xs[a] if a >= 0 else results[-1 - a] for a in args]))
        return results[-1]

    def infer(self, inputs):
        if len(inputs) != self.inputs:
            raise GraphError(f"{self}: takes {self.inputs} inputs, got {len(inputs)}")
        return (self._run(inputs, lambda op, types: op.infer(types)[0]),)

    def reference(self, *xs: np.ndarray) -> np.ndarray:
        return self._run(xs, lambda op, args: op.reference(*args))

    def expr(self, xs):
        return self._run(xs, lambda op, args: op.expr(args))

    def formula(self, xs, m):  # pragma: no cover - the steps have theirs (``expr``, ``reference``)
        raise NotImplementedError

    def __str__(self) -> str:
        def arg(a: int) -> str:
            return f"x{a}" if a >= 0 else f"s{-1 - a}"

        return "Fused[" + "; ".join(f"s{k} = {op}({', '.join(map(arg, args))})"
                                    for k, (op, args) in enumerate(self.steps)) + "]"

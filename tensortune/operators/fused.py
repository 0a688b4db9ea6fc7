"""Operators computed as one: a chain such as ``x * sigmoid(x)`` (SiLU), ``tanh(a + b) * c`` or ``transpose(x + b)``
becomes one node whose kernel makes one pass over the output, instead of one pass and one stored tensor per
operator.

``passes.fuse_injective`` makes them (the generic rule of fusion for elementwise and injective operators, after
TVM's: a node whose only reader is such an operator, and reads each of its elements at most once, joins it). Each
step is a ``MapOp``; the fused node's output element is its last step's ``element``, whose operands are the node's
inputs or earlier steps, each computed at the index the step reads it at. A chain of elementwise steps is planned in
any layout like an elementwise node; one with a transpose, slice, pad or concatenation reads and writes plain
tensors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from ..graph.errors import GraphError
from ..graph.ir import TensorType
from ..graph.op import LayoutRule, Pattern
from .elementwise import Elementwise, Unary
from .map_op import MapOp, Operand


@dataclass(frozen=True, slots=True)
class Fused(MapOp):
    """``steps`` in order, each an operator (a ``MapOp``) and its arguments: an input of the node (by index, from 0)
    or the result of an earlier step (``-1`` the first step's, ``-2`` the second's...); the last step's result is the
    output. ``inputs``: the number of inputs."""

    steps: tuple[tuple[MapOp, tuple[int, ...]], ...]
    inputs: int

    def __post_init__(self) -> None:
        if not self.steps:
            raise GraphError("Fused needs at least one step")
        for k, (op, args) in enumerate(self.steps):
            if not isinstance(op, MapOp) or not args:
                raise GraphError(f"Fused: step {k} must be an element-by-element operator (MapOp) and its "
                                 f"arguments, got {op!r} of {args}")
            if any(a >= self.inputs or a < -k for a in args):
                raise GraphError(f"Fused: step {k} reads {args}: an input below {self.inputs} or an earlier step")

    @property
    def name(self) -> str:  # the kernel's kind: the names of its operators
        return "_".join(op.name for op, _ in self.steps)

    @property
    def pattern(self) -> Pattern:
        return max(op.pattern for op, _ in self.steps)

    @property
    def layout_rule(self) -> LayoutRule:
        if all(op.layout_rule is LayoutRule.ELEMENTWISE for op, _ in self.steps):
            return LayoutRule.ELEMENTWISE
        return LayoutRule.PLAIN

    def _run(self, xs: Sequence, apply: Callable) -> list:
        """Each step's result, ``apply(op, arguments)`` in order."""
        results: list = []
        for op, args in self.steps:
            results.append(apply(op, [xs[a] if a >= 0 else results[-1 - a] for a in args]))
        return results

    def infer(self, inputs):
        if len(inputs) != self.inputs:
            raise GraphError(f"{self}: takes {self.inputs} inputs, got {len(inputs)}")
        return (self._run(inputs, lambda op, types: op.infer(types)[0])[-1],)

    def reference(self, *xs: np.ndarray) -> np.ndarray:
        return self._run(xs, lambda op, args: op.reference(*args))[-1]

    def reads_once(self, input_shape, output_shape) -> bool:
        return False  # not known from the shapes alone: a fused node absorbs no more producers

    def element(self, xs: Sequence[Operand], idx):
        types = self._run([TensorType(x.shape, x.dtype) for x in xs], lambda op, ts: op.infer(ts)[0])
        memo: dict = {}  # (step, index) -> its element: a step read twice at one index is computed once

        def operand(a: int) -> Operand:
            if a >= 0:
                return xs[a]
            k = -1 - a
            return Operand(types[k].shape, types[k].dtype, lambda i: step(k, i))

        def step(k: int, i: tuple):
            key = (k, tuple(map(str, i)))
            if key not in memo:
                op, args = self.steps[k]
                memo[key] = op.element([operand(a) for a in args], i)
            return memo[key]

        return step(len(self.steps) - 1, tuple(idx))

    def __str__(self) -> str:
        def arg(a: int) -> str:
            return f"x{a}" if a >= 0 else f"s{-1 - a}"

        return "Fused[" + "; ".join(f"s{k} = {op}({', '.join(map(arg, args))})"
                                    for k, (op, args) in enumerate(self.steps)) + "]"


@dataclass(frozen=True, slots=True)
class ElementwiseChain(Unary):
    """A chain of elementwise steps over one tensor and scalar constants, as one unary operator: how a ``Fused``
    node such as SiLU (``x * sigmoid(x)``, reading its input twice) joins a convolution's epilogue. ``steps`` index
    as ``Fused``'s: argument 0 is the tensor, ``1..`` the ``scalars``, negative ones earlier steps."""

    steps: tuple[tuple[Elementwise, tuple[int, ...]], ...]
    scalars: tuple[float, ...] = ()

    @property
    def name(self) -> str:  # the kernel's kind
        return "_".join(op.name for op, _ in self.steps)

    def formula(self, xs, m):
        values = [xs[0], *(m.const(s) for s in self.scalars)]
        results: list = []
        for op, args in self.steps:
            results.append(op.formula([values[a] if a >= 0 else results[-1 - a] for a in args], m))
        return results[-1]

    def __str__(self) -> str:
        scalars = "".join(f"; x{k + 1} = {v:g}" for k, v in enumerate(self.scalars))
        return str(Fused(self.steps, 1 + len(self.scalars))).replace("Fused[", "Chain[", 1)[:-1] + scalars + "]"

    @staticmethod
    def of(fused: Fused, inputs: Sequence[str], running: str, scalars: Mapping[str, float]) -> "ElementwiseChain | None":
        """``fused`` (a node reading ``inputs``) as a chain over the value ``running``, its other inputs all among
        ``scalars``; None when a step is not elementwise or an input is neither."""
        if not all(isinstance(op, Elementwise) and op.pattern <= Pattern.BROADCAST for op, _ in fused.steps):
            return None
        if inputs.count(running) != 1 or any(i != running and i not in scalars for i in inputs):
            return None
        others = [i for i in inputs if i != running]
        where = {k: 0 if name == running else 1 + others.index(name) for k, name in enumerate(inputs)}
        steps = tuple((op, tuple(where[a] if a >= 0 else a for a in args)) for op, args in fused.steps)
        return ElementwiseChain(steps, tuple(float(scalars[i]) for i in others))

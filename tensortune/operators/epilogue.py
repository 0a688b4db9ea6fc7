"""The kernel side of fused epilogues (``elementwise.EpilogueStep``): the stages that compute an operator's epilogue
on its result before it is stored, each binary step reading its operand broadcast to the output."""
from __future__ import annotations

from typing import Callable, Sequence

from .. import te
from ..graph.ir import PLAIN, Graph, Node, Value
from ..te import Expr, Tensor
from .kernel import KernelArgs, read_broadcast


def epilogue_stages(acc: Tensor, op, bias: Tensor | None,
                    operands: Sequence[tuple[Tensor, Value, bool]],
                    logical: Callable[[tuple[Expr, ...]], tuple[Expr, ...]], prefix: str = "") -> list[Tensor]:
    """The stages after the accumulator ``acc``: bias, then each epilogue step; ``logical(axes)`` is the index in the
    node's output value of the element at ``acc``'s ``axes``.

    ``operands`` are (tensor, value, is_constant) of the binary steps, in order. The last stage is named
    ``out`` (each name after ``prefix``: two nodes' epilogues in one kernel)."""
    steps: list[Callable[[Expr, tuple[Expr, ...]], Expr]] = []
    if bias is not None:
        steps.append(lambda x, idx: x + bias[idx[1]])
    rest = iter(operands)
    for step in op.epilogue:
        steps.append(_step_fn(step, next(rest) if step.has_operand else None))
    stages: list[Tensor] = []
    cur = acc
    for k, fn in enumerate(steps):
        name = prefix + ("out" if k == len(steps) - 1 else f"epilogue{k}")
        cur = te.compute(acc.shape, _apply_step(cur, fn, logical), name)
        stages.append(cur)
    return stages


def _apply_step(prev: Tensor, fn: Callable[[Expr, tuple], Expr], logical: Callable) -> Callable[..., Expr]:
    def body(*ax):
        return fn(prev[ax], logical(ax))
    return body


def _step_fn(step, operand: tuple[Tensor, Value, bool] | None) -> Callable[[Expr, tuple], Expr]:
    """One ``elementwise.EpilogueStep`` as a function of the running value and the element's logical index."""
    if operand is None:
        return lambda x, idx: step.apply(x)
    t, v, is_const = operand

    def fn(x, idx):
        return step.apply(x, read_broadcast(t, v, PLAIN if is_const else v.layout, idx))

    return fn


def epilogue_operands(a: KernelArgs, g: Graph, node: Node,
                      view: Callable[[Value], Value] | None = None) -> list[tuple[Tensor, Value, bool]]:
    """The operands of the node's epilogue (its inputs after ``op.num_base_inputs``) bound in ``a``: (placeholder,
    value, is constant); ``view`` sees each value with another shape of the same elements."""
    found = []
    for i in node.inputs[node.op.num_base_inputs:]:
        v = g.values[i]
        if view is not None:
            v = view(v)
        found.append((a.value(i, "operand", v.layout.storage_shape(v.shape) if view is not None else None), v,
                      g.is_constant(i)))
    return found

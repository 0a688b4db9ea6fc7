"""Group normalization (ONNX GroupNormalization, opsets 18 and 21) and instance normalization (ONNX
InstanceNormalization, opset 6 on: one group per channel): the channels (axis 1) of each sample split into groups,
each group normalized over its channels and all positions, then scaled and shifted per channel.

The statistics are layer normalization's (``layer_norm.row_statistics``: float32 whatever the float type, two
passes), each group one row. A group reads its input in the layout it arrives in (``LayoutRule.WINDOW``: a
convolution's blocked NCHW[x]c output is normalized where it lies, and the output keeps that layout); in a blocked
layout a row runs over the positions, then the group's channels, so that its innermost reads are consecutive.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import te
from ..graph.errors import GraphError
from ..graph.ir import Graph, Node
from ..graph.op import LayoutRule, Op, check_count, check_float
from ..schedule import create_schedule
from ..target import Target
from .kernel import KernelArgs, KernelDef, lanes_of, logical_index, read, schedule_reductions
from .layer_norm import as_float32, normalized_rows, row_statistics
from .onnx_convert import ImportContext, OnnxNode, Reject, converter


@dataclass(frozen=True, slots=True)
class GroupNorm(Op):
    """Normalize ``groups`` groups of consecutive channels of an ``(N, C, ...)`` input; inputs x, scale and bias,
    each of shape ``(C,)`` (per channel) or ``(groups,)`` (per group: every channel of a group takes its group's)."""

    layout_rule = LayoutRule.WINDOW
    groups: int
    epsilon: float = 1e-5

    def __post_init__(self) -> None:
        if not isinstance(self.groups, int) or self.groups < 1:
            raise GraphError(f"GroupNorm: groups must be a positive integer, got {self.groups!r}")

    def infer(self, inputs):
        check_count(self, inputs, 3)
        x = inputs[0]
        check_float(self, x, "the input")
        if len(x.shape) < 2 or x.shape[1] % self.groups:
            raise GraphError(f"GroupNorm: the input needs a channel axis (1) of a multiple of {self.groups} "
                             f"channels, got shape {x.shape}")
        for t, what in zip(inputs[1:], ("scale", "bias")):
            if t.shape not in ((x.shape[1],), (self.groups,)) or t.dtype != x.dtype:
                raise GraphError(f"GroupNorm: the {what} must be {x.dtype} of shape ({x.shape[1]},) or "
                                 f"({self.groups},), got {t}")
        return (x,)

    def reference(self, x: np.ndarray, scale: np.ndarray, bias: np.ndarray) -> np.ndarray:
        n, c = x.shape[:2]
        y = normalized_rows(x.reshape(n, self.groups, -1), (2,), self.epsilon).reshape(x.shape)
        per_channel = (1, c) + (1,) * (x.ndim - 2)
        scale, bias = (np.repeat(p, c // p.size).reshape(per_channel) for p in (scale, bias))
        return (y * scale + bias).astype(x.dtype)

    def kernel(self, g: Graph, node: Node, target: Target) -> KernelDef:
        a = KernelArgs(g)
        xv, out_v = g.values[node.inputs[0]], g.values[node.outputs[0]]
        assert xv.layout == out_v.layout, "GroupNorm reads and writes one layout"
        layout, dtype = xv.layout, xv.dtype
        x = a.value(node.inputs[0], "data")
        n, c, *space = xv.shape
        size = c // self.groups

        if layout.blocked:  # positions outer, the group's channels inner
            row = (*space, size)

            def at(o, r):
                return as_float32(read(x, layout, (o[0], o[1] * size + r[-1], *r[:-1])))
        else:
            row = (size, *space)

            def at(o, r):
                return as_float32(read(x, layout, (o[0], o[1] * size + r[0], *r[1:])))

        stats = row_statistics((n, self.groups), row, at)
        params = []
        for name, hint in zip(node.inputs[1:], ("scale", "bias")):
            t, per = a.value(name, hint), c // g.values[name].shape[0]
            params.append(lambda ch, t=t, per=per: as_float32(t[(ch // per if per > 1 else ch,)]))

        def body(*axes):
            idx = logical_index(layout, axes)
            y = stats.normalized(as_float32(x[axes]), (idx[0], idx[1] // size), self.epsilon)
            return (y * params[0](idx[1]) + params[1](idx[1])).astype(dtype)

        out = te.compute(layout.storage_shape(xv.shape), body, "out")
        s = create_schedule(out)
        schedule_reductions(s, [*stats.stages, out], lanes_of(target, dtype, node))
        return a.done("group_norm", node, out, s, 8 * xv.type.size)


# ------------------------------------------------------------------------------------------- ONNX

def _emit(ctx: ImportContext, node: OnnxNode, groups: int, per: str) -> None:
    """Emit ``GroupNorm(groups)`` after checking the scale and bias hold one value ``per`` channel or group."""
    x, scale, bias = node.input(0), node.input(1), node.input(2)
    c = ctx.shape(x)[1] if len(ctx.shape(x)) > 1 else 0
    want = (c,) if per == "channel" else (groups,)
    for name, what in ((scale, "scale"), (bias, "bias")):
        if name is None or ctx.shape(name) != want:
            got = "none" if name is None else f"shape {ctx.shape(name)}"
            raise Reject(f"its {what} must hold one value per {per}, shape {want}, got {got}")
    ctx.emit(GroupNorm(groups, float(node.attr("epsilon", 1e-5))), [x, scale, bias], node.outputs, node.name)


@converter("InstanceNormalization", attrs=("epsilon",), since=6)
def _instance_norm(ctx: ImportContext, node: OnnxNode) -> None:
    shape = ctx.shape(node.input(0))
    if len(shape) < 3:
        raise Reject(f"its input needs a batch, a channel and at least one spatial axis, got shape {shape}")
    _emit(ctx, node, shape[1], "channel")


def _groups(ctx: ImportContext, node: OnnxNode) -> int:
    groups, shape = int(node.attr("num_groups", 0)), ctx.shape(node.input(0))
    if groups < 1 or len(shape) < 2 or shape[1] % groups:
        raise Reject(f"num_groups {groups} must be positive and divide the channels of shape {shape}")
    return groups


@converter("GroupNormalization", attrs=("epsilon", "num_groups"), since=18, until=20)
def _group_norm_18(ctx: ImportContext, node: OnnxNode) -> None:
    """Opset 18 (deprecated by 21): one scale and bias per group."""
    _emit(ctx, node, _groups(ctx, node), "group")


@converter("GroupNormalization", attrs=("epsilon", "num_groups", "stash_type"), since=21)
def _group_norm_21(ctx: ImportContext, node: OnnxNode) -> None:
    if int(node.attr("stash_type", 1)) != 1:
        raise Reject(f"stash_type {node.attr('stash_type')} is not supported (statistics are computed in float32)")
    _emit(ctx, node, _groups(ctx, node), "channel")

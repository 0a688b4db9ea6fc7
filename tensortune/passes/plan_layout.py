"""``plan_layout``: activations stay in the blocked NCHW[x]c layout between convolutions.

Each node takes part by its operator's ``layout_rule`` (``graph.op.LayoutRule``). Every convolution writes
NCHW[x]c, with ``x`` the target's vector length (all channels in one block when they do not divide into vectors:
the RGB input) unless ``blocks`` names another block for it (one vector or two,
``ops.block_choices``: the network's tuning log chooses them, ``network.layouts``). A convolution reads its input in
whatever block it arrives in (a depthwise convolution in its own block); pooling, LRN, elementwise nodes take the
layout of their input (a binary node: of its first blocked input of the output's shape) and channel concatenations
the default block, so a whole CNN body runs blocked. Other nodes (reshapes, transposes, slices, dense layers,
softmax) and the graph's outputs read the plain layout; a ``Relayout`` node is inserted only where a reader needs a
layout its value does not have, once per value and layout.
"""
from __future__ import annotations

from typing import Callable, Mapping, Union

from ..errors import DTypeError
from ..graph.ir import PLAIN, Graph, GraphBuilder, Layout, Node
from ..graph.op import LayoutRule
from ..operators import Relayout
from ..operators.conv_kernels import group_merge
from ..ops import default_block
from ..target import Target

#: a convolution node's name -> the channel block of its output; or a function of the graph (before this pass) and
#: the target that gives such a mapping
Blocks = Union[Mapping[str, int], Callable[[Graph, Target], Mapping[str, int]]]


def channel_block(channels: int, lanes: int) -> int:
    """The default block of ``channels`` in the NCHW[x]c layout (``ops.default_block``, as the convolutions have)."""
    return default_block(channels, lanes)


def whole_groups(conv, channels: int, block: int) -> bool:
    """Whether a convolution's ``channels`` in groups, or in a few groups merged (``operators.conv_kernels.
    group_merge``), are whole blocks of ``block`` (a grouped convolution runs blocked only then; a depthwise one is
    blocked across its groups)."""
    return conv.groups == 1 or group_merge(conv.groups, ((channels, block),)) is not None


def _blocked(shape: tuple[int, ...], lanes: int) -> Layout:
    return Layout(channel_block(shape[1], lanes)) if len(shape) == 4 else PLAIN


def _output_layout(g: Graph, node: Node, layout: dict[str, Layout], lanes: int, blocks: Mapping[str, int]) -> Layout:
    """The layout of the node's output (``lanes``: its dtype's elements per vector)."""
    shape = g.values[node.outputs[0]].shape
    rule = node.op.layout_rule
    if len(shape) != 4:
        return PLAIN
    if rule is LayoutRule.CONV:
        block = blocks.get(node.name)
        return Layout(block) if block and shape[1] % block == 0 else _blocked(shape, lanes)
    if rule is LayoutRule.CONCAT and node.op.axis == 1:
        return _blocked(shape, lanes) if any(layout[i].blocked for i in node.inputs) else PLAIN
    if rule is LayoutRule.WINDOW:
        reads = node.inputs[:1]
    elif rule is LayoutRule.ELEMENTWISE:
        reads = tuple(i for i in node.inputs if g.values[i].shape == shape)
    else:
        reads = ()
    return next((layout[i] for i in reads if layout[i].blocked), PLAIN)


def _input_layouts(g: Graph, node: Node, out: Layout, lanes: Callable[[str], int],
                   have: dict[str, Layout]) -> list[Layout]:
    """The layout each input is read in (``lanes(value)``: elements of its dtype per vector)."""
    shape = g.values[node.outputs[0]].shape
    rule = node.op.layout_rule
    wants = []
    for k, i in enumerate(node.inputs):
        v = g.values[i]
        if g.is_constant(i):
            wants.append(PLAIN)
        elif rule is LayoutRule.CONV:
            if k == 0:
                depthwise = node.op.is_depthwise(v.shape[1], shape[1])
                arrives = have[i].blocked and whole_groups(node.op, v.shape[1], have[i].block)
                wants.append(out if depthwise and out.blocked else have[i] if arrives else _blocked(v.shape, lanes(i)))
            else:
                wants.append(out if v.shape == shape else PLAIN)
        elif rule is LayoutRule.CONCAT and out.blocked:
            wants.append(have[i])  # copied from any layout
        elif rule is LayoutRule.WINDOW and out.blocked:
            wants.append(out if k == 0 or v.shape == shape else PLAIN)  # the data, then operands of its epilogue
        elif rule is LayoutRule.ELEMENTWISE and out.blocked:
            wants.append(out if v.shape == shape else PLAIN)
        else:
            wants.append(PLAIN)
    return wants


def plan_layout(g: Graph, target: Target, blocks: Blocks | None = None) -> Graph:
    """``g`` with every value's layout decided for ``target``'s vectors and ``Relayout`` nodes where a reader needs
    another (see the module docstring); ``blocks``: the output block of convolution nodes (by name) that do not take
    the default."""
    if callable(blocks):
        blocks = blocks(g, target)

    def lanes(name: str) -> int:
        try:
            return max(1, target.lanes(g.values[name].dtype))
        except DTypeError:  # a dtype only constants have: never blocked
            return 1

    blocks = blocks or {}
    layout: dict[str, Layout] = {name: PLAIN for name in list(g.inputs) + list(g.constants)}
    b = GraphBuilder.like(g)
    versions: dict[tuple[str, Layout], str] = {(name, PLAIN): name for name in layout}
    outputs = set(g.outputs)

    def read(name: str, want: Layout) -> str:
        key = (name, want)
        if key not in versions:
            src = versions[(name, layout[name])]
            hint = f"{name}_nchw{want.block}c" if want.blocked else f"{name}_nchw"
            (versions[key],) = b.add(Relayout(), [src], f"relayout_{hint}", outputs=[b.fresh(hint)], layouts=[want])
        return versions[key]

    for node in g.nodes:
        out = _output_layout(g, node, layout, lanes(node.outputs[0]), blocks)
        inputs = [read(i, want) for i, want in zip(node.inputs, _input_layouts(g, node, out, lanes, layout))]
        names = list(node.outputs)
        if out.blocked and names[0] in outputs:  # a graph output is plain: compute it blocked, then relayout
            names[0] = b.fresh(f"{names[0]}_nchw{out.block}c")
        b.add(node.op, inputs, node.name, outputs=names, layouts=[out] + [PLAIN] * (len(names) - 1))
        for o, name, lay in zip(node.outputs, names, [out] + [PLAIN] * (len(names) - 1)):
            layout[o] = lay
            versions[(o, lay)] = name
        if names[0] != node.outputs[0]:
            b.add(Relayout(), [names[0]], f"relayout_{node.outputs[0]}", outputs=[node.outputs[0]])
            versions[(node.outputs[0], PLAIN)] = node.outputs[0]
    return b.build()

"""The untuned kernel of a network layer as a task of its own: the schedule a network compiles with no tuning log.

A network's tuner measures it beside the layer's templates (``operators.conv_tasks.node_tasks``), with the same
measurer and in the same run, so that compiling with the log keeps the default wherever no tuned config beat it: a
template's best after a few hundred trials can be slower than the hand-written default, and then tuning must not
make the network slower. The space has one config (no knobs).

Its workload is a ``DefaultKernel``: the name of the layer's template (a channel-blocked convolution or depthwise
convolution template), then that template's arguments. A convolution runs as the network runs it untuned: a
Winograd kernel with the default tile size where ``ops.winograd.default_tile_size`` says so, else the direct
convolution under ``default_blocked_schedule`` (in groups: the groups the layer runs); a depthwise convolution
under ``default_blocked_schedule``.
"""
from __future__ import annotations

from ...errors import ShapeError
from ...ops import conv2d_nchwc_packed, grouped_blocks, packed_blocks
from ...ops.depthwise_packed import depthwise_conv2d_nchwc_packed
from ...ops.schedule_helpers import default_blocked_schedule
from ...ops.winograd import conv2d_winograd_nchwc, default_tile_size
from ..task import TEMPLATES, template
from ..workload import Conv2d, DefaultKernel, DepthwiseConv2d

NAME = "nchwc_default"


def _layer_templates() -> list[str]:
    """The templates whose layers have a default kernel: each network layer's direct task (the first network
    template of its workload kind, ``Template.network``)."""
    firsts: dict[type, str] = {}
    for t in TEMPLATES.values():
        if t.network and t.workload in (Conv2d, DepthwiseConv2d):
            firsts.setdefault(t.workload, t.name)
    return list(firsts.values())


def parse(args: tuple) -> DefaultKernel:
    """The ``DefaultKernel`` of a log's arguments (the layer's template, then its arguments)."""
    names = _layer_templates()
    of = args[0] if args else None
    try:
        if of not in names:
            raise ShapeError(f"no template {of!r} of a blocked layer")
        return DefaultKernel(of, TEMPLATES[of].workload.from_args(args[1:]))
    except ShapeError as e:
        raise ShapeError(f"{NAME}: the first argument names the layer's template, then its arguments: one of "
                         f"{', '.join(names)}; got {list(args)} ({e})") from None


def _blocks(config, wl: DefaultKernel, lanes: int) -> tuple[int, int]:
    layer = wl.layer
    if isinstance(layer, DepthwiseConv2d):
        b = packed_blocks(layer.C, layer.C, lanes)[0]
        return b, b
    return grouped_blocks(layer.C, layer.O, layer.groups, lanes)


@template(NAME, workload=DefaultKernel, layout="NCHWc", channel_blocks=_blocks, parse=parse)
def default_template(cfg, of: str, layer):
    """The default (untuned) kernel of a layer that template ``of`` computes."""
    target = cfg.target
    lanes = max(1, target.lanes(layer.dtype))
    if isinstance(layer, DepthwiseConv2d):
        c = layer
        op = depthwise_conv2d_nchwc_packed(c.N, c.C, c.H, c.W, c.K, c.stride, c.pad,
                                           packed_blocks(c.C, c.C, lanes)[0], c.dtype)
        return default_blocked_schedule(op, target), op
    c = layer
    icb, ocb = grouped_blocks(c.C, c.O, c.groups, lanes)
    tile = default_tile_size(target, c.N, c.H, c.W, c.pad) if (c.K, c.stride, c.groups) == (3, 1, 1) else None
    if tile is not None:
        op = conv2d_winograd_nchwc(c.N, c.C, c.H, c.W, c.O, c.K, c.stride, c.pad, tile, icb, ocb, c.dtype,
                                   target=target)
        return op.default_schedule(target), op
    op = conv2d_nchwc_packed(c.N, c.C, c.H, c.W, c.O, c.K, c.stride, c.pad, icb, ocb, c.dtype, groups=c.groups)
    return default_blocked_schedule(op, target), op

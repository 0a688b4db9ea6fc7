"""The untuned kernel of a network layer as a task of its own: the schedule a network compiles with no tuning log.

A network's tuner measures it beside the layer's templates (``graph.tasks.node_tasks``), with the same measurer
and in the same run, so that compiling with the log keeps the default wherever no tuned config beat it: a
template's best after a few hundred trials can be slower than the hand-written default, and then tuning must
not make the network slower. The space has one config (no knobs).

Arguments: the name of the layer's template, then that template's arguments. A convolution
(``conv2d_nchwc_packed``) runs as the network runs it untuned: a Winograd kernel with the default tile size
where ``ops.winograd.default_tile_size`` says so, else the direct convolution under ``default_blocked_schedule``;
a depthwise convolution (``depthwise_conv2d_nchwc_packed``) under ``default_blocked_schedule``.
"""
from __future__ import annotations

from ...dtype import DType
from ...errors import ShapeError
from ...ops import conv2d_nchwc_packed, packed_blocks
from ...ops.depthwise_packed import depthwise_conv2d_nchwc_packed
from ...ops.schedule_helpers import default_blocked_schedule
from ...ops.winograd import conv2d_winograd_nchwc, default_tile_size
from ..task import template

#: the templates whose layers have a default task, and how many arguments each takes
OF_TEMPLATES = {"conv2d_nchwc_packed": 8, "depthwise_conv2d_nchwc_packed": 7}


@template("nchwc_default")
def default_template(cfg, of: str, *args, dtype: str = "float32"):
    """The default (untuned) kernel of a layer that template ``of`` computes with arguments ``args``."""
    if OF_TEMPLATES.get(of) != len(args):
        raise ShapeError(f"nchwc_default: the first argument names the layer's template, then its arguments: one "
                         f"of {', '.join(f'{k} ({n} arguments)' for k, n in OF_TEMPLATES.items())}; got "
                         f"{of!r} with {len(args)}")
    target = cfg.target
    lanes = max(1, target.lanes(DType.of(dtype)))
    if of == "depthwise_conv2d_nchwc_packed":
        N, C, H, W, K, stride, pad = args
        op = depthwise_conv2d_nchwc_packed(N, C, H, W, K, stride, pad, packed_blocks(C, C, lanes)[0], dtype)
        return default_blocked_schedule(op, target), op
    N, C, H, W, O, K, stride, pad = args
    icb, ocb = packed_blocks(C, O, lanes)
    tile = default_tile_size(target, N, H, W, pad) if (K, stride) == (3, 1) else None
    if tile is not None:
        op = conv2d_winograd_nchwc(N, C, H, W, O, K, stride, pad, tile, icb, ocb, dtype, target=target)
        return op.default_schedule(target), op
    op = conv2d_nchwc_packed(N, C, H, W, O, K, stride, pad, icb, ocb, dtype)
    return default_blocked_schedule(op, target), op

"""Winograd convolution F(m x m, 3 x 3) on the blocked NCHW[x]c layout, a drop-in for the direct
``conv2d_nchwc_packed`` on 3 x 3, stride-1 layers (transforms: ``winograd_transforms``).

The output is cut into m x m tiles; each reads an alpha x alpha (alpha = m + 2) tile of the zero-padded
input, and per tile ``Y = A^T [sum over input channels of (G g G^T) * (B^T d B)] A``: the 9 C O
multiply-adds of each output shrink to alpha^2 C O / m^2 (2.25 times fewer for m = 2, 4 for m = 4,
5.1 for m = 6), plus the transforms. The stages, as tensor expressions (P tiles, padded to ``p_tile``):

* ``input_tile [P, C/icb, alpha, alpha, icb]``: a tile of the input, zero padding applied on the fly
  (no padded copy of the input);
* ``winograd_input_rows`` and ``winograd_input [alpha^2, P, C/icb, icb]``: ``B^T d``, then ``(B^T d) B``;
* ``winograd_product [alpha^2, O/ocb, P, ocb]``: at each of the alpha^2 positions a matrix product of
  (tiles x input channels) by (input channels x output channels): where the FLOPs are;
* ``winograd_output_rows [N, O/ocb, tile rows, tile columns, alpha, m, ocb]`` (``M A``) and the output
  ``[N, O/ocb, OH, OW, ocb]`` (``A^T (M A)``), partial tiles cut at the right and bottom edges.

The weight transform ``G g G^T`` is done once in numpy by ``winograd_weight`` (a deployed model's weights are
constants): the kernel takes ``weight_winograd [alpha^2, O/ocb, C/icb, icb, ocb]``. A network's fused
convolution supplies its own placeholders and an elementwise epilogue, which the schedules inline into the
output transform. Each transform is a
chain of selects on its row index (``transform_expr``), which the schedules unroll so that only the
non-zero terms with literal coefficients are left in the C.

``conv2d_winograd_nchw`` is the same operator with NCHW input and output, for a single convolution on a user's
NCHW arrays: ``input_tile`` gathers its channel blocks from the NCHW input in place, and the output transform
writes ``[N, O, OH, OW]`` straight away (the blocks stay inside the kernel).

FLOPs are counted as the direct convolution's (``2 N O OH OW C 9``), so that GFLOP/s compare with
direct kernels on the same layer: a Winograd kernel can show more GFLOP/s than the machine's peak.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Callable, NamedTuple, Sequence

import numpy as np

from .. import te
from ..errors import ScheduleError, ShapeError
from ..target import ISA, Target, TargetKind
from ..schedule import Axis, Schedule, StageHandle, create_schedule
from ..te import Tensor
from .conv import conv2d_nchw, conv_out_size
from .conv_packed import conv2d_nchwc_packed, packed_blocks
from .operator import Operator, Part
from .pad import padded_read
from .winograd_transforms import transform_expr, winograd_matrices

def winograd_tiles(H: int, W: int, pad: int, m: int, name: str = "conv2d") -> tuple[int, int, int, int]:
    """``(OH, OW, tile rows, tile columns)`` of a 3 x 3, stride-1 convolution with m x m output tiles."""
    oh, ow = conv_out_size(H, 3, 1, pad, name), conv_out_size(W, 3, 1, pad, name)
    return oh, ow, -(-oh // m), -(-ow // m)


def check_winograd_shape(K: int, stride: int, name: str = "conv2d") -> None:
    """A ``ShapeError`` unless the convolution is one Winograd F(m x m, 3 x 3) computes: 3 x 3, stride 1."""
    if K != 3 or stride != 1:
        raise ShapeError(f"{name}: Winograd convolution computes 3x3 kernels with stride 1 (and dilation 1), got a "
                         f"{K}x{K} kernel with stride {stride}; use a direct convolution for this layer "
                         "(conv2d_nchw_spatial_pack or conv2d_nchwc on NCHW tensors, conv2d_nchwc_packed on NCHW[x]c)")


#: Untuned convolutions on these targets run 3x3, stride-1 layers as Winograd kernels (``default_tile_size``)
DEFAULT_WINOGRAD_ISAS = (ISA.AVX2,)
#: ... with the largest output tile that still leaves this many tiles, else F(2x2, 3x3)
DEFAULT_MIN_TILES = 48


def default_tile_size(target: Target, N: int, H: int, W: int, pad: int) -> int | None:
    """The output tile size m of the Winograd kernel that runs an untuned 3x3, stride-1 convolution of
    ``[N, C, H, W]`` data padded by ``pad`` on ``target``, or None where the direct convolution's default schedule
    runs it.

    Measured on ResNet-18's four such layers inside the compiled network (AVX2, both default schedules; see the
    commit): Winograd beats the direct default on every one, by 1.3 to 2.5 times. Larger tiles save more
    multiplications (alpha^2 / m^2: 4, 2.25, 1.78) but make fewer tiles, which then fill the product's register
    tiles and threads poorly and waste more on partial tiles: the largest m of 6, 4, 2 with at least
    ``DEFAULT_MIN_TILES`` tiles was the fastest or within noise of it on each layer (56x56: F(6x6),
    28x28: F(4x4), 14x14 and 7x7: F(2x2)). Other ISAs were not measured: direct."""
    if target.kind is not TargetKind.C or target.isa not in DEFAULT_WINOGRAD_ISAS:
        return None
    for m in (6, 4):
        _, _, rows, cols = winograd_tiles(H, W, pad, m)
        if N * rows * cols >= DEFAULT_MIN_TILES:
            return m
    return 2


def conv2d_winograd_nchwc(N: int, C: int, H: int, W: int, O: int, K: int = 3, stride: int = 1, pad: int = 1,
                          tile: int = 4, icb: int | None = None, ocb: int | None = None, dtype: str = "float32",
                          name: str = "conv2d", p_tile: int | None = None, target: Target | None = None,
                          inputs: Callable[[], tuple[Tensor, Tensor, Sequence[Tensor]]] | None = None,
                          epilogue: Callable[[Tensor], Sequence[Tensor]] | None = None) -> Operator:
    """Winograd F(tile x tile, 3 x 3) convolution on NCHW[x]c tensors, a drop-in for ``conv2d_nchwc_packed``
    on 3 x 3, stride-1 layers: ``data [N, C/icb, H, W, icb]`` in, ``[N, O/ocb, OH, OW, ocb]`` out.

    Blocks default to one vector of ``target``. ``p_tile``: the product is computed over the number of
    tiles rounded up to a multiple of it, so that a register tile of that many tiles need not divide it
    (extra tiles repeat the last one; default: the default schedule's register tile).
    Canonical inputs, reference and FLOPs are those of the direct convolution.

    A caller with its own arguments (a network's fused convolution) passes ``inputs()``, which makes the data
    and transformed-weight placeholders (shapes as above; ``winograd_weight`` transforms a constant) and any
    others the epilogue reads, and ``epilogue(y)``, the elementwise stages after the output transform ``y``
    (the last is the operator's output). ``op.epilogue`` is then the output transform and the stages between,
    which the schedules inline into the output; ``reference`` and ``prepare`` stay the plain convolution's.
    """
    return _declare(N, C, H, W, O, K, stride, pad, tile, icb, ocb, dtype, name, p_tile, target, nchw=False,
                    inputs=inputs, epilogue=epilogue)


def conv2d_winograd_nchw(N: int, C: int, H: int, W: int, O: int, K: int = 3, stride: int = 1, pad: int = 1,
                         tile: int = 4, icb: int | None = None, ocb: int | None = None, dtype: str = "float32",
                         name: str = "conv2d", p_tile: int | None = None, target: Target | None = None) -> Operator:
    """Winograd F(tile x tile, 3 x 3) convolution with NCHW input and output, beside the direct convolutions that
    take NCHW (``conv2d_spatial_pack``, ``conv2d_nchwc``): ``data [N, C, H, W]`` in, ``[N, O, OH, OW]`` out.

    The stages are those of ``conv2d_winograd_nchwc`` with channels in blocks of ``icb`` and ``ocb`` (default:
    one vector of ``target``) inside the kernel: the input tiles are gathered from the NCHW input in place (no
    repacked or padded copy), and the output transform writes each output tile straight into the NCHW output.
    Kernel inputs: ``data`` and ``weight_winograd [alpha^2, O/ocb, C/icb, icb, ocb]`` (``winograd_weight``, made
    by ``prepare`` outside the timed region). Canonical inputs, reference and FLOPs are the direct convolution's.
    """
    return _declare(N, C, H, W, O, K, stride, pad, tile, icb, ocb, dtype, name, p_tile, target, nchw=True)


def _declare(N: int, C: int, H: int, W: int, O: int, K: int, stride: int, pad: int, tile: int, icb: int | None,
             ocb: int | None, dtype: str, name: str, p_tile: int | None, target: Target | None, *, nchw: bool,
             inputs: Callable[[], tuple[Tensor, Tensor, Sequence[Tensor]]] | None = None,
             epilogue: Callable[[Tensor], Sequence[Tensor]] | None = None) -> Operator:
    """The Winograd operator, on NCHW[x]c tensors or (``nchw``) on NCHW ones."""
    check_winograd_shape(K, stride, name)
    target = target or Target.host()
    mats = winograd_matrices(tile)
    direct = conv2d_nchwc_packed(N, C, H, W, O, K, stride, pad, icb, ocb, dtype, name, target=target)
    icb, ocb = direct.inputs[0].shape[-1], direct.output.shape[-1]
    CB, OB, a, m = C // icb, O // ocb, mats.alpha, tile
    OH, OW, nH, nW = winograd_tiles(H, W, pad, m, name)
    P = N * nH * nW
    p_tile = p_tile or default_plan(target, P, OB, -(-ocb // target.lanes(dtype))).p_tile
    if not isinstance(p_tile, int) or isinstance(p_tile, bool) or p_tile < 1:
        raise ShapeError(f"{name}: p_tile must be a positive integer, got {p_tile!r}")
    Pp = -(-P // p_tile) * p_tile

    data, weight, extra = _placeholders(inputs, (N, C, H, W) if nchw else (N, CB, H, W, icb),
                                        (a * a, OB, CB, icb, ocb), dtype, name, "data" if nchw else "data_packed")

    def tile_origin(p):  # (batch, first row, first column) in the padded input of tile p
        p = te.minimum(p, P - 1) if Pp > P else p
        return p // (nH * nW), p // nW % nH * m, p % nW * m

    def read(p, cb, y, x, ci):
        b, y0, x0 = tile_origin(p)
        if nchw:
            return padded_read(data, pad, b, cb * icb + ci, y0 + y, x0 + x)
        return padded_read(data, pad, b, cb, y0 + y, x0 + x, ci)

    bt, at = mats.BT, mats.AT
    d = te.compute((Pp, CB, a, a, icb), read, "input_tile")
    dt = te.compute((Pp, CB, a, a, icb), lambda p, cb, eps, x, ci: transform_expr(
        bt, eps, lambda y: d[p, cb, y, x, ci], dtype), "winograd_input_rows")
    v = te.compute((a * a, Pp, CB, icb), lambda e, p, cb, ci: transform_expr(
        bt, e % a, lambda x: dt[p, cb, e // a, x, ci], dtype), "winograd_input")
    cb, ci = te.reduce_axis(CB, "cb"), te.reduce_axis(icb, "ci")
    prod = te.compute((a * a, OB, Pp, ocb), lambda e, ob, p, oc: te.sum(
        v[e, p, cb, ci] * weight[e, ob, cb, ci, oc], axis=[cb, ci]), "winograd_product")
    mt = te.compute((N, OB, nH, nW, a, m, ocb), lambda n, ob, th, tw, eps, j, oc: transform_expr(
        at, j, lambda nu: prod[eps * a + nu, ob, (n * nH + th) * nW + tw, oc], dtype), "winograd_output_rows")
    if nchw:
        conv = te.compute((N, O, OH, OW), lambda n, o, y, x: transform_expr(
            at, y % m, lambda eps: mt[n, o // ocb, y // m, x // m, eps, x % m, o % ocb], dtype), name)
    else:
        conv = te.compute((N, OB, OH, OW, ocb), lambda n, ob, y, x, oc: transform_expr(
            at, y % m, lambda eps: mt[n, ob, y // m, x // m, eps, x % m, oc], dtype), name)
    stages = list(epilogue(conv)) if epilogue is not None else []
    out = stages[-1] if stages else conv
    reference = conv2d_nchw(N, C, H, W, O, K, stride=stride, pad=pad, dtype=dtype).reference if nchw \
        else direct.reference

    def prepare(x, w):
        return [x if nchw else direct.prepare(x, w)[0], winograd_weight(w, m, icb, ocb)]

    return Operator(name, (data, weight, *extra), out, direct.flops, reference, _default_schedule, prepare,
                    direct.canonical_shapes, parts={Part.ACCUMULATOR: prod},
                    epilogue=(conv, *stages[:-1]) if stages else ())


def winograd_weight(w: np.ndarray, tile: int, icb: int, ocb: int) -> np.ndarray:
    """OIHW 3 x 3 weights -> ``[alpha^2, O/ocb, C/icb, icb, ocb]``, ``G w G^T`` per (output, input) channel: the
    weight transform of F(tile x tile, 3 x 3), done once, in float64, outside the kernel."""
    o, c = w.shape[:2]
    mats = winograd_matrices(tile)
    a, g = mats.alpha, mats.array("G")
    u = np.einsum("ik,ockl,jl->ijoc", g, w.astype(np.float64), g)
    return u.reshape(a * a, o // ocb, ocb, c // icb, icb).transpose(0, 1, 3, 4, 2).astype(w.dtype)


def _placeholders(inputs: Callable[[], tuple[Tensor, Tensor, Sequence[Tensor]]] | None, data_shape: tuple[int, ...],
                  weight_shape: tuple[int, ...], dtype: str, name: str,
                  data_name: str) -> tuple[Tensor, Tensor, tuple[Tensor, ...]]:
    """The data and transformed-weight placeholders (the caller's, when it gives ``inputs``) and the others."""
    if inputs is None:
        return (te.placeholder(data_shape, dtype, data_name),
                te.placeholder(weight_shape, dtype, "weight_winograd"), ())
    data, weight, extra = inputs()
    for t, shape, what in ((data, data_shape, "data"), (weight, weight_shape, "transformed weight")):
        if tuple(t.shape) != shape:
            raise ShapeError(f"{name}: the {what} placeholder of a Winograd convolution must have shape {shape}, got "
                             f"{tuple(t.shape)}")
    return data, weight, tuple(extra)


# ----------------------------------------------------------------------------------------------- schedules

class ProductLoop(Enum):
    """The outer loops of the batched product, which ``WinogradPlan.order`` puts in order."""

    POSITION = "position"  # the alpha^2 transform positions
    TILES = "tiles"  # blocks of p_tile tiles
    CHANNELS = "channels"  # blocks of oc_vectors output-channel blocks


@dataclass(frozen=True)
class WinogradPlan:
    """How ``schedule_winograd`` schedules the operator: a template config's knobs, or the default's.

    The product accumulates register tiles of ``p_tile`` tiles x ``oc_vectors`` output-channel blocks over
    the input channels; its outer loops run in ``order``, the first in parallel. (Fusing two of them into
    the parallel loop measured up to 15 times slower: gcc recomputes the floor divisions of the fused
    variable in the innermost loop.)
    """

    p_tile: int
    oc_vectors: int
    order: tuple[ProductLoop, ...] = (ProductLoop.POSITION, ProductLoop.CHANNELS, ProductLoop.TILES)
    unroll_channels: bool = False  # unroll the input-channel loop of the register tile
    unroll_transforms: bool = False  # unroll the column loops of the transforms too, not only their row loops
    parallel_output_rows: bool = False  # the output transform is parallel over tile rows too

    def __post_init__(self) -> None:
        if sorted(o.value for o in self.order) != sorted(o.value for o in ProductLoop):
            raise ScheduleError("winograd_product", None, f"order must list each ProductLoop once, got {self.order}")


def default_plan(target: Target, tiles: int, channel_blocks: int, vectors: int) -> WinogradPlan:
    """The default schedule's plan: two output-channel blocks (when they divide) and, next to them, as many
    tiles as the target's registers hold, or a few less when that wastes fewer padded tiles."""
    oc_vectors = 2 if channel_blocks % 2 == 0 else 1
    width = oc_vectors * vectors
    most = max(1, min(tiles, target.accumulator_budget(width) // width))
    p_tile = min(range(-(-most // 2), most + 1), key=lambda t: (-(-tiles // t) * t, -t))
    return WinogradPlan(p_tile, oc_vectors)


def _default_schedule(op: Operator, target: Target) -> Schedule:
    prod = op.part(Part.ACCUMULATOR)
    lanes = target.lanes(op.output.dtype)
    plan = default_plan(target, prod.shape[2], prod.shape[1], -(-prod.shape[3] // lanes))
    while prod.shape[2] % plan.p_tile:  # the operator was declared for another register tile
        plan = replace(plan, p_tile=plan.p_tile - 1)
    return schedule_winograd(op, plan)


class _Stages(NamedTuple):
    """The tensors of ``conv2d_winograd_nchwc``, in the order data flows through them."""

    tile: Tensor
    input_rows: Tensor
    input: Tensor
    product: Tensor
    output_rows: Tensor
    output: Tensor  # the output transform, or the last stage of the epilogue that follows it


def _stages(op: Operator) -> _Stages:
    """The operator's stages, found from its product and output transform (the first stage of an epilogue, else
    the output; each transform reads one tensor)."""
    prod = op.part(Part.ACCUMULATOR)
    v = prod.op.inputs()[0]
    dt = v.op.inputs()[0]
    (d,) = dt.op.inputs()
    (mt,) = (op.epilogue[0] if op.epilogue else op.output).op.inputs()
    return _Stages(d, dt, v, prod, mt, op.output)


def schedule_winograd(op: Operator, plan: WinogradPlan) -> Schedule:
    """Schedule ``conv2d_winograd_nchwc`` after ``plan``. Every transform runs per tile with its small loops
    unrolled (so that its selects fold) and its channel block vectorized; the product and the output
    transform run at the root, the epilogue (if any) inlined into the output transform."""
    s = create_schedule(op.output)
    st = _stages(op)
    for t in op.epilogue:
        s[t].compute_inline()
    tiles, blocks = st.product.shape[2], st.product.shape[1]
    if tiles % plan.p_tile or blocks % plan.oc_vectors:
        raise ScheduleError(st.product.name, None, f"a register tile of {plan.p_tile} tiles x {plan.oc_vectors} "
                                                   f"channel blocks does not divide {tiles} tiles x {blocks} blocks; "
                                                   "declare the operator with p_tile= the register tile's tiles")
    _schedule_product(s, st.product, plan)
    _schedule_input(s, st, plan)
    _schedule_output(s, st, plan)
    return s


def _unroll_vectorize(stage: StageHandle, unrolled: Sequence[Axis], vector: Axis) -> None:
    for ax in unrolled:
        stage.unroll(ax)
    stage.vectorize(vector)


def _schedule_product(s: Schedule, prod: Tensor, plan: WinogradPlan) -> None:
    """Register tiles accumulated in a local buffer over the input channels, written back once."""
    acc, pr = s.cache_write(prod, "local"), s[prod]
    e, ob, p, oc = pr.axis
    obo, obi = pr.split(ob, plan.oc_vectors)
    po, pi = pr.split(p, plan.p_tile)
    loops = {ProductLoop.POSITION: e, ProductLoop.TILES: po, ProductLoop.CHANNELS: obo}
    outer = [loops[o] for o in plan.order]
    pr.reorder(*outer, obi, pi, oc)
    pr.parallel(outer[0])
    pr.vectorize(oc)
    a = s[acc]
    a.compute_at(pr, outer[-1])
    _, aob, ap, aoc = a.axis
    cb, ci = a.reduce_axis
    a.reorder(cb, ci, aob, ap, aoc)
    _unroll_vectorize(a, [aob, ap] + ([ci] if plan.unroll_channels else []), aoc)


def _schedule_input(s: Schedule, st: _Stages, plan: WinogradPlan) -> None:
    """``B^T d B`` per (tile, input-channel block), at the root in parallel."""
    t = s[st.input]
    e, p, cb, ci = t.axis
    eps, nu = t.split(e, st.input_rows.shape[2])
    t.reorder(p, cb, eps, nu, ci)
    _unroll_vectorize(t, [eps, nu] if plan.unroll_transforms else [nu], ci)
    t.parallel(p)
    rows = s[st.input_rows]
    rows.compute_at(t, cb)
    _, rcb, r_eps, r_x, r_ci = rows.axis
    _unroll_vectorize(rows, [r_eps, r_x] if plan.unroll_transforms else [r_eps], r_ci)
    tile = s[st.tile]
    tile.compute_at(rows, rcb)
    tile.vectorize(tile.axis[-1])


def _schedule_output(s: Schedule, st: _Stages, plan: WinogradPlan) -> None:
    """``A^T M A`` per output tile and channel block, written straight into the output."""
    out, m = s[st.output], st.output_rows.shape[5]
    if len(out.axis) == 4:  # NCHW output (``conv2d_winograd_nchw``): channels split into the blocks of the product
        n, o, y, x = out.axis
        ob, oc = out.split(o, st.output_rows.shape[-1])
    else:
        n, ob, y, x, oc = out.axis
    th, i = out.split(y, m)
    tw, j = out.split(x, m)
    out.reorder(n, ob, th, tw, i, j, oc)
    _unroll_vectorize(out, [i, j] if plan.unroll_transforms else [i], oc)
    out.parallel(out.fuse(n, ob, th) if plan.parallel_output_rows else out.fuse(n, ob))
    rows = s[st.output_rows]
    rows.compute_at(out, tw)
    *_, eps, rj, roc = rows.axis
    _unroll_vectorize(rows, [rj], roc)  # unrolling eps too costs seconds of lowering, measured no faster

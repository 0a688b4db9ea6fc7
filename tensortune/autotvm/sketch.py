"""Template-free schedules: a sketch derived from the computation by rules, its details declared as knobs.

Ansor (Zheng et al., OSDI 2020) generates the search space from the tensor-expression DAG instead of a hand-written
template. ``derive`` applies its CPU rules to the stages of an operator, from the output backwards:

* a reduction with data reuse (the *anchor*: the last reduction, a convolution or a matrix product) is tiled on
  several levels, "SSRSRS": spatial tiles S0 and S1 outside, then reduction tiles R0, spatial tiles S2, reduction
  tiles R1 and the register tile S3;
* the elementwise stages between the anchor and the output are inlined into the output, and the anchor is computed
  inside the output's S1 tile into a local buffer (consumer fusion; a cache write when the anchor is the output
  itself). A second sketch tiles the anchor in place at the root instead (the knob ``fuse``);
* an elementwise stage the anchor reads more than once (zero padding, which every output channel reads) is computed
  once at the root; one it reads once per output is inlined;
* other elementwise stages are always inlined; other reductions and scans run at the root, in parallel;
* an anchor that reads each element once per output along a long contiguous row (a softmax's sum, a LayerNorm's
  variance) may instead be rfactored (the knob ``rfactor``: a vector width, or 1): vectors of partial results
  accumulated along the row, then their total.

The register tile is vectors along one axis (the knob ``vector_axis``: the innermost, or one that indexes an input
alone), by a few rows of the others. ``_rewrite`` reorders the anchor's axes so that axis is innermost (its local
buffer then holds whole vectors) and repacks each input read along it in an outer dimension so that tiles of the
vector width are contiguous (Ansor's layout rewrite of a constant operand; computed at the root, in the kernel).

``schedule_sketch`` declares the annotations as knobs of an ordinary config space, so the existing tuners, cost model,
log format and measurers serve it unchanged: the four tile sizes of each spatial axis (``tile_<axis>``; the innermost
one need not divide the extent: the last tile is guarded), the two of each reduction axis, how many outer S0 loops
are fused and run in parallel (``parallel``), how many steps of the innermost loops are unrolled (``unroll``,
Ansor's ``auto_unroll_max_step``). A config replays to the same steps, and so to the same C.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .. import te
from ..ops.schedule_helpers import schedule_elementwise
from ..schedule import Axis, Schedule, StageHandle, create_schedule
from ..target import Target
from ..te.expr import IterVar, Reduce, TensorRead, Var, free_vars, substitute, transform, walk
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor

#: Ansor's ``auto_unroll_max_step`` values: unroll the innermost loops while their iterations are at most this
UNROLL_STEPS = (0, 16, 64, 512)
#: register-tile sizes of a spatial axis that is not vectorized
SCALAR_TILES = range(1, 9)
#: the widest register tile of the vectorized axis, in vectors
MAX_VECTORS = 4


@dataclass(frozen=True)
class Sketch:
    """The structure of a template-free schedule (names of stages): the ``anchor`` tiled on several levels (None
    when the computation has no reduction), whether it can be computed inside output tiles (``fusable``), the
    elementwise stages it reads more than once, computed once at the root rather than inlined into its inner loop
    (``producers``), the stages that run at the root for want of a better place (other reductions, scans) and
    those always inlined."""

    output: str
    anchor: str | None
    fusable: bool
    producers: tuple[str, ...]
    roots: tuple[str, ...]
    inlined: tuple[str, ...]


def derive(output: Tensor) -> Sketch:
    """The sketch of the computation of ``output`` (see the module docstring for the rules)."""
    stages = [t for t in _topo(output) if isinstance(t.op, ComputeOp)]
    reductions = [t for t in stages if t.op.reduce_axes and t.op.scan_axis is None]
    anchor = reductions[-1] if reductions else None
    fusable = anchor is not None and (anchor is output or _fusable(anchor, output, stages))
    fixed = {output.name} | ({anchor.name} if anchor is not None else set())
    producers = tuple(t.name for t in anchor.op.inputs() if _elementwise(t) and t.name not in fixed
                      and _reused(t, anchor)) if anchor is not None else ()
    roots = tuple(t.name for t in stages if t.name not in fixed and not _elementwise(t))
    inlined = tuple(t.name for t in stages if t.name not in fixed and t.name not in producers and _elementwise(t))
    return Sketch(output.name, anchor.name if anchor is not None else None, fusable, producers, roots, inlined)


def _reused(t: Tensor, anchor: Tensor) -> bool:
    """Whether ``anchor`` reads elements of ``t`` more than once: some read of it leaves out one of the anchor's
    spatial axes (zero padding, which every output channel of a convolution reads)."""
    axes = {a.var for a in anchor.op.axes if a.extent > 1}
    return any(isinstance(n, TensorRead) and n.tensor.name == t.name
               and not axes <= set().union(*map(free_vars, n.indices)) for n in walk(anchor.op.body))


def schedule_sketch(cfg, output: Tensor) -> Schedule:
    """Declare the knobs of ``output``'s sketch on ``cfg`` and schedule it with their chosen values (a template
    body: ``cfg`` is a ``ConfigSpace`` on the first run, a ``ConfigEntity`` afterwards)."""
    sketch = derive(output)
    target: Target = cfg.target
    lanes = max(1, target.lanes(output.dtype))
    if sketch.anchor is None:
        s = create_schedule(output)
        _place(s, sketch, ())
        _elementwise_output(s[output.name], lanes)
        return s
    anchor = _stage_tensor(output, sketch.anchor)
    spatial, reduce = anchor.op.axes, anchor.op.reduce_axes
    vectors = [spatial[-1].name] + [a.name for a in spatial[:-1] if a.extent > 1 and lanes > 1
                                    and _contiguous_along(anchor, a.var)]
    for a in spatial:
        cfg.define_split(f"tile_{a.name}", a.extent, num_outputs=4, policy="tiles",
                         inner=_register_tiles(a.extent, lanes if a.name in vectors else 1,
                                               scalar=a is not spatial[-1] or len(vectors) > 1))
    for r in reduce:
        cfg.define_split(f"tile_{r.name}", r.extent, num_outputs=2)
    if len(vectors) > 1:
        cfg.define_knob("vector_axis", vectors)
    cfg.define_knob("parallel", list(range(1, len(spatial) + 1)))
    cfg.define_knob("unroll", list(UNROLL_STEPS))
    if sketch.fusable:
        cfg.define_knob("fuse", [True, False])
    widths = _rfactor_widths(anchor, lanes)
    if widths:  # a sketch of its own, which reads no other knob (its configs that differ only in those are alike)
        cfg.define_knob("rfactor", [1, *widths])
    cfg.add_filter(lambda c: _fits(c, spatial, lanes, target))
    if widths and cfg["rfactor"] > 1:
        computed, partial = _rfactor(output, anchor, cfg["rfactor"])
        s = create_schedule(computed)
        _place(s, sketch, ())
        _schedule_rfactor(s, partial, anchor.name)
        if anchor is not output:
            _elementwise_output(s[computed.name], lanes)
        return s
    tiles = {a.name: cfg[f"tile_{a.name}"].size for a in spatial}
    vector = cfg["vector_axis"] if len(vectors) > 1 else spatial[-1].name
    computed, packed = _rewrite(output, anchor, vector, tiles[vector][-1])
    s = create_schedule(computed)
    roles = derive(computed)
    _place(s, sketch, packed)
    if sketch.fusable and cfg["fuse"]:
        acc = s.cache_write(roles.anchor, "local") if roles.anchor == roles.output else roles.anchor
        _fused(cfg, s[computed.name], s[acc], [tiles[a.name] for a in spatial])
    else:
        _in_place(cfg, s[roles.anchor])
        if roles.anchor != roles.output:
            _elementwise_output(s[computed.name], lanes)
    return s


def _place(s: Schedule, sketch: Sketch, packed: tuple[str, ...]) -> None:
    """Inline, or compute at the root, the stages that are neither the anchor nor the output (``packed``: the
    repacked inputs, at the root)."""
    for name in sketch.inlined:
        s[name].compute_inline()
    for name in (*sketch.producers, *sketch.roots, *packed):
        _root(s[name])


# ------------------------------------------------------------------------- the layout of the register tile

def _rewrite(output: Tensor, anchor: Tensor, vector: str, tile: int) -> tuple[Tensor, tuple[str, ...]]:
    """The computation of ``output`` with the anchor's register tile vectorized along axis ``vector``: the anchor's
    axes reordered so that ``vector`` is innermost (its local buffer then holds the tile's vectors contiguously;
    an anchor that is the output itself becomes a stage of its own, which the output reads back in its layout), and
    each input the anchor reads along ``vector`` in a dimension that is not its innermost repacked so that tiles of
    ``tile`` along it are (Ansor's layout rewrite of a constant operand; here computed at the root, in the kernel).
    Returns the new output and the names of the packed stages."""
    axes = anchor.op.axes
    v = next(a.var for a in axes if a.name == vector)
    order = tuple(k for k, a in enumerate(axes) if a.name != vector) + tuple(k for k, a in enumerate(axes)
                                                                            if a.name == vector)
    packs: dict[str, Tensor] = {}

    def pack(n):
        if not (isinstance(n, TensorRead) and isinstance(n.tensor.op, PlaceholderOp)) or tile <= 1:
            return n
        dims = [d for d, e in enumerate(n.indices) if isinstance(e, Var) and e is v]
        if len(dims) != 1 or dims[0] == len(n.indices) - 1 or v in free_vars(n.indices[-1]):
            return n
        d = dims[0]
        packed = packs.get(n.tensor.name) or packs.setdefault(n.tensor.name, _packed(n.tensor, d, tile))
        if packed.shape[d] != -(-n.tensor.shape[d] // tile):  # read along another dimension elsewhere
            return n
        return TensorRead(packed, n.indices[:d] + (v // tile,) + n.indices[d + 1:] + (v % tile,))

    permuted = order != tuple(range(len(axes)))
    body = transform(anchor.op.body, pack)
    if not permuted and not packs:
        return output, ()
    name = f"{anchor.name}.t" if permuted and anchor is output else anchor.name
    new_axes = tuple(axes[k] for k in order)
    rebuilt = {anchor.name: Tensor(tuple(a.extent for a in new_axes), anchor.dtype, ComputeOp(name, new_axes, body))}
    if anchor is output:
        return (_read_back(output, rebuilt[anchor.name], order) if permuted else rebuilt[anchor.name]), \
            tuple(t.name for t in packs.values())
    return _rebuild(output, rebuilt, anchor.name if permuted else None, order), tuple(t.name for t in packs.values())


def _rebuild(output: Tensor, rebuilt: dict[str, Tensor], permuted: str | None = None,
             order: tuple[int, ...] = ()) -> Tensor:
    """``output``'s computation with the stages of ``rebuilt`` (by name) in place of the old ones, and every stage
    that reads one rebuilt too (reading stage ``permuted``, whose axes are now in ``order``, at its new index)."""
    def redirect(n):
        if isinstance(n, TensorRead) and n.tensor.name in rebuilt:
            idx = tuple(n.indices[k] for k in order) if n.tensor.name == permuted else n.indices
            return TensorRead(rebuilt[n.tensor.name], idx)
        return n

    for t in _topo(output):
        if isinstance(t.op, ComputeOp) and t.name not in rebuilt and any(
                i.name in rebuilt for i in t.op.inputs()):
            rebuilt[t.name] = Tensor(t.shape, t.dtype, ComputeOp(t.name, t.op.axes, transform(t.op.body, redirect),
                                                                 t.op.scan_axis))
    return rebuilt[output.name]


# ------------------------------------------------------------------------- rfactor

def _rfactor_widths(anchor: Tensor, lanes: int) -> list[int]:
    """The rfactor widths of an anchor that reads everything once per output along a contiguous innermost
    reduction (a row sum): whole vectors up to the axis's extent (none where that does not apply)."""
    if lanes == 1 or not anchor.op.reduce_axes:
        return []
    r = anchor.op.reduce_axes[-1]
    reads = [n for n in walk(anchor.op.body) if isinstance(n, TensorRead)]
    if any(_reused(n.tensor, anchor) for n in reads) or not any(r.var in free_vars(n.indices[-1]) for n in reads):
        return []
    return [w for w in (lanes, 2 * lanes) if 2 * w <= r.extent]


def _rfactor(output: Tensor, anchor: Tensor, width: int) -> tuple[Tensor, str]:
    """``output``'s computation with the anchor's innermost reduction split in two (rfactor): a stage of partial
    results ``width`` wide (``<anchor>_rf``: the outer part of the axis and the others reduced, the inner part a
    spatial axis, vectorized), then the anchor reducing those. Returns the new output and the partial stage's name."""
    red = anchor.op.body
    r = red.axes[-1]
    outer = te.reduce_axis(-(-r.extent // width), f"{r.name}_o")
    inner = IterVar(Var(f"{r.name}_i"), width)
    k = outer.var * width + inner.var
    source = substitute(red.source, {r.var: k})
    if r.extent % width:
        source = te.select(k < r.extent, source, red.identity())
    partial = Tensor(anchor.shape + (width,), anchor.dtype, ComputeOp(
        f"{anchor.name}_rf", anchor.op.axes + (inner,), Reduce(red.combiner, source, red.axes[:-1] + (outer,))))
    axes = tuple(IterVar(Var(a.name), a.extent) for a in anchor.op.axes)
    lane = te.reduce_axis(width, f"{r.name}_v")
    total = Tensor(anchor.shape, anchor.dtype, ComputeOp(anchor.name, axes, Reduce(
        red.combiner, TensorRead(partial, tuple(a.var for a in axes) + (lane.var,)), (lane,))))
    new = total if anchor is output else _rebuild(output, {anchor.name: total})
    return new, partial.name


def _schedule_rfactor(s: Schedule, partial: str, total: str) -> None:
    """The partial results in parallel over the rows, each row's vector of partials accumulated along the
    reduction; their sum (max...) at the root."""
    st = s[partial]
    *rows, lanes = st.axis
    outer = st.fuse(*rows) if len(rows) > 1 else rows[0]
    st.reorder(outer, *st.reduce_axis, lanes)
    st.vectorize(lanes)
    if outer.extent > 1:
        st.parallel(outer)
    _root(s[total])


def _packed(x: Tensor, d: int, tile: int) -> Tensor:
    """``x`` with dimension ``d`` split into tiles of ``tile``, the tile moved innermost (past the end: the last
    element again)."""
    n = x.shape[d]
    shape = x.shape[:d] + (-(-n // tile),) + x.shape[d + 1:] + (tile,)

    def element(*j):
        i = j[d] * tile + j[-1]
        return x[j[:d] + (te.minimum(i, n - 1) if n % tile else i,) + j[d + 1:-1]]

    return te.compute(shape, element, f"{x.name}_packed")


def _read_back(output: Tensor, src: Tensor, order: tuple[int, ...]) -> Tensor:
    """A stage named as ``output`` that reads ``src`` (``output`` with its axes in ``order``) in ``output``'s
    layout."""
    axes = tuple(IterVar(Var(a.name), a.extent) for a in output.op.axes)
    body = TensorRead(src, tuple(axes[k].var for k in order))
    return Tensor(output.shape, output.dtype, ComputeOp(output.name, axes, body))


def _contiguous_along(anchor: Tensor, v: Var) -> bool:
    """Whether some read of the anchor can be made contiguous along ``v``: ``v`` alone indexes one of the input's
    dimensions (innermost already, or moved there by the layout rewrite)."""
    return any(isinstance(n, TensorRead) and any(isinstance(i, Var) and i is v for i in n.indices)
               for n in walk(anchor.op.body))


def _stage_tensor(output: Tensor, name: str) -> Tensor:
    return next(t for t in _topo(output) if t.name == name)


# ------------------------------------------------------------------------- the two tilings of the anchor

def _fused(cfg, out: StageHandle, acc: StageHandle, tiles: list[tuple[int, ...]]) -> None:
    """S0 S1 over the output's loops, the anchor computed inside S1 into a local buffer: R0 S2 R1 S3 (``tiles``:
    the tile sizes of the output's axes, in order; the anchor's axes, in whatever order, take those of their
    names)."""
    levels: list[list[Axis]] = [[], [], []]
    for ax, (_, s1, s2, s3) in zip(out.axis, tiles):
        rest, inner = out.split(ax, s2 * s3)
        outer, middle = out.split(rest, s1)
        for level, loop in zip(levels, (outer, middle, inner)):
            level.append(loop)
    out.reorder(*levels[0], *levels[1], *levels[2])
    _parallel(out, levels[0], cfg["parallel"])
    if levels[2][-1].extent > 1:
        out.vectorize(levels[2][-1])
    acc.compute_at(out, levels[1][-1])
    s3_of = {ax.name: cfg[f"tile_{ax.name}"].size[3] for ax in acc.axis}
    s2, s3 = zip(*[acc.split(ax, s3_of[ax.name]) for ax in acc.axis])
    r0, r1 = _split_reductions(cfg, acc)
    acc.reorder(*r0, *s2, *r1, *s3)
    _annotate_inner(acc, list(r1) + list(s3), cfg["unroll"])


def _in_place(cfg, anchor: StageHandle) -> None:
    """S0 S1 R0 S2 R1 S3 on the anchor itself, at the root."""
    levels: list[list[Axis]] = [[], [], [], []]
    for ax in anchor.axis:
        for level, loop in zip(levels, cfg[f"tile_{ax.name}"].apply(anchor, ax)):
            level.append(loop)
    r0, r1 = _split_reductions(cfg, anchor)
    anchor.reorder(*levels[0], *levels[1], *r0, *levels[2], *r1, *levels[3])
    _parallel(anchor, levels[0], cfg["parallel"])
    _annotate_inner(anchor, list(r1) + levels[3], cfg["unroll"])


def _split_reductions(cfg, stage: StageHandle) -> tuple[list[Axis], list[Axis]]:
    r0, r1 = [], []
    for r in stage.reduce_axis:
        outer, inner = stage.split(r, cfg[f"tile_{r.name}"].size[1])
        r0.append(outer)
        r1.append(inner)
    return r0, r1


def _parallel(stage: StageHandle, outer: list[Axis], depth: int) -> None:
    """Fuse the ``depth`` outermost loops and run them in parallel (not when they are one iteration)."""
    loops = outer[:depth]
    fused = stage.fuse(*loops) if len(loops) > 1 else loops[0]
    if fused.extent > 1:
        stage.parallel(fused)


def _annotate_inner(stage: StageHandle, inner: list[Axis], steps: int) -> None:
    """Vectorize the innermost loop (the register tile's vector) and unroll the loops around it, innermost first,
    while their iterations together are at most ``steps``."""
    *rest, vector = inner
    if vector.extent > 1:
        stage.vectorize(vector)
    total = 1
    for loop in reversed(rest):
        total *= loop.extent
        if total > steps:
            break
        if loop.extent > 1:
            stage.unroll(loop)


def _elementwise_output(out: StageHandle, lanes: int) -> None:
    """An output with nothing tiled into it: parallel outer loops, vectorized rows."""
    schedule_elementwise(out.sch, out.sch.tensors[out.name], lanes)


def _root(stage: StageHandle) -> None:
    """A stage computed once at the root, in parallel over its outer spatial loops fused (all but the innermost;
    a scan: its first loop, unless the recurrence runs along it)."""
    axes = stage.axis
    scan = stage.state.op.scan_axis
    outer = axes[:1] if scan is not None else axes[:-1] or axes
    if scan == 0:
        return
    fused = stage.fuse(*outer) if len(outer) > 1 else outer[0]
    if fused.extent > 1:
        stage.parallel(fused)


# ------------------------------------------------------------------------- rules' helpers

def _register_tiles(extent: int, lanes: int, scalar: bool = True) -> list[int]:
    """Candidate register-tile sizes of an axis: small ones (``scalar``), and where it may be vectorized (``lanes``
    > 1) whole vectors up to ``MAX_VECTORS`` and the divisors of the extent up to that width."""
    sizes = set(SCALAR_TILES) if scalar or lanes == 1 else set()
    if lanes > 1:
        widest = MAX_VECTORS * lanes
        sizes |= {lanes * v for v in range(1, MAX_VECTORS + 1)} | {d for d in range(1, widest + 1) if extent % d == 0}
    return sorted(t for t in sizes if t <= extent) or [extent]


def _fits(cfg, spatial, lanes: int, target: Target) -> bool:
    """The register tile is vectors along the vectorized axis (whole vectors, or a divisor of its extent) by a few
    rows of the others (``SCALAR_TILES``), and its accumulators fit the target's vector registers."""
    vector = cfg["vector_axis"] if "vector_axis" in cfg.space.knobs else spatial[-1].name
    sizes = {a.name: cfg[f"tile_{a.name}"].size[-1] for a in spatial}
    width = sizes.pop(vector)
    extent = next(a.extent for a in spatial if a.name == vector)
    if lanes > 1 and width % lanes and extent % width or any(t not in SCALAR_TILES for t in sizes.values()):
        return False
    vectors = -(-width // lanes)
    return math.prod(sizes.values()) * vectors <= target.max_accumulators(vectors)


def _elementwise(t: Tensor) -> bool:
    return isinstance(t.op, ComputeOp) and not t.op.reduce_axes and t.op.scan_axis is None


def _fusable(anchor: Tensor, output: Tensor, stages: list[Tensor]) -> bool:
    """Whether every stage between the anchor and the output is elementwise and reads its producers on that path
    at its own index, its axes in some order (so an output tile needs exactly one tile of the anchor)."""
    path = {anchor.name}
    for t in stages[stages.index(anchor) + 1:]:
        reads = [n for n in walk(t.op.body) if isinstance(n, TensorRead) and n.tensor.name in path]
        if not reads:
            continue
        if not _elementwise(t) or not all(_reads_a_tile(r, t.op.axes) for r in reads):
            return False
        path.add(t.name)
    return output.name in path


def _reads_a_tile(read: TensorRead, axes) -> bool:
    """``read`` indexes its tensor by the ``axes``' variables, each once, each over its whole extent."""
    extent = {a.var: a.extent for a in axes}
    idx = read.indices
    return len(idx) == len(axes) and len(set(idx)) == len(idx) and all(
        isinstance(i, Var) and extent.get(i) == n for i, n in zip(idx, read.tensor.shape))


def _topo(output: Tensor) -> list[Tensor]:
    order: list[Tensor] = []
    seen: set[str] = set()

    def visit(t: Tensor) -> None:
        if t.name in seen:
            return
        seen.add(t.name)
        if isinstance(t.op, ComputeOp):
            for i in t.op.inputs():
                visit(i)
        order.append(t)

    visit(output)
    return order

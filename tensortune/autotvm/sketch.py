"""Template-free schedules: a sketch derived from the computation by rules, its details declared as knobs.

Ansor (Zheng et al., OSDI 2020) generates the search space from the tensor-expression DAG instead of a hand-written
template. ``derive`` applies its CPU rules to the stages of an operator, from the output backwards:

* a reduction with data reuse (the *anchor*: the last reduction, a convolution or a matrix product) is tiled on
  several levels, "SSRSRS": spatial tiles S0 and S1 outside, then reduction tiles R0, spatial tiles S2, reduction
  tiles R1 and the register tile S3;
* the elementwise stages between the anchor and the output are inlined into the output, and the anchor is computed
  inside the output's S1 tile into a local buffer (consumer fusion; a cache write when the anchor is the output
  itself). A second sketch tiles the anchor in place at the root instead (the knob ``fuse``);
* an elementwise stage the anchor reads (zero padding, a repacked operand) is inlined or computed once at the root
  (a knob per stage: ``<stage>.at``);
* other elementwise stages are always inlined; other reductions and scans run at the root, in parallel.

``schedule_sketch`` declares the annotations as knobs of an ordinary config space, so the existing tuners, cost model,
log format and measurers serve it unchanged: the four tile sizes of each spatial axis (``tile_<axis>``; the innermost
one need not divide the extent: the last tile is guarded), the two of each reduction axis, how many outer S0 loops
are fused and run in parallel (``parallel``), how many steps of the innermost loops are unrolled (``unroll``,
Ansor's ``auto_unroll_max_step``). The innermost spatial tile is vectorized. A config replays to the same steps, and
so to the same C.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..schedule import Axis, Schedule, StageHandle, create_schedule
from ..target import Target
from ..te.expr import TensorRead, walk
from ..te.tensor import ComputeOp, Tensor

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
    stages it reads that may be computed once at the root instead of inlined (``producers``), the stages that
    always run at the root (other reductions, scans) and those always inlined."""

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
    producers = tuple(t.name for t in anchor.op.inputs() if _elementwise(t) and t.name not in fixed) \
        if anchor is not None else ()
    roots = tuple(t.name for t in stages if t.name not in fixed and not _elementwise(t))
    inlined = tuple(t.name for t in stages if t.name not in fixed and t.name not in producers and _elementwise(t))
    return Sketch(output.name, anchor.name if anchor is not None else None, fusable, producers, roots, inlined)


def schedule_sketch(cfg, output: Tensor) -> Schedule:
    """Declare the knobs of ``output``'s sketch on ``cfg`` and schedule it with their chosen values (a template
    body: ``cfg`` is a ``ConfigSpace`` on the first run, a ``ConfigEntity`` afterwards)."""
    sketch = derive(output)
    target: Target = cfg.target
    lanes = max(1, target.lanes(output.dtype))
    s = create_schedule(output)
    for name in sketch.producers:
        cfg.define_knob(f"{name}.at", ["inline", "root"])
    for name in sketch.inlined:
        s[name].compute_inline()
    for name in sketch.producers:
        if cfg[f"{name}.at"] == "inline":
            s[name].compute_inline()
        else:
            _root(s[name])
    for name in sketch.roots:
        _root(s[name])
    if sketch.anchor is None:
        _elementwise_output(s[output.name], lanes)
        return s
    anchor = s[sketch.anchor]
    spatial, reduce = anchor.axis, anchor.reduce_axis
    for i, ax in enumerate(spatial):
        cfg.define_split(f"tile_{ax.name}", ax.extent, num_outputs=4, policy="tiles",
                         inner=_register_tiles(ax.extent, lanes if i == len(spatial) - 1 else 1))
    for r in reduce:
        cfg.define_split(f"tile_{r.name}", r.extent, num_outputs=2)
    cfg.define_knob("parallel", list(range(1, len(spatial) + 1)))
    cfg.define_knob("unroll", list(UNROLL_STEPS))
    if sketch.fusable:
        cfg.define_knob("fuse", [True, False])
    cfg.add_filter(lambda c: _fits(c, spatial, lanes, target))
    tiles = [cfg[f"tile_{ax.name}"].size for ax in spatial]
    if sketch.fusable and cfg["fuse"]:
        if sketch.anchor == sketch.output:
            anchor = s[s.cache_write(sketch.anchor, "local")]
        _fused(cfg, s[output.name], anchor, tiles)
    else:
        _in_place(cfg, anchor)
        if sketch.anchor != sketch.output:
            _elementwise_output(s[output.name], lanes)
    return s


# ------------------------------------------------------------------------- the two tilings of the anchor

def _fused(cfg, out: StageHandle, acc: StageHandle, tiles: list[tuple[int, ...]]) -> None:
    """S0 S1 over the output's loops, the anchor computed inside S1 into a local buffer: R0 S2 R1 S3."""
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
    s2, s3 = zip(*[acc.split(ax, t[3]) for ax, t in zip(acc.axis, tiles)])
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
    from ..operators.kernel import schedule_elementwise  # the network layer's rule; imported late (it imports us)

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

def _register_tiles(extent: int, lanes: int) -> list[int]:
    """Candidate register-tile sizes of an axis: small ones, or for the vectorized axis whole vectors (up to
    ``MAX_VECTORS``) and the divisors of the extent up to that width."""
    if lanes == 1:
        sizes = set(SCALAR_TILES)
    else:
        widest = MAX_VECTORS * lanes
        sizes = {lanes * v for v in range(1, MAX_VECTORS + 1)} | {d for d in range(1, widest + 1) if extent % d == 0}
    return sorted(t for t in sizes if t <= extent) or [extent]


def _fits(cfg, spatial: tuple[Axis, ...], lanes: int, target: Target) -> bool:
    """The register tile's accumulators fit the target's vector registers."""
    sizes = [cfg[f"tile_{ax.name}"].size[-1] for ax in spatial]
    vectors = -(-sizes[-1] // lanes)
    return math.prod(sizes[:-1]) * vectors <= target.max_accumulators(vectors)


def _elementwise(t: Tensor) -> bool:
    return isinstance(t.op, ComputeOp) and not t.op.reduce_axes and t.op.scan_axis is None


def _fusable(anchor: Tensor, output: Tensor, stages: list[Tensor]) -> bool:
    """Whether every stage between the anchor and the output is elementwise over the anchor's shape and reads its
    producers on that path at its own index (so an output tile needs exactly the same tile of the anchor)."""
    path = {anchor.name}
    for t in stages[stages.index(anchor) + 1:]:
        reads = [n for n in walk(t.op.body) if isinstance(n, TensorRead) and n.tensor.name in path]
        if not reads:
            continue
        own = tuple(a.var for a in t.op.axes)
        if not _elementwise(t) or t.shape != anchor.shape or any(r.indices != own for r in reads):
            return False
        path.add(t.name)
    return output.name in path


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

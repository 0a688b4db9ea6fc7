"""Turn a schedule into a loop nest: inlining, loops, guards, reduction init.

Each stage computed at the root iterates its whole shape; a stage computed at a loop of a
consumer iterates only the region that the consumer reads inside that loop (``bound.infer_region``),
stored in a local buffer allocated there. It may also be computed at a loop of a stage that its consumer is
computed inside (a depthwise layer's rows computed once per row band of the next layer's output, outside that
layer's accumulator): its region is then what the consumer reads of it over the consumer's own region there. Splits that do not divide get guards, placed just
inside the innermost loop whose variable they use.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Callable

from ..arith import Analyzer, Ranges
from ..errors import LoweringError, ScheduleError
from ..ir.nodes import Allocate, Buffer, For, ForKind, IfThenElse, Load, Prefetch, PrimFunc, Scope, Stmt, Store, seq
from ..schedule.schedule import INLINE, ROOT, AttachAt, Schedule, SplitRel, StageState, split_extents
from ..target import CACHE_LINE
from ..te.expr import (AxisKind, Binary, BinOp, Call, Cast, Compare, CmpOp, Const, Expr, Not, Reduce, Reducer, Select,
                       TensorRead, Var, free_vars, substitute, transform, walk)
from ..te.tensor import Tensor
from .bound import Region, domain_guards, infer_region, union_regions

_INDEX_LIMIT = 2**31 - 1
#: a prefetch share of at most this many lines is unrolled into straight-line code
MAX_PREFETCH_UNROLL = 8
#: threads in one GPU thread block, on every CUDA GPU
MAX_THREADS_PER_BLOCK = 1024


def build_loop_nest(sch: Schedule, args: list[Tensor] | None, name: str,
                    analyzer: Analyzer | None = None) -> PrimFunc:
    """The first lowering step: schedule -> loop IR (``PrimFunc``)."""
    return _Builder(sch, args, name, analyzer or Analyzer()).build()


@dataclass(frozen=True)
class _Leaves:
    """The loops of one stage: extent and variable of each leaf axis, and what each axis is worth."""

    extents: dict[str, int]  # every axis (root, split parts, fused) -> extent
    vars: dict[str, Var]  # leaf axis -> its loop variable
    values: dict[str, Expr]  # every axis -> its value in terms of the leaf variables
    split_guards: list[Expr]  # conditions for splits whose parts overshoot their parent

    def ranges(self, axes) -> Ranges:
        return {self.vars[a]: (0, self.extents[a] - 1) for a in axes}


def _leaves(st: StageState, reg: Region) -> _Leaves:
    """Extents of every axis of ``st`` over ``reg``, and the value of every axis from the leaf loop variables."""
    op = st.op
    ext = {iv.name: (reg.extents[d] if d < len(op.axes) else iv.extent)
           for d, iv in enumerate(list(op.axes) + list(op.reduce_axes))}
    for rel in st.relations:
        if isinstance(rel, SplitRel):
            ext[rel.outer], ext[rel.inner] = split_extents(ext[rel.parent], rel.factor, rel.nparts)
        else:
            ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
    leaf_vars = {a: Var(a) for a in st.leaves}
    value: dict[str, Expr] = dict(leaf_vars)
    guards: list[Expr] = []
    for rel in reversed(st.relations):
        if isinstance(rel, SplitRel):
            value[rel.parent] = value[rel.outer] * ext[rel.inner] + value[rel.inner]
            if ext[rel.outer] * ext[rel.inner] != ext[rel.parent]:
                guards.append(Compare(CmpOp.LT, value[rel.parent], Const(ext[rel.parent])))
        else:
            value[rel.outer] = Binary(BinOp.FLOORDIV, value[rel.fused], Const(ext[rel.inner]))
            value[rel.inner] = Binary(BinOp.FLOORMOD, value[rel.fused], Const(ext[rel.inner]))
    return _Leaves(ext, leaf_vars, value, guards)


def _loop_kinds(st: StageState, in_parallel: bool, in_vector: bool) -> list[tuple[str, ForKind]]:
    """(axis, kind) of each leaf loop, outermost first; a parallel loop inside a parallel or vectorized
    loop is a ``ScheduleError``."""
    loops: list[tuple[str, ForKind]] = []
    for a in st.leaves:
        kind = st.annotations.get(a, ForKind.SERIAL)
        if kind.is_gpu and (in_parallel or in_vector):
            raise ScheduleError(st.name, a, f"bound to {kind.value} inside a parallel or vectorized loop; GPU "
                                            "kernels use bind only")
        if kind is ForKind.PARALLEL:
            if in_parallel:
                raise ScheduleError(st.name, a, "parallel loop nested inside another parallel loop")
            if in_vector:
                raise ScheduleError(st.name, a, "parallel loop nested inside a vectorized loop; vectorize an "
                                                "inner loop and parallelize an outer one")
            in_parallel = True
        in_vector = in_vector or kind is ForKind.VECTORIZED
        loops.append((a, kind))
    return loops


def _check_scan_order(st: StageState, loops: list[tuple[str, ForKind]]) -> None:
    """A scan's loops along its axis (split or fused) must run one iteration after another, in order."""
    if st.op.scan_axis is None:
        return
    ordered = {st.op.axes[st.op.scan_axis].name}
    for rel in st.relations:
        if isinstance(rel, SplitRel) and rel.parent in ordered:
            ordered |= {rel.outer, rel.inner}
        elif not isinstance(rel, SplitRel) and (rel.outer in ordered or rel.inner in ordered):
            ordered.add(rel.fused)
    for a, kind in loops:
        if a in ordered and kind in (ForKind.PARALLEL, ForKind.VECTORIZED) or a in ordered and kind.is_gpu:
            raise ScheduleError(st.name, a, f"loop runs along the axis of a scan, whose elements are computed from "
                                            f"the ones before: it cannot be {kind.value}; parallelize or vectorize "
                                            "the other axes")


@dataclass(frozen=True)
class _PrefetchPlan:
    """What a prefetch fetches (``_Builder._plan_prefetches``): ``lines`` cache lines of ``buffer``, line ``q`` at
    element ``address(q)`` of the next iteration (the last iteration's next is the first); ``t`` of ``shares``: the
    share of the enclosing loops."""

    buffer: Buffer
    lines: int
    address: Callable[[Expr], Expr]
    t: Expr
    shares: int


def _check_no_vector(st: StageState, loops: list[tuple[str, ForKind]], axes: list[str], p) -> None:
    """A prefetch issued inside a vectorized loop is a ``ScheduleError``."""
    kinds = dict(loops)
    vector = next((a for a in axes if kinds.get(a) is ForKind.VECTORIZED), None)
    if vector is not None:
        raise ScheduleError(st.name, vector, f"prefetch of '{p.tensor}' is issued inside this vectorized loop; issue "
                                             "it at a loop outside the vectorized one")


class _Builder:
    def __init__(self, sch: Schedule, args: list[Tensor] | None, name: str, analyzer: Analyzer):
        if not name.isidentifier() or not name.isascii():
            raise LoweringError(f"kernel name {name!r} must be an identifier (ASCII letters, digits and '_', "
                                "not starting with a digit)")
        self.ana = analyzer
        self.sch = sch
        self.name = name
        self.stages = sch.stages
        self.bodies = self._inline_bodies()
        reads = {r: _reads(b) - {r} for r, b in self.bodies.items() if self.stages[r].attach != INLINE}
        self.readers = {n: [r for r, rd in reads.items() if n in rd] for n in self.stages}
        self._check_attachments()
        self.arg_names = self._arg_names(args)
        self.buffers: dict[str, Buffer] = {}
        self.regions: dict[str, Region] = {}
        self.prefetch_plans: dict = {}  # Prefetch step -> _PrefetchPlan, made while its loop's stage is built
        # GPU: variables of loops bound to threads (a shared buffer's region covers all of them), and the
        # bindings of the loops around the stage being built (index -> extent and the stage that binds it)
        self.thread_vars: set[Var] = set()
        self.bound: dict[ForKind, tuple[int, str]] = {}
        # Shared memory exists in GPU kernels only: on a CPU a 'shared' cache stage is a local buffer.
        self.gpu = any(k.is_gpu for st in self.stages.values() for k in st.annotations.values())
        workspaces = []
        for n, st in self.stages.items():
            if st.attach == INLINE and n not in self.arg_names:
                continue
            if self.gpu and st.attach == ROOT and st.scope is Scope.SHARED and n not in self.arg_names:
                raise ScheduleError(n, None, "a shared-memory stage must be computed inside the loops of a thread "
                                             "block: compute_at it at a loop of its reader")
            if prod(st.shape) > _INDEX_LIMIT:
                raise LoweringError(f"tensor '{n}' has {prod(st.shape)} elements; at most 2**31-1 are supported")
            if n in self.arg_names or st.attach == ROOT:
                self.buffers[n] = Buffer(n, st.shape, st.dtype, Scope.GLOBAL)
                if n not in self.arg_names:
                    workspaces.append(self.buffers[n])
        self.workspaces = tuple(workspaces)

    # ------------------------------------------------------------------ graph checks
    def _inline_bodies(self) -> dict[str, Expr]:
        bodies: dict[str, Expr] = {}
        for n, st in self.stages.items():
            if st.is_placeholder:
                continue

            def expand(e, _b=bodies):
                if isinstance(e, TensorRead) and self.stages[e.tensor.name].attach == INLINE:
                    src = self.stages[e.tensor.name]
                    return substitute(_b[src.name], {iv.var: i for iv, i in zip(src.op.axes, e.indices)})
                return e

            bodies[n] = transform(st.op.body, expand)
        return bodies

    def _check_attachments(self) -> None:
        for n, st in self.stages.items():
            if not isinstance(st.attach, AttachAt):
                continue
            tgt = self.stages[st.attach.target]
            if tgt.attach == INLINE:
                raise ScheduleError(n, None, f"compute_at target '{tgt.name}' is inlined; attach to its consumer")
            if st.attach.axis not in tgt.leaves:
                raise ScheduleError(tgt.name, st.attach.axis, f"'{n}' is computed at this axis, which is no longer "
                                                              f"a loop of '{tgt.name}' (loops: {tgt.leaves})")
            paths = self._paths_to(n, tgt.name)
            if paths is None:
                raise ScheduleError(n, None, f"computed at '{tgt.name}' but read by {self.readers[n]} after inlining;"
                                             " a stage must be computed at its consumers' stage, or at a loop of a "
                                             "stage its consumers are computed inside")
            for path in paths:
                if len(path) > 1:  # through a consumer computed inside tgt: at or outside the loop that holds it
                    holder = self.stages[path[-2]].attach.axis
                    if tgt.leaves.index(st.attach.axis) > tgt.leaves.index(holder):
                        raise ScheduleError(n, None, f"computed at loop '{st.attach.axis}' of '{tgt.name}', inside "
                                                     f"loop '{holder}' where its consumer '{path[0]}' is computed; "
                                                     "compute it at that loop or an outer one")
            # no cycles: walking up the attach chain must end at the root
            seen, cur = {n}, st
            while isinstance(cur.attach, AttachAt):
                if cur.attach.target in seen:
                    raise ScheduleError(n, None, "compute_at forms a cycle")
                seen.add(cur.attach.target)
                cur = self.stages[cur.attach.target]

    def _paths_to(self, name: str, target: str) -> list[list[str]] | None:
        """For each reader of ``name``, the consumers from it up to ``target`` (its last element), each computed
        inside the next; None when a reader is not ``target`` nor computed inside it."""
        paths = []
        for reader in self.readers[name]:
            path = [reader]
            while path[-1] != target:
                attach = self.stages[path[-1]].attach
                if not isinstance(attach, AttachAt) or attach.target in path:
                    return None
                path.append(attach.target)
            paths.append(path)
        return paths or None

    def _region_read(self, name: str, paths: list[list[str]], root_val: dict, free: Ranges,
                     fixed: Ranges) -> Region:
        """The region of ``name`` its readers read while the ``free`` loops of the stage being built (each path's
        last element; its root variables at ``root_val``) sweep their ranges: the union over ``paths`` of what
        each reader reads (``_path_region``)."""
        regions = [self._path_region(name, path, root_val, free, fixed) for path in paths]
        return union_regions(regions, self.stages[name].shape, fixed, self.ana)

    def _path_region(self, name: str, path: list[str], root_val: dict, free: Ranges, fixed: Ranges) -> Region:
        """The region of ``name`` read through ``path``: through each consumer computed inside the next, the region
        of that consumer there, then what its body reads of the stage before."""
        if len(path) == 1:
            return infer_region(name, self.stages[name].shape, self.bodies[path[0]], root_val, free, fixed, self.ana)
        reader = self.stages[path[0]]  # its region: what all its own readers read (it may have several)
        outer = self._region_read(reader.name, self._paths_to(reader.name, path[-1]), root_val, free, fixed)
        axes = list(reader.op.axes)
        inner = {iv.var: Var(f"{iv.var.name}.r") for iv in axes}
        values = {iv.var: self.ana.simplify(outer.mins[d] + inner[iv.var], fixed) for d, iv in enumerate(axes)}
        sweep = {inner[iv.var]: (0, outer.extents[d] - 1) for d, iv in enumerate(axes)}
        sweep.update({iv.var: (0, iv.extent - 1) for iv in reader.op.reduce_axes})
        return infer_region(name, self.stages[name].shape, self.bodies[reader.name], values, sweep, fixed, self.ana)

    def _arg_names(self, args: list[Tensor] | None) -> list[str]:
        placeholders = [n for n, st in self.stages.items() if st.is_placeholder]
        if args is None:
            return placeholders + list(self.sch.outputs)
        names = []
        for t in args:
            if not isinstance(t, Tensor):
                raise LoweringError(f"args must be tensors, got {t!r}")
            if t.name not in self.stages:
                raise LoweringError(f"argument '{t.name}' is not part of the scheduled computation")
            if t.name in names:
                raise LoweringError(f"argument '{t.name}' is listed twice")
            names.append(t.name)
        missing = [n for n in placeholders + list(self.sch.outputs) if n not in names]
        if missing:
            raise LoweringError(f"args must include every input and output; missing {missing}")
        for n in names:
            if self.stages[n].attach != ROOT:
                raise LoweringError(f"'{n}' is passed as an argument, so it must be computed at the root: drop it "
                                    "from args or remove its compute_inline/compute_at")
        return names

    # ------------------------------------------------------------------ building
    def build(self) -> PrimFunc:
        stmts = []
        for n, st in self.stages.items():
            if st.is_placeholder or st.attach != ROOT:
                continue
            stmts.append(self._stage_nest(st, None, {}, False, False))
        args = tuple(self.buffers[n] for n in self.arg_names)
        return PrimFunc(self.name, args, self.workspaces, seq(*stmts))

    def _stage_nest(self, st: StageState, reg: Region | None, outer: Ranges, in_parallel: bool,
                    in_vector: bool) -> Stmt:
        """The loops of ``st`` over ``reg`` (None: its whole shape), inside loops with ``outer`` ranges."""
        full = reg is None
        reg = Region.whole(st.shape) if full else reg
        op = st.op
        lv = _leaves(st, reg)
        ranges = {**outer, **lv.ranges(st.leaves)}
        guards = list(lv.split_guards)
        if not full:
            for d, iv in enumerate(op.axes):
                guards += domain_guards(reg.mins[d], lv.values[iv.name], reg.extents[d], st.shape[d], outer, self.ana)
        # absolute value of every root variable
        root_val = {iv.var: self.ana.simplify(reg.mins[d] + lv.values[iv.name] if d < len(op.axes)
                                              else lv.values[iv.name], ranges)
                    for d, iv in enumerate(list(op.axes) + list(op.reduce_axes))}
        placed = self._place_guards(guards, st, lv, ranges)
        self._check_bindings(st, lv)
        children = self._children_at(st)
        for axis, kids in children.items():
            pos = st.leaves.index(axis)
            free = lv.ranges(st.leaves[pos + 1:])
            fixed = {**outer, **lv.ranges(st.leaves[:pos + 1])}
            for kid in kids:
                kid_free, kid_fixed = free, fixed
                shared = self.gpu and kid.scope is Scope.SHARED
                if shared:  # one buffer for the whole block: every thread's part of it
                    kid_free = {**free, **{v: r for v, r in fixed.items() if v in self.thread_vars}}
                    kid_fixed = {v: r for v, r in fixed.items() if v not in self.thread_vars}
                region = self._region_read(kid.name, self._paths_to(kid.name, st.name), root_val, kid_free,
                                           kid_fixed)
                self.regions[kid.name] = region
                scope = Scope.SHARED if shared else Scope.LOCAL
                self.buffers[kid.name] = Buffer(kid.name, region.extents, kid.dtype, scope)
        update, init = self._statements(st, reg, root_val, ranges)
        loops = _loop_kinds(st, in_parallel, in_vector)
        _check_scan_order(st, loops)
        self._plan_prefetches(st, lv, loops, outer, root_val)
        prefetches = self._prefetches(st, lv, loops)
        red_pos = next((i for i, a in enumerate(st.leaves) if st.kinds[a] is AxisKind.REDUCE), len(st.leaves))
        reduce_vars = {lv.vars[a] for a in st.leaves if st.kinds[a] is AxisKind.REDUCE}

        def nest(stmt: Stmt, lo: int, hi: int, only_spatial: bool, with_children: bool) -> Stmt:
            for i in range(hi - 1, lo - 1, -1):
                a, kind = loops[i]
                if only_spatial and st.kinds[a] is AxisKind.REDUCE:
                    continue
                conds = [g for g in placed.get(i, []) if not (only_spatial and free_vars(g) & reduce_vars)]
                if conds:
                    stmt = IfThenElse(_and(conds), stmt)
                if with_children and a in children:
                    stmt = self._attach_children(children[a], stmt, st, loops, i, lv, outer, in_parallel, in_vector)
                if with_children and i in prefetches:
                    stmt = seq(*prefetches[i], stmt)
                stmt = For(lv.vars[a], lv.extents[a], kind, stmt)
            return stmt

        inner = nest(update, red_pos, len(loops), False, True)
        if init is not None:
            inner = seq(nest(init, red_pos, len(loops), True, False), inner)
        out = nest(inner, 0, red_pos, False, True)
        if placed.get(-1):
            out = IfThenElse(_and(placed[-1]), out)
        return out

    def _plan_prefetches(self, st: StageState, lv: _Leaves, loops: list[tuple[str, ForKind]], outer: Ranges,
                         root_val: dict) -> None:
        """For each prefetch of a loop of ``st`` (``StageHandle.prefetch``), issued by ``st`` or by a stage computed
        inside that loop: the region of the tensor read in one iteration of the loop, cut into cache lines
        (``_lines``) and taken at the next iteration, and the number ``t`` of ``shares`` that the loops of ``st``
        inside it give each iteration of the issuing stage (down to ``at``, or to the loop holding that stage)."""
        for p in (p for other in self.stages.values() for p in other.prefetches if p.owner == st.name):
            issuer = self.stages[p.stage]
            if p.loop not in st.leaves:
                raise ScheduleError(st.name, p.loop, f"prefetch of '{p.tensor}': '{p.loop}' is no longer a loop of the "
                                                     f"stage (loops: {st.leaves}); prefetch after splitting")
            if self.gpu:
                raise ScheduleError(st.name, p.loop, "prefetch is for CPU kernels; a GPU kernel stages what it "
                                                     "reads in shared memory (cache_read) instead")
            first_pos = st.leaves.index(p.loop)
            if issuer is st:
                last = p.at
            else:  # the loop of st that holds the issuing stage
                cur = issuer
                while isinstance(cur.attach, AttachAt) and cur.attach.target != st.name:
                    cur = self.stages[cur.attach.target]
                last = cur.attach.axis if isinstance(cur.attach, AttachAt) else None
            if last not in st.leaves or st.leaves.index(last) < first_pos:
                raise ScheduleError(issuer.name, p.at, f"prefetch of '{p.tensor}' for loop '{p.loop}' of '{st.name}': "
                                                       "it must be issued at that loop or inside it")
            src = self.stages[p.tensor]
            paths = self._paths_to(p.tensor, st.name) if src.attach == ROOT else None
            if paths is None:
                raise ScheduleError(st.name, p.loop, f"prefetch: '{p.tensor}' must be an input or a stage computed "
                                                     f"at the root, read only by '{st.name}' or a stage computed "
                                                     "inside it")
            free = lv.ranges(st.leaves[first_pos + 1:])
            fixed = {**outer, **lv.ranges(st.leaves[:first_pos + 1])}
            region = self._region_read(p.tensor, paths, root_val, free, fixed)
            buf = self.buffers[p.tensor]
            lines, address = self._lines(buf, region, fixed)
            inner = st.leaves[first_pos + 1:st.leaves.index(last) + 1]
            _check_no_vector(st, loops, inner, p)
            t: Expr = Const(0)
            for a in inner:
                t = t * lv.extents[a] + lv.vars[a]
            v, extent = lv.vars[p.loop], lv.extents[p.loop]
            self.prefetch_plans[p] = _PrefetchPlan(
                buf, lines, lambda q, _a=address, _v=v, _e=extent: substitute(_a(q), {_v: (_v + 1) % _e}), t,
                prod(lv.extents[a] for a in inner))

    def _prefetches(self, st: StageState, lv: _Leaves, loops: list[tuple[str, ForKind]]) -> dict[int, list[Stmt]]:
        """The prefetch statements ``st`` issues, keyed by the position of the loop whose body they open: its
        iteration ``t`` of ``shares`` (numbered by the loops of the loop's stage, then by its own loops down to
        ``at``) fetches lines ``[t * per, (t + 1) * per)`` of the plan (``per``: lines / shares, rounded up; the
        shares past the last line fetch it again). No branch: a condition inside a register tile's reduction loop
        can keep the C compiler from holding the accumulators in registers."""
        out: dict[int, list[Stmt]] = {}
        for p in st.prefetches:
            plan = self.prefetch_plans.get(p)
            if plan is None or p.at not in st.leaves:
                raise ScheduleError(st.name, p.at, f"prefetch of '{p.tensor}': '{p.at}' must be a loop of "
                                                   f"'{st.name}' (loops: {st.leaves}) inside loop '{p.loop}' of "
                                                   f"'{p.owner}'")
            inner = [] if p.owner == st.name else st.leaves[:st.leaves.index(p.at) + 1]
            _check_no_vector(st, loops, inner, p)
            t, shares = plan.t, plan.shares
            for a in inner:
                t, shares = t * lv.extents[a] + lv.vars[a], shares * lv.extents[a]
            per = -(-plan.lines // shares)
            k = Var(f"{p.tensor}.line")
            line = t * per + k
            if per * shares > plan.lines:  # the last shares fetch the last line again
                line = Binary(BinOp.MIN, line, Const(plan.lines - 1))
            kind = ForKind.UNROLLED if per <= MAX_PREFETCH_UNROLL else ForKind.SERIAL
            fetch = For(k, per, kind, Prefetch(plan.buffer, plan.address(line)))
            out.setdefault(st.leaves.index(p.at), []).append(fetch)
        return out

    def _lines(self, buf: Buffer, region: Region, fixed: Ranges) -> tuple[int, Callable[[Expr], Expr]]:
        """The cache lines of ``region`` of ``buf``: how many, and the element index in line ``q`` (an
        expression) of them. The region is read in contiguous chunks: the innermost dimensions it covers whole,
        with the first it does not; the outer ones give the chunks. A chunk that may not start on a line
        boundary has one more line, its last element."""
        shape = buf.shape
        strides = [prod(shape[d + 1:]) for d in range(len(shape))]
        c = max((d for d in range(len(shape)) if region.extents[d] != shape[d]), default=0)
        chunk = region.extents[c] * strides[c]
        outer = list(range(c))
        first = self.ana.simplify(sum((m * s for m, s in zip(region.mins, strides)), Const(0)), fixed)
        per_line = max(1, CACHE_LINE // buf.dtype.bytes)
        terms, const = self.ana.linear(first)
        aligned = const % per_line == 0 and all(k % per_line == 0 for k in terms.values()) and \
            all(strides[d] % per_line == 0 for d in outer)
        per_chunk = -(-chunk // per_line) + (0 if aligned else 1)
        chunks = prod(region.extents[d] for d in outer)
        bounds = self.ana.bounds(first, fixed)
        span = sum((region.extents[d] - 1) * strides[d] for d in range(len(shape))) + 1
        low, high = bounds is None or bounds[0] < 0, bounds is None or bounds[1] + span > buf.size

        def address(q: Expr) -> Expr:
            start, rest = first, (q // per_chunk if chunks > 1 else None)
            for d in reversed(outer):  # the chunk's coordinates, innermost dimension first
                if rest is None or region.extents[d] == 1:
                    continue
                start = start + (rest % region.extents[d]) * strides[d]
                rest = rest // region.extents[d]
            offset = (q % per_chunk if chunks > 1 else q) * per_line
            index = start + offset if aligned else Binary(BinOp.MIN, start + offset, start + (chunk - 1))
            if high:  # a tile past the tensor's end (a split that does not divide) reads nothing there
                index = Binary(BinOp.MIN, index, Const(buf.size - 1))
            return Binary(BinOp.MAX, index, Const(0)) if low else index

        return chunks * per_chunk, address

    def _check_bindings(self, st: StageState, lv: _Leaves) -> None:
        """GPU thread bindings of ``st``: a loop bound to an index that an enclosing stage binds too is a
        cooperative loop of that stage's threads, so it may not use more of them; and a block has at most
        ``MAX_THREADS_PER_BLOCK`` threads."""
        own: dict[ForKind, tuple[int, str]] = {}
        for a in st.leaves:
            kind = st.annotations.get(a)
            if kind is None or not kind.is_gpu:
                continue
            if kind is ForKind.VTHREAD or kind.is_thread:
                self.thread_vars.add(lv.vars[a])
            if not kind.is_thread:
                continue
            ext = lv.extents[a]
            if kind in self.bound and ext > self.bound[kind][0]:
                outer_ext, outer_stage = self.bound[kind]
                raise ScheduleError(st.name, a, f"binds {ext} {kind.value} inside the loops of '{outer_stage}', "
                                                f"whose blocks have {outer_ext}: a cooperative loop can use only "
                                                "the threads of its block; split the axis so its bound part has "
                                                f"at most {outer_ext}")
            own[kind] = (ext, a)
        threads = 1
        for kind in (ForKind.THREAD_X, ForKind.THREAD_Y, ForKind.THREAD_Z):
            threads *= max((self.bound[kind][0] if kind in self.bound else 1), own.get(kind, (1, ""))[0])
        if threads > MAX_THREADS_PER_BLOCK:
            axis = next(iter(own.values()), (0, None))[1]
            raise ScheduleError(st.name, axis, f"its thread bindings make blocks of {threads} threads; a GPU block "
                                               f"has at most {MAX_THREADS_PER_BLOCK}: bind smaller parts of the "
                                               "axes to threadIdx")

    def _place_guards(self, guards: list[Expr], st: StageState, lv: _Leaves, ranges: Ranges) -> dict[int, list[Expr]]:
        """Each guard that ``ranges`` do not decide, keyed by the position of the innermost leaf loop whose
        variable it uses (-1: none, it goes outside every loop)."""
        leaf_pos = {lv.vars[a]: i for i, a in enumerate(st.leaves)}
        placed: dict[int, list[Expr]] = {}
        for g in (self.ana.simplify(g, ranges) for g in guards):
            if isinstance(g, Const) and g.value:
                continue
            pos = max((leaf_pos[v] for v in free_vars(g) if v in leaf_pos), default=-1)
            placed.setdefault(pos, []).append(g)
        return placed

    def _children_at(self, st: StageState) -> dict[str, list[StageState]]:
        """The stages computed inside the loops of ``st``, by loop."""
        children: dict[str, list[StageState]] = {}
        for cst in self.stages.values():
            if isinstance(cst.attach, AttachAt) and cst.attach.target == st.name:
                children.setdefault(cst.attach.axis, []).append(cst)
        return children

    def _statements(self, st: StageState, reg: Region, root_val: dict, ranges: Ranges) -> tuple[Stmt, Stmt | None]:
        """The innermost statement of ``st``, and the initialisation of its accumulator if it reduces."""
        body_expr = self.bodies[st.name]
        buf = self.buffers[st.name]
        index = self._flat(buf, [root_val[iv.var] - reg.mins[d] for d, iv in enumerate(st.op.axes)], ranges)
        if isinstance(body_expr, Reduce):
            src = self._loads(substitute(body_expr.source, root_val), ranges)
            update = Store(buf, index, _combine(body_expr.combiner, Load(buf, index), src))
            return update, Store(buf, index, body_expr.identity())
        return Store(buf, index, self._loads(substitute(body_expr, root_val), ranges)), None

    def _attach_children(self, kids, stmt, st, loops, pos, lv: _Leaves, outer, in_parallel, in_vector) -> Stmt:
        ranges = {**outer, **lv.ranges(st.leaves[:pos + 1])}
        par = in_parallel or any(k is ForKind.PARALLEL for _, k in loops[:pos + 1])
        vec = in_vector or any(k is ForKind.VECTORIZED for _, k in loops[:pos + 1])
        saved = self.bound
        self.bound = dict(saved)
        for a, kind in loops[:pos + 1]:
            if kind.is_thread and kind not in self.bound:
                self.bound[kind] = (lv.extents[a], st.name)
        try:
            for kid in reversed(kids):
                kid_nest = self._stage_nest(kid, self.regions[kid.name], ranges, par, vec)
                stmt = Allocate(self.buffers[kid.name], seq(kid_nest, stmt))
        finally:
            self.bound = saved
        return stmt

    # ------------------------------------------------------------------ expressions
    def _flat(self, buf: Buffer, idx: list[Expr], ranges: Ranges) -> Expr:
        # Combine the dimensions' linear forms directly (fast path); simplify only non-linear leftovers.
        terms: dict = {}
        const = 0
        for d in range(len(idx)):
            stride = prod(buf.shape[d + 1:])
            t, c = self.ana.linear(idx[d])
            const += c * stride
            for atom, coef in t.items():
                terms[atom] = terms.get(atom, 0) + coef * stride
        flat = self.ana.from_linear({a: c for a, c in terms.items() if c}, const)
        # Only the non-linear atoms (// and % of loop variables) can simplify further; when none does,
        # the flat form is already what simplify(flat) returns.
        if all(isinstance(a, Var) or self.ana.simplify(a, ranges) is a for a in terms):
            return flat
        return self.ana.simplify(flat, ranges)

    def _loads(self, e: Expr, ranges: Ranges) -> Expr:
        def conv(n):
            if isinstance(n, TensorRead):
                name = n.tensor.name
                buf = self.buffers[name]
                if name in self.regions:
                    idx = [i - m for i, m in zip(n.indices, self.regions[name].mins)]
                else:
                    idx = list(n.indices)
                return Load(buf, self._flat(buf, idx, ranges))
            return n

        out = transform(e, conv)
        return self.ana.simplify(out, ranges) if _needs_simplify(out) else out


def _needs_simplify(e: Expr) -> bool:
    """Whether anything outside the (already flat) load indices could simplify: integer arithmetic,
    comparisons, selects, casts or constant operands."""
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Load):
            continue
        if isinstance(n, (Compare, Select, Not, Cast, Call)) or (isinstance(n, Binary) and
                                                                  (n.dtype.is_int or isinstance(n.a, Const) or
                                                                   isinstance(n.b, Const))):
            return True
        if isinstance(n, Binary):
            stack += (n.a, n.b)
    return False


def _reads(body: Expr) -> set[str]:
    return {n.tensor.name for n in walk(body) if isinstance(n, TensorRead)}


def _combine(c: Reducer, acc: Expr, x: Expr) -> Expr:
    if c is Reducer.SUM:
        return Binary(BinOp.ADD, acc, x)
    if c is Reducer.PROD:
        return Binary(BinOp.MUL, acc, x)
    return Binary(BinOp.MAX if c is Reducer.MAX else BinOp.MIN, acc, x)


def _and(conds: list[Expr]) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = Binary(BinOp.AND, out, c)
    return out

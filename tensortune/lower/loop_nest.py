"""Turn a schedule into a loop nest: inlining, bound inference, loops, guards, reduction init.

Each stage computed at the root iterates its whole shape; a stage computed at a loop of a
consumer iterates only the region that the consumer reads inside that loop (bound inference),
stored in a local buffer allocated there. Splits that do not divide get guards, placed just
inside the innermost loop whose variable they use.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from ..errors import LoweringError, ScheduleError
from ..ir.nodes import Allocate, Buffer, For, ForKind, IfThenElse, PrimFunc, Scope, Stmt, Store, seq
from ..te.expr import (AxisKind, Binary, BinOp, Call, Cast, Compare, CmpOp, Const, Expr, Not, Reduce, Reducer, Select,
                       TensorRead, Var, free_vars, substitute, transform, walk)
from ..te.tensor import Tensor
from ..schedule.schedule import INLINE, ROOT, AttachAt, Schedule, SplitRel, StageState
from ..schedule.steps import Annotation
from ..ir.nodes import Load
from ..arith import Ranges, bounds, from_linear, linear, region, simplify

_FOR_KIND = {Annotation.SERIAL: ForKind.SERIAL, Annotation.UNROLL: ForKind.UNROLLED,
             Annotation.VECTORIZE: ForKind.VECTORIZED, Annotation.PARALLEL: ForKind.PARALLEL}

_INDEX_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class _Region:
    mins: tuple[Expr, ...]
    extents: tuple[int, ...]


def build_loop_nest(sch: Schedule, args: list[Tensor] | None, name: str) -> PrimFunc:
    """The first lowering step: schedule -> loop IR (``PrimFunc``)."""
    return _Builder(sch, args, name).build()


class _Builder:
    def __init__(self, sch: Schedule, args: list[Tensor] | None, name: str):
        from ..codegen.c import RESERVED

        if not name.isidentifier() or not name.isascii() or name in RESERVED or name.startswith("tt_"):
            raise LoweringError(f"kernel name {name!r} must be a C identifier (letters, digits, '_'), not a C "
                                "keyword or library name, and must not start with 'tt_'")
        self.sch = sch
        self.name = name
        self.stages = sch.stages
        self.bodies = self._inline_bodies()
        reads = {r: _reads(b) for r, b in self.bodies.items() if self.stages[r].attach != INLINE}
        self.readers = {n: [r for r, rd in reads.items() if n in rd] for n in self.stages}
        self._check_attachments()
        self.arg_names = self._arg_names(args)
        self.buffers: dict[str, Buffer] = {}
        self.regions: dict[str, _Region] = {}
        workspaces = []
        for n, st in self.stages.items():
            if st.attach == INLINE and n not in self.arg_names:
                continue
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
            if self.readers[n] != [tgt.name]:
                raise ScheduleError(n, None, f"computed at '{tgt.name}' but read by {self.readers[n]} after inlining;"
                                             " a stage must be computed at its only consumer")
            # no cycles: walking up the attach chain must end at the root
            seen, cur = {n}, st
            while isinstance(cur.attach, AttachAt):
                if cur.attach.target in seen:
                    raise ScheduleError(n, None, "compute_at forms a cycle")
                seen.add(cur.attach.target)
                cur = self.stages[cur.attach.target]

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

    def _stage_nest(self, st: StageState, reg: _Region | None, outer: Ranges, in_parallel: bool,
                    in_vector: bool) -> Stmt:
        full = reg is None
        if full:
            reg = _Region(tuple(Const(0) for _ in st.shape), st.shape)
        op = st.op
        roots = list(op.axes) + list(op.reduce_axes)
        root_ext = {iv.name: (reg.extents[d] if d < len(op.axes) else iv.extent) for d, iv in enumerate(roots)}
        ext = dict(root_ext)
        for rel in st.relations:
            if isinstance(rel, SplitRel):
                pe = ext[rel.parent]
                if rel.factor is not None:
                    ext[rel.outer], ext[rel.inner] = -(-pe // rel.factor), rel.factor
                else:
                    ext[rel.outer], ext[rel.inner] = rel.nparts, -(-pe // rel.nparts)
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
        ranges = dict(outer)
        for a, v in leaf_vars.items():
            ranges[v] = (0, ext[a] - 1)
        for d, iv in enumerate(op.axes):
            if not full:
                guards += self._domain_guards(reg.mins[d], value[iv.name], reg.extents[d], st.shape[d], outer)
        # absolute value of every root variable
        root_val = {iv.var: simplify(reg.mins[d] + value[iv.name] if d < len(op.axes) else value[iv.name], ranges)
                    for d, iv in enumerate(roots)}
        kinds = [st.kinds[a] for a in st.leaves]
        red_pos = next((i for i, k in enumerate(kinds) if k is AxisKind.REDUCE), len(kinds))
        leaf_pos = {leaf_vars[a]: i for i, a in enumerate(st.leaves)}
        guards = [g for g in (simplify(g, ranges) for g in guards) if not (isinstance(g, Const) and g.value)]
        placed: dict[int, list[Expr]] = {}
        for g in guards:
            pos = max((leaf_pos[v] for v in free_vars(g) if v in leaf_pos), default=-1)
            placed.setdefault(pos, []).append(g)

        # children computed inside this stage's loops
        children: dict[str, list[StageState]] = {}
        for cname, cst in self.stages.items():
            if isinstance(cst.attach, AttachAt) and cst.attach.target == st.name:
                children.setdefault(cst.attach.axis, []).append(cst)
        for axis, kids in children.items():
            pos = st.leaves.index(axis)
            free = {leaf_vars[a]: (0, ext[a] - 1) for a in st.leaves[pos + 1:]}
            fixed = {**outer, **{leaf_vars[a]: (0, ext[a] - 1) for a in st.leaves[:pos + 1]}}
            for kid in kids:
                self._infer_region(kid, self.bodies[st.name], root_val, free, fixed)

        # innermost statements
        body_expr = self.bodies[st.name]
        buf = self._buffer_of(st)
        sp_idx = [root_val[iv.var] - reg.mins[d] for d, iv in enumerate(op.axes)]
        index = self._flat(buf, sp_idx, ranges)
        if isinstance(body_expr, Reduce):
            src = self._loads(substitute(body_expr.source, root_val), ranges)
            cur = Load(buf, index)
            update = Store(buf, index, _combine(body_expr.combiner, cur, src))
            init = Store(buf, index, body_expr.identity())
        else:
            update = Store(buf, index, self._loads(substitute(body_expr, root_val), ranges))
            init = None

        parallel_here, vector_here = in_parallel, in_vector
        loops: list[tuple[str, ForKind]] = []
        for a in st.leaves:
            kind = _FOR_KIND[st.annotations.get(a, Annotation.SERIAL)]
            if kind is ForKind.PARALLEL:
                if parallel_here:
                    raise ScheduleError(st.name, a, "parallel loop nested inside another parallel loop")
                if vector_here:
                    raise ScheduleError(st.name, a, "parallel loop nested inside a vectorized loop; vectorize an "
                                                    "inner loop and parallelize an outer one")
                parallel_here = True
            vector_here = vector_here or kind is ForKind.VECTORIZED
            loops.append((a, kind))

        def nest(stmt: Stmt, lo: int, hi: int, only_spatial: bool, with_children: bool) -> Stmt:
            for i in range(hi - 1, lo - 1, -1):
                a, kind = loops[i]
                if only_spatial and st.kinds[a] is AxisKind.REDUCE:
                    continue
                conds = [g for g in placed.get(i, []) if not (only_spatial and _uses_reduce(g, st, leaf_vars))]
                if conds:
                    stmt = IfThenElse(_and(conds), stmt)
                if with_children and a in children:
                    stmt = self._attach_children(children[a], stmt, st, loops, i, ext, leaf_vars, outer,
                                                 in_parallel, in_vector)
                stmt = For(leaf_vars[a], ext[a], kind, stmt)
            return stmt

        inner = nest(update, red_pos, len(loops), False, True)
        if init is not None:
            inner = seq(nest(init, red_pos, len(loops), True, False), inner)
        out = nest(inner, 0, red_pos, False, True)
        if placed.get(-1):
            out = IfThenElse(_and(placed[-1]), out)
        return out

    def _attach_children(self, kids, stmt, st, loops, pos, ext, leaf_vars, outer, in_parallel, in_vector) -> Stmt:
        ranges = {**outer, **{leaf_vars[a]: (0, ext[a] - 1) for a in st.leaves[:pos + 1]}}
        par = in_parallel or any(k is ForKind.PARALLEL for _, k in loops[:pos + 1])
        vec = in_vector or any(k is ForKind.VECTORIZED for _, k in loops[:pos + 1])
        for kid in reversed(kids):
            kid_nest = self._stage_nest(kid, self.regions[kid.name], ranges, par, vec)
            stmt = Allocate(self.buffers[kid.name], seq(kid_nest, stmt))
        return stmt

    def _domain_guards(self, mn: Expr, val: Expr, extent: int, full: int, outer: Ranges) -> list[Expr]:
        out = []
        b = bounds(simplify(mn, outer), outer)
        if b is None or b[1] + extent > full:
            out.append(Compare(CmpOp.LT, mn + val, Const(full)))
        if b is None or b[0] < 0:
            out.append(Compare(CmpOp.GE, mn + val, Const(0)))
        return out

    def _infer_region(self, kid: StageState, consumer_body: Expr, root_val: dict, free: Ranges,
                      fixed: Ranges) -> None:
        reads = [n for n in walk(consumer_body) if isinstance(n, TensorRead) and n.tensor.name == kid.name]
        mins: list[Expr] = []
        exts: list[int] = []
        for d, full in enumerate(kid.shape):
            best: tuple[Expr, int] | None = None
            for r in reads:
                rg = region(substitute(r.indices[d], root_val), free, fixed)
                if rg is None:
                    best = None
                    break
                if best is None:
                    best = rg
                    continue
                delta = simplify(rg[0] - best[0], fixed)
                if not isinstance(delta, Const):
                    best = None
                    break
                lo = min(0, int(delta.value))
                hi = max(best[1], int(delta.value) + rg[1])
                best = (simplify(best[0] + lo, fixed), hi - lo)
            if best is None or best[1] >= full:
                best = (Const(0), full)
            mins.append(best[0])
            exts.append(best[1])
        self.regions[kid.name] = _Region(tuple(mins), tuple(exts))
        self.buffers[kid.name] = Buffer(kid.name, tuple(exts), kid.dtype, Scope.LOCAL)

    # ------------------------------------------------------------------ expressions
    def _buffer_of(self, st: StageState) -> Buffer:
        return self.buffers[st.name]

    def _flat(self, buf: Buffer, idx: list[Expr], ranges: Ranges) -> Expr:
        # Combine the dimensions' linear forms directly (fast path); simplify only non-linear leftovers.
        terms: dict = {}
        const = 0
        for d in range(len(idx)):
            stride = prod(buf.shape[d + 1:])
            t, c = linear(idx[d])
            const += c * stride
            for atom, coef in t.items():
                terms[atom] = terms.get(atom, 0) + coef * stride
        flat = from_linear({a: c for a, c in terms.items() if c}, const)
        # Only the non-linear atoms (// and % of loop variables) can simplify further; when none does,
        # the flat form is already what simplify(flat) returns.
        if all(isinstance(a, Var) or simplify(a, ranges) is a for a in terms):
            return flat
        return simplify(flat, ranges)

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
        return simplify(out, ranges) if _needs_simplify(out) else out


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
    return Binary(BinOp.MAX if c is Reducer.MAX else BinOp.MIN, acc, x)


def _and(conds: list[Expr]) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = Binary(BinOp.AND, out, c)
    return out


def _uses_reduce(g: Expr, st: StageState, leaf_vars: dict) -> bool:
    red = {leaf_vars[a] for a in st.leaves if st.kinds[a] is AxisKind.REDUCE}
    return bool(free_vars(g) & red)

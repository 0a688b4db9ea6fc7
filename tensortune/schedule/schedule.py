"""Schedules: *how* the loops of each stage run. A schedule is the list of steps applied to it;
every primitive validates its step and raises ``ScheduleError`` naming stage, axis and rule."""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ..errors import ExprError, ScheduleError
from ..te.expr import AxisKind, IterVar, TensorRead, Var, transform, walk
from ..te.tensor import ComputeOp, PlaceholderOp, Tensor
from ..ir.nodes import ForKind, Scope
from .steps import (Annotate, Bind, CacheRead, CacheWrite, ComputeAt, ComputeInline, ComputeRoot, Fuse, Prefetch,
                    Reorder, Split, Step)


@dataclass(frozen=True)
class Axis:
    """A handle on one loop axis of a stage (what the primitives take and return)."""

    stage: str
    name: str
    extent: int
    kind: AxisKind

    def __repr__(self) -> str:
        return f"Axis({self.stage}.{self.name}, extent={self.extent}, {self.kind.value})"


@dataclass(frozen=True)
class SplitRel:
    parent: str
    outer: str
    inner: str
    factor: int | None
    nparts: int | None


@dataclass(frozen=True)
class FuseRel:
    outer: str
    inner: str
    fused: str


@dataclass(frozen=True)
class AttachAt:
    """The stage is computed inside loop ``axis`` of stage ``target``."""

    target: str
    axis: str


ROOT = "root"
INLINE = "inline"


@dataclass
class StageState:
    """Mutable while a schedule is being built; lowering only reads it."""

    name: str
    op: ComputeOp | PlaceholderOp
    shape: tuple[int, ...]
    dtype: object
    is_output: bool
    root_axes: dict[Var, str] = field(default_factory=dict)  # root var -> axis name
    extents: dict[str, int] = field(default_factory=dict)  # axis name -> extent over the full domain
    kinds: dict[str, AxisKind] = field(default_factory=dict)
    leaves: list[str] = field(default_factory=list)
    relations: list[SplitRel | FuseRel] = field(default_factory=list)
    annotations: dict[str, ForKind] = field(default_factory=dict)
    attach: str | AttachAt = ROOT
    scope: Scope = Scope.GLOBAL  # where its buffer lives when computed inside another stage's loops
    prefetches: list[Prefetch] = field(default_factory=list)

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    def reset_axes(self) -> None:
        self.root_axes.clear()
        self.extents.clear()
        self.kinds.clear()
        self.leaves.clear()
        self.relations.clear()
        self.annotations.clear()
        self.prefetches.clear()
        if self.is_placeholder:
            return
        for iv in self.op.axes + self.op.reduce_axes:
            self.root_axes[iv.var] = iv.name
            self.extents[iv.name] = iv.extent
            self.kinds[iv.name] = iv.kind
            self.leaves.append(iv.name)

    def axis(self, name: str) -> Axis:
        return Axis(self.name, name, self.extents[name], self.kinds[name])


def _copy_state(st: StageState) -> StageState:
    return dataclasses.replace(st, root_axes=dict(st.root_axes), extents=dict(st.extents), kinds=dict(st.kinds),
                               leaves=list(st.leaves), relations=list(st.relations),
                               annotations=dict(st.annotations), prefetches=list(st.prefetches))


def split_extents(extent: int, factor: int | None, nparts: int | None) -> tuple[int, int]:
    """Extents of the outer and inner loops of a split by ``factor`` or into ``nparts`` (their product may
    exceed ``extent``: the last outer iteration is then partial and lowering guards it)."""
    if factor is not None:
        return -(-extent // factor), factor
    assert nparts is not None
    return nparts, -(-extent // nparts)


def tensor_reads(op: ComputeOp | PlaceholderOp) -> list[str]:
    """Names of the stages an op reads, in order of first appearance (not itself: a scan's recurrence)."""
    if isinstance(op, PlaceholderOp):
        return []
    out: list[str] = []
    for n in walk(op.body):
        if isinstance(n, TensorRead) and n.tensor.name not in out and n.tensor.name != op.name:
            out.append(n.tensor.name)
    return out


class Schedule:
    """The stages of an operator graph and the steps that schedule them."""

    def __init__(self, outputs: Tensor | Sequence[Tensor]):
        outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
        if not outs or not all(isinstance(t, Tensor) for t in outs):
            raise ExprError("create_schedule needs a tensor or a list of tensors")
        self.outputs: tuple[str, ...] = tuple(t.name for t in outs)
        self.stages: dict[str, StageState] = {}
        self.tensors: dict[str, Tensor] = {}
        self.steps: list[Step] = []
        for t in _topo(outs):
            st = StageState(t.name, t.op, t.shape, t.dtype, t.name in self.outputs)
            st.reset_axes()
            self.stages[t.name] = st
            self.tensors[t.name] = t

    # ------------------------------------------------------------------ access
    def __getitem__(self, key: Tensor | str) -> "StageHandle":
        name = key.name if isinstance(key, Tensor) else key
        if name not in self.stages:
            raise ScheduleError(str(name), None, f"no such stage; stages are {list(self.stages)}")
        return StageHandle(self, name)

    def consumers(self, name: str) -> list[str]:
        return [s.name for s in self.stages.values() if name in tensor_reads(s.op)]

    def __str__(self) -> str:
        from .steps import step_to_json

        return "\n".join(str(step_to_json(s)) for s in self.steps)

    # ------------------------------------------------------------------ cache stages
    def cache_write(self, tensor: Tensor | str, scope: str = "local") -> Tensor:
        name = tensor.name if isinstance(tensor, Tensor) else tensor
        self.apply(CacheWrite(name, scope))
        return self.tensors[f"{name}.{scope}"]

    def cache_read(self, tensor: Tensor | str, scope: str, readers: Iterable[Tensor | str]) -> Tensor:
        name = tensor.name if isinstance(tensor, Tensor) else tensor
        rs = tuple(r.name if isinstance(r, Tensor) else r for r in readers)
        self.apply(CacheRead(name, scope, rs))
        return self.tensors[f"{name}.{scope}"]

    # ------------------------------------------------------------------ replay
    @classmethod
    def replay(cls, outputs: Tensor | Sequence[Tensor], steps: Iterable[Step]) -> "Schedule":
        s = cls(outputs)
        for st in steps:
            s.apply(st)
        return s

    def apply(self, step: Step) -> None:
        """Validate and apply one step; on error nothing changes."""
        if type(step) not in _APPLY:
            raise ScheduleError(str(getattr(step, "stage", "?")), None, f"{step!r} is not a schedule step")
        _APPLY[type(step)](self, step)
        self.steps.append(step)

    @contextmanager
    def transaction(self):
        """Apply several steps as one: if any fails, the schedule is restored as it was."""
        saved = ({n: _copy_state(st) for n, st in self.stages.items()}, dict(self.tensors), list(self.steps))
        try:
            yield
        except BaseException:
            self.stages, self.tensors, self.steps = saved
            raise

    # ------------------------------------------------------------------ helpers for the steps
    def _stage(self, name: str, *, compute: bool = True) -> StageState:
        st = self.stages.get(name)
        if st is None:
            raise ScheduleError(name, None, f"no such stage; stages are {list(self.stages)}")
        if compute and st.is_placeholder:
            raise ScheduleError(name, None, "a placeholder (input) has no loops to schedule")
        return st

    def _insert_stage(self, before: str, st: StageState, tensor: Tensor) -> None:
        items = list(self.stages.items())
        idx = [k for k, _ in items].index(before)
        items.insert(idx, (st.name, st))
        self.stages = dict(items)
        self.tensors[st.name] = tensor


class StageHandle:
    """The scheduling primitives of one stage (``s[C]``)."""

    def __init__(self, sch: Schedule, name: str):
        self.sch = sch
        self.name = name

    @property
    def state(self) -> StageState:
        return self.sch.stages[self.name]

    @property
    def axis(self) -> tuple[Axis, ...]:
        """The spatial root axes, outermost first."""
        st = self.state
        if st.is_placeholder:
            return ()
        return tuple(st.axis(iv.name) for iv in st.op.axes)

    @property
    def reduce_axis(self) -> tuple[Axis, ...]:
        st = self.state
        if st.is_placeholder:
            return ()
        return tuple(st.axis(iv.name) for iv in st.op.reduce_axes)

    @property
    def leaf_axes(self) -> tuple[Axis, ...]:
        st = self.state
        return tuple(st.axis(n) for n in st.leaves)

    def loop_of(self, axis: Axis | str) -> Axis:
        """The loop that runs ``axis`` now: the axis itself while it is a loop, or the loop it was fused into
        (a ``ScheduleError`` once it was split: its parts are loops of their own)."""
        st = self.state
        name = self._name(axis)
        while name not in st.leaves:
            fused = next((r.fused for r in st.relations if isinstance(r, FuseRel) and name in (r.outer, r.inner)),
                         None)
            if fused is None:
                raise ScheduleError(self.name, name, f"the axis was split, or is no axis of this stage; its loops "
                                                     f"are {st.leaves}")
            name = fused
        return self._ax(name)

    def _name(self, ax: Axis | str) -> str:
        if isinstance(ax, Axis):
            if ax.stage != self.name:
                raise ScheduleError(self.name, ax.name, f"axis belongs to stage '{ax.stage}', not to this stage")
            return ax.name
        return ax

    def _ax(self, name: str) -> Axis:
        """The handle of a loop of this stage (by name)."""
        return self.state.axis(name)

    def split(self, axis: Axis | str, factor: int | None = None, nparts: int | None = None) -> tuple[Axis, Axis]:
        a = self._name(axis)
        self.sch.apply(Split(self.name, a, factor, nparts))
        return self._ax(f"{a}.outer"), self._ax(f"{a}.inner")

    def tile(self, x: Axis | str, y: Axis | str, x_factor: int, y_factor: int) -> tuple[Axis, Axis, Axis, Axis]:
        """Split ``x`` and ``y`` and order the loops ``xo, yo, xi, yi``."""
        with self.sch.transaction():
            xo, xi = self.split(x, x_factor)
            yo, yi = self.split(y, y_factor)
            self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *axes: Axis | str) -> Axis:
        if len(axes) < 2:
            raise ScheduleError(self.name, None, "fuse needs at least two axes")
        names = [self._name(a) for a in axes]
        cur = names[0]
        with self.sch.transaction():
            for nxt in names[1:]:
                self.sch.apply(Fuse(self.name, cur, nxt))
                cur = f"{cur}.{nxt}.fused"
        return self._ax(cur)

    def reorder(self, *axes: Axis | str) -> None:
        self.sch.apply(Reorder(self.name, tuple(self._name(a) for a in axes)))

    def annotate(self, axis: Axis | str, kind: ForKind) -> None:
        """Run the loop ``axis`` as ``kind`` (``vectorize``, ``unroll`` and ``parallel`` are shorthands)."""
        self.sch.apply(Annotate(self.name, self._name(axis), kind))

    def vectorize(self, axis: Axis | str) -> None:
        self.annotate(axis, ForKind.VECTORIZED)

    def bind(self, axis: Axis | str, thread: ForKind | str) -> None:
        """Run the loop ``axis`` on a GPU index: ``"blockIdx.x"`` ... ``"threadIdx.z"``, ``"vthread"`` (or
        the ``ForKind`` members). Its iterations are then spread over the blocks or threads of that index."""
        kind = thread
        if isinstance(thread, str):
            try:
                kind = ForKind(thread)
            except ValueError:
                kind = thread  # rejected with the list of names below
        self.sch.apply(Bind(self.name, self._name(axis), kind))

    def unroll(self, axis: Axis | str) -> None:
        self.annotate(axis, ForKind.UNROLLED)

    def parallel(self, axis: Axis | str) -> None:
        self.annotate(axis, ForKind.PARALLEL)

    def compute_inline(self) -> None:
        self.sch.apply(ComputeInline(self.name))

    def compute_root(self) -> None:
        self.sch.apply(ComputeRoot(self.name))

    def compute_at(self, target: "StageHandle | Tensor | str", axis: Axis | str) -> None:
        """Compute this stage inside loop ``axis`` of ``target``: its only consumer, or a stage that consumer is
        computed inside (then at or outside the loop that holds the consumer), over the region read there."""
        tname = target.name if isinstance(target, (StageHandle, Tensor)) else target
        aname = axis.name if isinstance(axis, Axis) else axis
        self.sch.apply(ComputeAt(self.name, tname, aname))

    def prefetch(self, tensor: Tensor | str, loop: Axis | str, at: Axis | str) -> None:
        """While an iteration of ``loop`` runs, fetch into the cache what the next iteration will read of
        ``tensor`` (read by ``loop``'s stage or a stage computed inside it), its cache lines spread over the
        iterations of the loops inside ``loop`` down to this stage's loop ``at``: a share at the top of each
        iteration of ``at``. ``loop`` is a loop of this stage (``at`` itself or outside it; a name is one) or of a
        stage this one is computed inside, at or inside ``loop``. What the next iteration reads then comes from
        memory while this one computes, instead of all at its start (a convolution's next block of weights, read
        from memory inside a network whose weights no longer fit the cache; issued at the accumulator's reduction
        loop, the lines spread over the whole block's arithmetic). A hint: results do not change. CPU kernels
        only."""
        if not isinstance(loop, Axis):
            loop = self._ax(loop)
        self.sch.apply(Prefetch(self.name, tensor.name if isinstance(tensor, Tensor) else tensor, loop.stage,
                                loop.name, self._name(at)))


def create_schedule(outputs: Tensor | Sequence[Tensor]) -> Schedule:
    """A schedule in which every stage runs its loops in declaration order, untransformed."""
    return Schedule(outputs)


# ---------------------------------------------------------------------------- graph helpers

def _topo(outputs: list[Tensor]) -> list[Tensor]:
    """Tensors reachable from ``outputs``, producers before consumers; names must be unique."""
    order: list[Tensor] = []
    seen: dict[str, Tensor] = {}

    def visit(t: Tensor) -> None:
        if t.name in seen:
            if seen[t.name] is not t:
                raise ExprError(f"two different tensors are named '{t.name}'; give each tensor a unique name")
            return
        seen[t.name] = t
        if isinstance(t.op, ComputeOp):
            for inp in t.op.inputs():
                visit(inp)
        order.append(t)

    for t in outputs:
        visit(t)
    return order


# ---------------------------------------------------------------------------- step application

def _leaf(st: StageState, axis: str, what: str) -> int:
    if axis not in st.extents:
        raise ScheduleError(st.name, axis, f"{what}: the stage has no such axis; its loops are {st.leaves}")
    if axis not in st.leaves:
        raise ScheduleError(st.name, axis, f"{what}: the axis was already split or fused; use its parts "
                                           f"(current loops are {st.leaves})")
    return st.leaves.index(axis)


def _apply_split(s: Schedule, step: Split) -> None:
    st = s._stage(step.stage)
    pos = _leaf(st, step.axis, "split")
    if (step.factor is None) == (step.nparts is None):
        raise ScheduleError(st.name, step.axis, "split needs exactly one of factor= or nparts=")
    n = step.factor if step.factor is not None else step.nparts
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ScheduleError(st.name, step.axis, f"split factor/nparts must be a positive integer, got {n!r}")
    if step.axis in st.annotations:
        raise ScheduleError(st.name, step.axis, "cannot split an annotated axis; annotate the parts instead")
    outer_ext, inner_ext = split_extents(st.extents[step.axis], step.factor, step.nparts)
    outer, inner = f"{step.axis}.outer", f"{step.axis}.inner"
    kind = st.kinds[step.axis]
    st.extents[outer], st.extents[inner] = outer_ext, inner_ext
    st.kinds[outer] = st.kinds[inner] = kind
    st.leaves[pos:pos + 1] = [outer, inner]
    st.relations.append(SplitRel(step.axis, outer, inner, step.factor, step.nparts))


def _apply_fuse(s: Schedule, step: Fuse) -> None:
    st = s._stage(step.stage)
    po = _leaf(st, step.outer, "fuse")
    pi = _leaf(st, step.inner, "fuse")
    if pi != po + 1:
        raise ScheduleError(st.name, step.inner, f"fuse needs adjacent loops, outer first; '{step.inner}' does "
                                                 f"not directly follow '{step.outer}' in {st.leaves}")
    if st.kinds[step.outer] != st.kinds[step.inner]:
        raise ScheduleError(st.name, step.inner, "cannot fuse a spatial axis with a reduction axis")
    for a in (step.outer, step.inner):
        if a in st.annotations:
            raise ScheduleError(st.name, a, "cannot fuse an annotated axis; annotate the fused axis instead")
    fused = f"{step.outer}.{step.inner}.fused"
    st.extents[fused] = st.extents[step.outer] * st.extents[step.inner]
    st.kinds[fused] = st.kinds[step.outer]
    st.leaves[po:pi + 1] = [fused]
    st.relations.append(FuseRel(step.outer, step.inner, fused))


def _apply_reorder(s: Schedule, step: Reorder) -> None:
    st = s._stage(step.stage)
    if len(set(step.axes)) != len(step.axes):
        dup = next(a for a in step.axes if step.axes.count(a) > 1)
        raise ScheduleError(st.name, dup, "reorder lists this axis more than once")
    pos = sorted(_leaf(st, a, "reorder") for a in step.axes)
    for p, a in zip(pos, step.axes):
        st.leaves[p] = a


def _apply_annotate(s: Schedule, step: Annotate) -> None:
    st = s._stage(step.stage)
    if not isinstance(step.kind, ForKind):
        raise ScheduleError(st.name, step.axis, f"a loop kind must be a ForKind such as ForKind.UNROLLED, "
                                                f"got {step.kind!r}")
    if step.kind.is_gpu:
        raise ScheduleError(st.name, step.axis, f"'{step.kind.value}' is a GPU binding: use bind(axis, "
                                                f"'{step.kind.value}'), not annotate")
    _leaf(st, step.axis, _VERB[step.kind])
    if st.kinds[step.axis] is AxisKind.REDUCE and step.kind in (ForKind.VECTORIZED, ForKind.PARALLEL):
        raise ScheduleError(st.name, step.axis, f"cannot {_VERB[step.kind]} a reduction axis: its iterations "
                                                "accumulate into the same element")
    prev = st.annotations.get(step.axis)
    if prev is not None and prev is not step.kind:
        raise ScheduleError(st.name, step.axis, f"axis is already {_describe(prev)}; one annotation per axis")
    if step.kind is ForKind.PARALLEL:
        others = [a for a, v in st.annotations.items() if v is ForKind.PARALLEL and a != step.axis]
        if others:
            raise ScheduleError(st.name, step.axis, f"axis '{others[0]}' is already parallel; fuse the axes and "
                                                    "parallelize the fused axis instead")
    st.annotations[step.axis] = step.kind


def _apply_bind(s: Schedule, step: Bind) -> None:
    st = s._stage(step.stage)
    if not isinstance(step.thread, ForKind) or not step.thread.is_gpu:
        names = ", ".join(k.value for k in ForKind if k.is_gpu)
        raise ScheduleError(st.name, step.axis, f"bind needs a GPU index ({names}), got {step.thread!r}")
    _leaf(st, step.axis, "bind")
    kind = step.thread
    if st.kinds[step.axis] is AxisKind.REDUCE:
        raise ScheduleError(st.name, step.axis, f"cannot bind a reduction axis to {kind.value}: its iterations "
                                                "accumulate into the same element (split it and bind a spatial "
                                                "axis instead)")
    prev = st.annotations.get(step.axis)
    if prev is not None:
        raise ScheduleError(st.name, step.axis, f"axis is already {_describe(prev)}; one annotation or binding "
                                                "per axis")
    if kind is not ForKind.VTHREAD:
        other = next((a for a, k in st.annotations.items() if k is kind), None)
        if other is not None:
            raise ScheduleError(st.name, step.axis, f"axis '{other}' of this stage is already bound to "
                                                    f"{kind.value}; fuse the two axes and bind the fused one")
        dim = "xyz".index(kind.value[-1])
        limit = (_MAX_BLOCK_DIMS if kind.is_thread else _MAX_GRID_DIMS)[dim]
        if st.extents[step.axis] > limit:
            raise ScheduleError(st.name, step.axis, f"extent {st.extents[step.axis]} is more than the "
                                                    f"{limit} {kind.value} a GPU launch allows; split the "
                                                    "axis and bind a part of it")
    st.annotations[step.axis] = kind


#: per-dimension limits of every CUDA GPU (the whole block: at most 1024 threads, checked by lowering)
_MAX_BLOCK_DIMS = (1024, 1024, 64)
_MAX_GRID_DIMS = (2**31 - 1, 65535, 65535)

def _describe(kind: ForKind) -> str:
    return f"bound to {kind.value}" if kind.is_gpu else f"marked {_VERB[kind]}"


#: how errors name each loop kind (the verb of the primitive that sets it)
_VERB = {ForKind.SERIAL: "serial", ForKind.UNROLLED: "unroll", ForKind.VECTORIZED: "vectorize",
         ForKind.PARALLEL: "parallel"}


def _check_not_output(st: StageState, what: str) -> None:
    if st.is_output:
        raise ScheduleError(st.name, None, f"{what}: an output stage must be computed at the root")


def _check_not_scan(st: StageState, what: str) -> None:
    if isinstance(st.op, ComputeOp) and st.op.scan_axis is not None:
        raise ScheduleError(st.name, None, f"{what}: a scan reads its own earlier elements, so it is computed whole, "
                                           "at the root")


def _apply_inline(s: Schedule, step: ComputeInline) -> None:
    st = s._stage(step.stage)
    _check_not_output(st, "compute_inline")
    _check_not_scan(st, "compute_inline")
    if st.op.reduce_axes:
        raise ScheduleError(st.name, None, "compute_inline: a reduction cannot be inlined; use compute_at")
    st.attach = INLINE


def _apply_root(s: Schedule, step: ComputeRoot) -> None:
    s._stage(step.stage).attach = ROOT


def _apply_compute_at(s: Schedule, step: ComputeAt) -> None:
    st = s._stage(step.stage)
    _check_not_output(st, "compute_at")
    _check_not_scan(st, "compute_at")
    if step.target not in s.stages:
        raise ScheduleError(st.name, None, f"compute_at: no stage named '{step.target}'")
    tgt = s.stages[step.target]
    readers = [c for c, cs in s.stages.items() if cs.attach != INLINE and st.name in _effective_reads(s, c)]
    outside = [c for c in readers if c != step.target and step.target not in _attach_chain(s, [c])]
    if step.target == st.name or not readers or outside:
        raise ScheduleError(st.name, None, f"compute_at: stage '{step.target}' does not read '{st.name}'"
                            + (f" nor computes its reader(s) {outside} inside it" if outside and readers else "")
                            + "; a stage can only be computed inside a loop of the stage that consumes it, or of a "
                            "stage its consumers are computed inside (compute them there first)")
    if step.axis not in tgt.leaves:
        raise ScheduleError(step.target, step.axis, f"compute_at: '{step.axis}' is not a current loop of "
                                                    f"'{step.target}' (its loops are {tgt.leaves})")
    st.attach = AttachAt(step.target, step.axis)


def _attach_chain(s: Schedule, names: Sequence[str]) -> list[str]:
    """The stages that the one stage of ``names`` is computed inside, innermost first (none when ``names`` is not
    one stage, or that stage is computed at the root)."""
    chain: list[str] = []
    cur = s.stages[names[0]] if len(names) == 1 else None
    while cur is not None and isinstance(cur.attach, AttachAt) and cur.attach.target not in chain:
        chain.append(cur.attach.target)
        cur = s.stages[cur.attach.target]
    return chain


def _effective_reads(s: Schedule, name: str) -> set[str]:
    """Stages read by ``name``, looking through stages that are inlined into it."""
    out: set[str] = set()
    todo = list(tensor_reads(s.stages[name].op))
    while todo:
        n = todo.pop()
        if n in out:
            continue
        out.add(n)
        if s.stages[n].attach == INLINE:
            todo.extend(tensor_reads(s.stages[n].op))
    return out


def _fresh_axes(op: ComputeOp) -> tuple[tuple[IterVar, ...], dict]:
    axes = tuple(IterVar(Var(iv.name), iv.extent, iv.kind) for iv in op.axes)
    return axes, {old.var: new.var for old, new in zip(op.axes, axes)}


#: storage scopes a cache stage may have
_CACHE_SCOPES = {"local": Scope.LOCAL, "shared": Scope.SHARED}


def _cache_scope(stage: str, scope: str, what: str) -> Scope:
    if scope not in _CACHE_SCOPES:
        raise ScheduleError(stage, None, f"{what}: unknown scope {scope!r}; use 'local' (registers or stack) or "
                                         "'shared' (GPU shared memory)")
    return _CACHE_SCOPES[scope]


def _apply_cache_write(s: Schedule, step: CacheWrite) -> None:
    st = s._stage(step.stage)
    scope = _cache_scope(st.name, step.scope, "cache_write")
    _check_not_scan(st, "cache_write")
    name = f"{st.name}.{step.scope}"
    if name in s.stages:
        raise ScheduleError(st.name, None, f"cache_write: stage '{name}' already exists")
    if st.relations or st.annotations or st.leaves != [iv.name for iv in st.op.axes + st.op.reduce_axes]:
        raise ScheduleError(st.name, None, "cache_write must come before split/fuse/reorder/annotate of the stage")
    op = st.op
    cache_op = ComputeOp(name, op.axes, op.body)
    cache_t = Tensor(st.shape, st.dtype, cache_op)
    axes, _ = _fresh_axes(op)
    new_op = ComputeOp(st.name, axes, cache_t[tuple(a.var for a in axes)])
    cst = StageState(name, cache_op, st.shape, st.dtype, False, scope=scope)
    cst.reset_axes()
    s._insert_stage(st.name, cst, cache_t)
    st.op = new_op
    st.reset_axes()


def _apply_cache_read(s: Schedule, step: CacheRead) -> None:
    src = s._stage(step.stage, compute=False)
    scope = _cache_scope(src.name, step.scope, "cache_read")
    name = f"{src.name}.{step.scope}"
    if name in s.stages:
        raise ScheduleError(src.name, None, f"cache_read: stage '{name}' already exists")
    if not step.readers:
        raise ScheduleError(src.name, None, "cache_read needs at least one reader stage")
    for r in step.readers:
        if r not in s.stages or src.name not in tensor_reads(s.stages[r].op):
            raise ScheduleError(src.name, None, f"cache_read: '{r}' does not read '{src.name}'")
    src_t = s.tensors[src.name]
    axes = tuple(IterVar(Var(f"ax{d}"), e) for d, e in enumerate(src.shape))
    cache_t = Tensor(src.shape, src.dtype, ComputeOp(name, axes, src_t[tuple(a.var for a in axes)]))
    cst = StageState(name, cache_t.op, src.shape, src.dtype, False, scope=scope)
    cst.reset_axes()
    first = min(step.readers, key=list(s.stages).index)
    s._insert_stage(first, cst, cache_t)

    def redirect(n):
        if isinstance(n, TensorRead) and n.tensor.name == src.name:
            return TensorRead(cache_t, n.indices)
        return n

    for r in step.readers:
        rst = s.stages[r]
        rst.op = dataclasses.replace(rst.op, body=transform(rst.op.body, redirect))


def _apply_prefetch(s: Schedule, step: Prefetch) -> None:
    st = s._stage(step.stage)
    if step.tensor not in s.stages:
        raise ScheduleError(st.name, None, f"prefetch: no tensor named '{step.tensor}'; tensors are {list(s.stages)}")
    at = _leaf(st, step.at, "prefetch")
    outer = _leaf(s._stage(step.owner), step.loop, "prefetch")
    if step.owner == st.name and at < outer:
        raise ScheduleError(st.name, step.at, f"prefetch: '{step.at}' is outside loop '{step.loop}'; the lines "
                                              f"are issued at '{step.loop}' or a loop inside it (loops: {st.leaves})")
    if step.owner != st.name and step.owner not in _attach_chain(s, [st.name]):
        raise ScheduleError(st.name, step.at, f"prefetch: loop '{step.loop}' belongs to '{step.owner}', which this "
                                              "stage is not computed inside; compute_at it there first")
    if any(p.tensor == step.tensor for p in st.prefetches):
        raise ScheduleError(st.name, step.loop, f"prefetch: '{step.tensor}' is already prefetched by this stage")
    st.prefetches.append(step)


_APPLY = {
    Split: _apply_split, Fuse: _apply_fuse, Reorder: _apply_reorder, Annotate: _apply_annotate, Bind: _apply_bind,
    ComputeInline: _apply_inline, ComputeRoot: _apply_root, ComputeAt: _apply_compute_at,
    CacheWrite: _apply_cache_write, CacheRead: _apply_cache_read, Prefetch: _apply_prefetch,
}

__all__ = ["Axis", "Schedule", "StageHandle", "create_schedule"]

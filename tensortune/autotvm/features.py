"""Features of a config, computed from its lowered loop program (before unrolling), for cost models.

Three kinds, concatenated into one fixed-length vector per task:

* **loop context**: for each of the first ``MAX_LOOPS`` loops (pre-order): log extent, nest level,
  log product of the extents above and below, an annotation one-hot (serial, unrolled,
  vectorized, parallel, and two slots for GPU block/thread bindings), log counts of float adds,
  multiplies and other ops executed by its body (a GPU kernel's loops bound to blockIdx.* or
  threadIdx.* set the two GPU slots), and for each of ``MAX_BUFFERS`` buffers
  (by role: the kernel's arguments in order, its workspaces, then its local buffers in program
  order, so that a slot means the same buffer in every config even where padding or epilogues
  rename stages) accessed below it: the stride of the loop variable, the log touch count
  (distinct elements the loop's subtree touches) and the log reuse (accesses / touches);
* **relation** (structure-invariant, used for transfer across workloads): for each buffer, the
  reuse ratio interpolated at fixed log touch-count points along its loop nest, innermost out;
* **knobs**: the config's knob choices, normalised to [0, 1].

All counts are ``log2(1 + x)``. Features depend only on the config, so they are cached by index.
``FEATURE_VERSION`` names the layout and meaning of these vectors: a model saved with another version
(the cost model shipped with the package) is not used.
"""
from __future__ import annotations

import math
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

import numpy as np

from ..arith import Analyzer
from ..ir.nodes import Allocate, For, ForKind, IfThenElse, Load, Prefetch, PrimFunc, Seq, Stmt, Store
from ..ir.visitor import Visitor
from ..lower.loop_nest import build_loop_nest
from ..te.expr import Binary, BinOp, Call, Expr, Var, walk
from .task import Task
from .workers import spawn_pool

#: Bump on any change to what a feature slot holds or how it is computed (models saved with another
#: version, such as the shipped pretrained ones, are then refused and must be retrained).
FEATURE_VERSION = 1
MAX_LOOPS = 20
MAX_BUFFERS = 6
CURVE_POINTS = 16  # touch counts 2^0 .. 2^30 in steps of 2 (log2 scale)
_ANNOTATIONS = (ForKind.SERIAL, ForKind.UNROLLED, ForKind.VECTORIZED, ForKind.PARALLEL)
_N_ANN = len(_ANNOTATIONS) + 2  # + GPU block and thread bindings
PER_BUFFER = 3
PER_LOOP = 4 + _N_ANN + 3 + MAX_BUFFERS * PER_BUFFER
RELATION_LENGTH = MAX_BUFFERS * CURVE_POINTS  # the relation part: the same width for every task


def _annotation_slot(kind: ForKind) -> int:
    """The one-hot position of a loop kind: CPU kinds, then any blockIdx, then any threadIdx (a virtual thread
    is an unrolled loop)."""
    if kind in _ANNOTATIONS:
        return _ANNOTATIONS.index(kind)
    if kind.is_block:
        return len(_ANNOTATIONS)
    if kind.is_thread:
        return len(_ANNOTATIONS) + 1
    return _ANNOTATIONS.index(ForKind.UNROLLED)


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, x))


@dataclass
class _Access:
    buffer: str
    index: Expr
    is_store: bool
    used: frozenset = frozenset()  # the loop variables the index depends on


def _ops(e: Expr) -> tuple[int, int, int]:
    """(float adds/subs, float muls, other ops) in an expression."""
    add = mul = other = 0
    for n in walk(e):
        if isinstance(n, Binary) and n.dtype.is_float:
            if n.op in (BinOp.ADD, BinOp.SUB):
                add += 1
            elif n.op is BinOp.MUL:
                mul += 1
            else:
                other += 1
        elif isinstance(n, Call):
            other += 1
    return add, mul, other


class _Loop:
    __slots__ = ("var", "extent", "kind", "level", "above", "below", "ops", "accesses")

    def __init__(self, var: Var, extent: int, kind: ForKind, level: int, above: int):
        self.var, self.extent, self.kind, self.level, self.above = var, extent, kind, level, above
        self.below = 1
        self.ops = [0.0, 0.0, 0.0]
        self.accesses: list[tuple[_Access, dict]] = []  # access and the extents of loops between


def _collect(func: PrimFunc, analyzer: Analyzer) -> list[_Loop]:
    """Loops in pre-order with the accesses and op counts of their bodies."""
    collector = _Collector(analyzer)
    collector.visit(func.body)
    return collector.loops


class _Collector(Visitor):
    """Each statement method returns the largest trip-count product below the statement."""

    def __init__(self, analyzer: Analyzer):
        self.ana = analyzer
        self.loops: list[_Loop] = []
        self.stack: list[_Loop] = []

    def visit_Seq(self, s: Seq) -> int:
        return max((self.visit(x) for x in s.stmts), default=1)

    def visit_Allocate(self, s: Allocate) -> int:
        return self.visit(s.body)

    def visit_IfThenElse(self, s: IfThenElse) -> int:
        a = self.visit(s.then)
        return max(a, self.visit(s.otherwise)) if s.otherwise is not None else a

    def visit_For(self, s: For) -> int:
        if isinstance(s.body, Prefetch):  # a prefetch's lines: no loop of the computation (the slots stay put)
            return 1
        stack = self.stack
        above = (stack[-1].above * stack[-1].extent) if stack else 1
        lp = _Loop(s.var, s.extent, s.kind, len(stack), above)
        self.loops.append(lp)
        stack.append(lp)
        lp.below = self.visit(s.body)
        stack.pop()
        return lp.below * s.extent

    def visit_Store(self, s: Store) -> int:
        accesses = [_Access(s.buffer.name, s.index, True, self.index_vars(s.index))]
        accesses += [_Access(n.buffer.name, n.index, False, self.index_vars(n.index))
                     for n in walk(s.value) if isinstance(n, Load)]
        a, m, o = _ops(s.value)
        trips = 1
        stack = self.stack
        for pos in range(len(stack) - 1, -1, -1):  # innermost first: ops executed by each loop's body
            lp = stack[pos]
            lp.ops[0] += a * trips
            lp.ops[1] += m * trips
            lp.ops[2] += o * trips
            for acc in accesses:
                lp.accesses.append((acc, {x.var: x.extent for x in stack[pos:]}))
            trips *= lp.extent
        return 1

    def visit_Prefetch(self, s: Prefetch) -> int:  # a hint: no operation, no access of the loop context
        return 1

    def visit_Stmt(self, s: Stmt) -> int:  # pragma: no cover - a node kind features do not know
        raise AssertionError(f"features have no rule for statement {type(s).__name__}")

    def index_vars(self, index: Expr) -> frozenset:
        """The loop variables an index depends on (directly, or inside a non-linear term)."""
        terms, _ = self.ana.linear(index)
        out = {a for a, c in terms.items() if c != 0 and isinstance(a, Var)}
        for a in terms:
            if not isinstance(a, Var):
                out.update(n for n in walk(a) if isinstance(n, Var))
        return frozenset(out)


def _buffer_slots(func: PrimFunc) -> list[str]:
    """Buffer names by role: arguments in order, workspaces, then local buffers in program order."""
    names = [b.name for b in func.args + func.workspaces]
    names += [n.buffer.name for n in walk(func.body) if isinstance(n, Allocate) and n.buffer.name not in names]
    return list(dict.fromkeys(names))


def _touch(used: frozenset, extents: dict) -> tuple[int, int]:
    """(distinct elements touched, accesses) by an index using the vars ``used`` over loops with ``extents``."""
    touched = math.prod(ext for v, ext in extents.items() if v in used)
    return touched, math.prod(extents.values())


class FeatureExtractor:
    """Fixed-length features of a task's configs, cached by config index.

    ``n_jobs`` > 1 extracts large requests (at least ``PARALLEL_MIN`` new configs, as simulated annealing
    makes) in that many worker processes. The tuner calls it between measured batches, when the cores
    are otherwise idle. Results are the same as serial. The workers are started on first use and
    stopped by ``close()`` (the extractor is also a context manager); a ``pool`` passed in is borrowed
    and left running.
    """

    def __init__(self, task: Task, n_jobs: int = 1, max_cache: int = 50_000,
                 pool: ProcessPoolExecutor | None = None):
        if n_jobs < 1 or max_cache < 1:
            raise ValueError(f"n_jobs and max_cache must be >= 1, got {n_jobs} and {max_cache}")
        self.task = task
        self.n_jobs = n_jobs
        self._pool = pool
        self._owns_pool = pool is None
        self.max_cache = max_cache  # ~3 KB per config: the oldest half is dropped beyond this
        self._cache: dict[int, np.ndarray] = {}
        space = task.space
        self.n_knobs = len(space.dims)

    def close(self) -> None:
        """Stop the worker processes this extractor started (a later request starts them again)."""
        if self._pool is not None and self._owns_pool:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> FeatureExtractor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = spawn_pool(self.n_jobs)
            self._owns_pool = True
        return self._pool

    @property
    def length(self) -> int:
        return MAX_LOOPS * PER_LOOP + RELATION_LENGTH + self.n_knobs

    @property
    def relation_slice(self) -> slice:
        """The structure-invariant part (relation curves), used to transfer across workloads."""
        start = MAX_LOOPS * PER_LOOP
        return slice(start, start + RELATION_LENGTH)

    def __call__(self, indices) -> np.ndarray:
        if not len(indices):
            return np.zeros((0, self.length), np.float32)
        if self.n_jobs > 1:
            missing = [i for i in dict.fromkeys(int(i) for i in indices) if i not in self._cache]
            if len(missing) >= PARALLEL_MIN:
                self._extract_parallel(missing)
        return np.stack([self.get(int(i)) for i in indices])

    def get(self, index: int) -> np.ndarray:
        f = self._cache.get(index)
        if f is None:
            f = self._extract(index)
            self._store(index, f)
        return f

    def _store(self, index: int, f: np.ndarray) -> None:
        if len(self._cache) >= self.max_cache:
            for old in list(self._cache)[: len(self._cache) // 2]:
                del self._cache[old]
        self._cache[index] = f

    def _extract_parallel(self, missing: list[int]) -> None:
        chunks = [c for c in np.array_split(np.array(missing), self.n_jobs * 2) if len(c)]
        try:
            pool = self._get_pool()
            futures = [pool.submit(_extract_in_worker, self.task, c.tolist()) for c in chunks]
            for chunk, fut in zip(chunks, futures):
                for i, f in zip(chunk.tolist(), fut.result()):
                    self._store(i, f)
        except Exception as e:  # workers are only a speed-up: extract here from now on
            warnings.warn(f"feature extraction in worker processes failed ({type(e).__name__}: {e}); "
                          "extracting in this process from now on", RuntimeWarning, stacklevel=3)
            self.n_jobs = 1
            if isinstance(e, BrokenProcessPool):
                self.close()

    def _extract(self, index: int) -> np.ndarray:
        out = np.zeros(self.length, np.float32)
        knobs = self._knob_features(index)
        out[self.length - self.n_knobs:] = knobs
        analyzer = Analyzer()  # one per config: its cache lives as long as this extraction
        try:
            sch, op = self.task.instantiate(index)
            func = build_loop_nest(sch, list(op.args), "kernel", analyzer)
        except Exception:  # an invalid config has only its knob features
            return out
        buf_pos = {b: i for i, b in enumerate(_buffer_slots(func)[:MAX_BUFFERS])}
        loops = _collect(func, analyzer)
        for li, lp in enumerate(loops[:MAX_LOOPS]):
            base = li * PER_LOOP
            out[base:base + 4] = (_log(lp.extent), lp.level, _log(lp.above), _log(lp.below))
            out[base + 4 + _annotation_slot(lp.kind)] = 1.0
            out[base + 4 + _N_ANN: base + 7 + _N_ANN] = [_log(x) for x in lp.ops]
            seen: dict[str, tuple[float, float, float]] = {}
            for acc, extents in lp.accesses:
                if acc.buffer not in buf_pos or acc.buffer in seen:
                    continue
                terms, _ = analyzer.linear(acc.index)
                touched, count = _touch(acc.used, extents)
                seen[acc.buffer] = (_log(abs(terms.get(lp.var, 0))), _log(touched), _log(count / touched))
            for name, vals in seen.items():
                p = base + 7 + _N_ANN + buf_pos[name] * PER_BUFFER
                out[p:p + PER_BUFFER] = vals
        out[self.relation_slice] = self._curves(loops, buf_pos)
        return out

    def _curves(self, loops: list[_Loop], buf_pos: dict[str, int]) -> np.ndarray:
        """Reuse against touch count per buffer, sampled at fixed log touch counts."""
        curves = np.zeros((MAX_BUFFERS, CURVE_POINTS), np.float32)
        pts: dict[str, list[tuple[float, float]]] = {b: [] for b in buf_pos}
        for lp in loops:
            done = set()
            for acc, extents in lp.accesses:
                if acc.buffer in buf_pos and acc.buffer not in done:
                    done.add(acc.buffer)
                    touched, count = _touch(acc.used, extents)
                    pts[acc.buffer].append((math.log2(touched), _log(count / touched)))
        grid = np.arange(CURVE_POINTS) * 2.0
        for b, p in pts.items():
            if not p:
                continue
            p.sort()
            xs = np.array([x for x, _ in p])
            ys = np.array([y for _, y in p])
            curves[buf_pos[b]] = np.interp(grid, xs, ys)
        return curves.ravel()

    def _knob_features(self, index: int) -> np.ndarray:
        space = self.task.space
        ch = space.index_to_choices(index)
        return np.array([c / max(1, d - 1) for c, d in zip(ch, space.dims)], np.float32)


# ----------------------------------------------------------------------------- worker processes

PARALLEL_MIN = 16


def _extract_in_worker(task: Task, indices: list[int]) -> list[np.ndarray]:
    fx = FeatureExtractor(task)
    return [fx._extract(i) for i in indices]

"""Hypothesis strategies that draw random *valid* schedules.

* ``matmul_cases()``: ``C[i, j] = sum_k A[i, k] * B[k, j]``, M, N, K in 1..40, float32 or
  float64, optionally with ``cache_write`` of C and ``cache_read`` of A and/or B.
* ``conv_cases()``: a 2-D NCHW convolution that reads an explicit zero-padding stage
  ``data_pad`` (present even for pad 0), stride 1-2, pad 0-2, kernel 1-3.
* ``operator_cases()``: small instances of every operator in ``tensortune.ops`` (bias/ReLU
  epilogues, packed weights and layouts), scheduled by the generic ``random_schedule``.

A drawn case carries the live schedule, its tensors, and ``steps`` (the schedule as frozen
records) so a test can replay them on a fresh declaration. Its ``repr`` prints the shape and the
steps, which is what hypothesis shows for a failing example.

Steps are drawn in an order that keeps every schedule valid by construction:

1. optionally ``cache_write`` of the output (it must precede any other step of the stage);
2. loop transforms of the output stage (splits, reorders, fusions, annotations);
3. the producers, consumers first: each is left at the root, inlined (if it is not a
   reduction) or computed at a random current loop of its only consumer, then given its own
   transforms.

Because a consumer is final before its producers are attached, the rules "no parallel loop
nested in another parallel loop" and "no parallel loop inside a vectorized loop" (both checked
when lowering) are decided exactly: a stage may get a ``parallel`` loop only if the loop it is
computed at is not inside (or equal to) a parallel or vectorized loop of its consumer chain, and
within a stage a parallel loop always stays outside its vectorized loops.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from tensortune import te
from tensortune.schedule import Schedule, Step, create_schedule, step_to_json
from tensortune.ir import ForKind
from tensortune.te import AxisKind, Tensor

#: Unroll only short loops: nested unrolling multiplies the size of the generated C.
MAX_UNROLL_EXTENT = 8
#: Upper bound on loop transforms drawn per stage.
MAX_OPS_PER_STAGE = 5


# --------------------------------------------------------------------------- declarations

def declare_matmul(M: int, N: int, K: int, dtype: str = "float32") -> tuple[Tensor, Tensor, Tensor]:
    """``C = A @ B`` as a single reduction stage (no packing, unlike ``ops.matmul``)."""
    A = te.placeholder((M, K), dtype, "A")
    B = te.placeholder((K, N), dtype, "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    return A, B, C


def declare_conv(N: int, C: int, H: int, W: int, O: int, KH: int, KW: int, stride: int, pad: int,
                 dtype: str = "float32") -> tuple[Tensor, Tensor, Tensor]:
    """NCHW conv2d reading an explicit padding stage ``data_pad`` (kept even when ``pad`` is 0)."""
    data = te.placeholder((N, C, H, W), dtype, "data")
    weight = te.placeholder((O, C, KH, KW), dtype, "weight")
    zero = te.const(0, dtype)
    dp = te.compute(
        (N, C, H + 2 * pad, W + 2 * pad),
        lambda b, c, y, x: te.select(te.logical_and(y >= pad, y < H + pad, x >= pad, x < W + pad),
                                     data[b, c, y - pad, x - pad], zero),
        "data_pad")
    OH = (H + 2 * pad - KH) // stride + 1
    OW = (W + 2 * pad - KW) // stride + 1
    rc, rh, rw = te.reduce_axis(C, "rc"), te.reduce_axis(KH, "rh"), te.reduce_axis(KW, "rw")
    out = te.compute((N, O, OH, OW), lambda n, o, y, x: te.sum(
        dp[n, rc, y * stride + rh, x * stride + rw] * weight[o, rc, rh, rw], axis=[rc, rh, rw]), "conv")
    return data, weight, out


def conv_reference(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """float64 NCHW convolution as an explicit sum over kernel taps (independent of tensortune)."""
    n, _, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, o, oh, ow))
    for r in range(kh):
        for q in range(kw):
            patch = xp[:, :, r:r + stride * (oh - 1) + 1:stride, q:q + stride * (ow - 1) + 1:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, r, q].astype(np.float64))
    return out


# --------------------------------------------------------------------------- cases

class Case:
    """A declared operator with a random valid schedule (a plain class: hypothesis prints its repr)."""

    def __init__(self, kind: str, params: dict, sch: Schedule, args: tuple[Tensor, ...]):
        self.kind = kind  # "matmul" or "conv"
        self.params = params
        self.sch = sch
        self.args = args

    @property
    def steps(self) -> tuple[Step, ...]:
        return tuple(self.sch.steps)

    def declare(self) -> tuple[Tensor, ...]:
        """A fresh declaration of the same operator (new tensor objects, same names)."""
        if self.kind == "matmul":
            return declare_matmul(**self.params)
        return declare_conv(**self.params)

    def inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        dt = self.args[0].dtype
        if not dt.is_float:
            return [rng.integers(-8, 8, t.shape).astype(dt.numpy) for t in self.args[:-1]]
        return [rng.uniform(-1, 1, t.shape).astype(dt.numpy) for t in self.args[:-1]]

    def reference(self, *ins: np.ndarray) -> np.ndarray:
        if self.kind == "matmul":
            a, b = ins
            if not self.args[0].dtype.is_float:
                return a.astype(np.int64) @ b.astype(np.int64)  # small integers: exact
            return a.astype(np.float64) @ b.astype(np.float64)
        p = self.params
        return conv_reference(ins[0], ins[1], p["stride"], p["pad"])

    @property
    def reduction_length(self) -> int:
        p = self.params
        return p["K"] if self.kind == "matmul" else p["C"] * p["KH"] * p["KW"]

    def __repr__(self) -> str:
        steps = "\n".join(f"    {step_to_json(s)}" for s in self.steps)
        return f"Case({self.kind}, {self.params}, steps=[\n{steps}\n])"


@dataclass
class _Ctx:
    """Bookkeeping while drawing: stage -> is it computed inside a parallel or vectorized loop
    (where it may not have a parallel loop of its own)."""

    no_parallel: dict[str, bool] = field(default_factory=dict)


def _positions(s: Schedule, stage: str, ann: ForKind) -> list[int]:
    st_ = s.stages[stage]
    return [i for i, a in enumerate(st_.leaves) if st_.annotations.get(a) is ann]


def _parallel_ok(s: Schedule, stage: str, order: list[str]) -> bool:
    """The rule "no parallel loop inside a vectorized loop" holds for the loop order ``order``."""
    anns = s.stages[stage].annotations
    par = [i for i, a in enumerate(order) if anns.get(a) is ForKind.PARALLEL]
    vec = [i for i, a in enumerate(order) if anns.get(a) is ForKind.VECTORIZED]
    return not (par and vec and min(vec) < par[0])


def _transform_stage(draw, s: Schedule, stage: str, allow_parallel: bool) -> None:
    """Random splits, reorders, fusions and annotations on ``stage``, each valid when applied."""
    h = s[stage]
    for _ in range(draw(st.integers(0, MAX_OPS_PER_STAGE))):
        state = h.state
        leaves = list(state.leaves)
        free = [a for a in leaves if a not in state.annotations]
        fusable = [(a, b) for a, b in zip(leaves, leaves[1:])
                   if a in free and b in free and state.kinds[a] == state.kinds[b]]
        choices = ["reorder"]
        if free:
            choices += ["split", "split", "annotate"]
        if fusable:
            choices.append("fuse")
        op = draw(st.sampled_from(choices))
        if op == "split":
            a = draw(st.sampled_from(free))
            ext = state.extents[a]
            if draw(st.booleans()):
                h.split(a, factor=draw(st.integers(1, ext + 1)))
            else:
                h.split(a, nparts=draw(st.integers(1, ext + 1)))
        elif op == "reorder":
            order = draw(st.permutations(leaves))
            if _parallel_ok(s, stage, order):
                h.reorder(*order)
        elif op == "fuse":
            a, b = draw(st.sampled_from(fusable))
            h.fuse(a, b)
        else:
            spatial = [a for a in free if state.kinds[a] is AxisKind.SPATIAL]
            par = _positions(s, stage, ForKind.PARALLEL)
            vec = _positions(s, stage, ForKind.VECTORIZED)
            pools = {
                ForKind.VECTORIZED: [a for a in spatial if not par or leaves.index(a) > par[0]],
                ForKind.UNROLLED: [a for a in free if state.extents[a] <= MAX_UNROLL_EXTENT],
                ForKind.PARALLEL: [a for a in spatial if allow_parallel and not par and
                                      (not vec or leaves.index(a) < min(vec))],
            }
            kinds = [k for k, pool in pools.items() if pool]
            if not kinds:
                continue
            ann = draw(st.sampled_from(kinds))
            a = draw(st.sampled_from(pools[ann]))
            {ForKind.VECTORIZED: h.vectorize, ForKind.UNROLLED: h.unroll, ForKind.PARALLEL: h.parallel}[ann](a)


def _attach(draw, s: Schedule, ctx: _Ctx, stage: str, consumer: str, can_inline: bool) -> None:
    """Leave ``stage`` at the root, inline it, or compute it at a loop of ``consumer``; then transform it."""
    options = ["root", "compute_root", "compute_at", "compute_at"] + (["inline"] if can_inline else [])
    where = draw(st.sampled_from(options))
    if where == "inline":
        s[stage].compute_inline()
        return
    if where == "compute_at":
        leaves = list(s.stages[consumer].leaves)
        pos = draw(st.integers(0, len(leaves) - 1))
        s[stage].compute_at(s[consumer], leaves[pos])
        around = _positions(s, consumer, ForKind.PARALLEL) + _positions(s, consumer, ForKind.VECTORIZED)
        ctx.no_parallel[stage] = ctx.no_parallel[consumer] or any(p <= pos for p in around)
    else:
        if where == "compute_root":
            s[stage].compute_root()
        ctx.no_parallel[stage] = False
    _transform_stage(draw, s, stage, allow_parallel=not ctx.no_parallel[stage])


@st.composite
def matmul_cases(draw, max_dim: int = 40) -> Case:
    dims = st.integers(1, max_dim)
    dtype = draw(st.sampled_from(["float32"] * 4 + ["float64", "int32"]))
    params = dict(M=draw(dims), N=draw(dims), K=draw(dims), dtype=dtype)
    A, B, C = declare_matmul(**params)
    s = create_schedule(C)
    ctx = _Ctx({"C": False})
    reader = "C"
    if draw(st.booleans()):
        reader = s.cache_write(C, "local").name
    read_caches = [s.cache_read(t, "local", [reader]).name for t in (A, B) if draw(st.booleans())]
    _transform_stage(draw, s, "C", allow_parallel=True)
    if reader != "C":
        _attach(draw, s, ctx, reader, "C", can_inline=False)
    for name in read_caches:
        _attach(draw, s, ctx, name, reader, can_inline=True)
    return Case("matmul", params, s, (A, B, C))


@st.composite
def conv_shapes(draw) -> dict:
    k = draw(st.integers(1, 3))
    kw = draw(st.sampled_from([k, draw(st.integers(1, 3))]))
    pad = draw(st.integers(0, 2))
    stride = draw(st.integers(1, 2))
    h = draw(st.integers(max(1, k - 2 * pad), 9))
    w = draw(st.integers(max(1, kw - 2 * pad), 9))
    return dict(N=draw(st.integers(1, 2)), C=draw(st.integers(1, 4)), H=h, W=w, O=draw(st.integers(1, 4)),
                KH=k, KW=kw, stride=stride, pad=pad)


@st.composite
def conv_cases(draw) -> Case:
    params = draw(conv_shapes())
    data, weight, out = declare_conv(**params)
    s = create_schedule(out)
    ctx = _Ctx({"conv": False})
    cached = draw(st.booleans())
    consumer = "conv"
    if cached:
        consumer = s.cache_write(out, "local").name
    _transform_stage(draw, s, "conv", allow_parallel=True)
    if cached:
        _attach(draw, s, ctx, consumer, "conv", can_inline=False)
    _attach(draw, s, ctx, "data_pad", consumer, can_inline=True)
    return Case("conv", params, s, (data, weight, out))


# --------------------------------------------------------------------------- any operator

def _effective_consumers(s: Schedule, name: str) -> list[str]:
    """Stages that read ``name`` after inlining (an inlined reader passes its reads to its own readers)."""
    out: list[str] = []
    todo = [c for c in s.consumers(name)]
    while todo:
        c = todo.pop()
        if s.stages[c].attach == "inline":
            todo.extend(s.consumers(c))
        elif c not in out:
            out.append(c)
    return out


def random_schedule(draw, out: Tensor) -> Schedule:
    """A random valid schedule of any operator graph, drawn consumers first (see the module docstring)."""
    s = create_schedule(out)
    ctx = _Ctx({out.name: False})
    if s.stages[out.name].op.reduce_axes and draw(st.booleans()):
        s.cache_write(out, "local")
    _transform_stage(draw, s, out.name, allow_parallel=True)
    for name in reversed(list(s.stages)):
        stage = s.stages[name]
        if stage.is_placeholder or name == out.name:
            continue
        consumers = _effective_consumers(s, name)
        can_inline = not stage.op.reduce_axes
        if len(consumers) == 1:
            _attach(draw, s, ctx, name, consumers[0], can_inline)
        elif can_inline and draw(st.booleans()):
            s[name].compute_inline()
        else:
            ctx.no_parallel[name] = False
            _transform_stage(draw, s, name, allow_parallel=True)
    return s


class OpCase:
    """A library operator (``tensortune.ops``) with a random valid schedule."""

    def __init__(self, label: str, op, sch: Schedule, reduction_length: int):
        self.label = label
        self.op = op
        self.sch = sch
        self.reduction_length = reduction_length

    def __repr__(self) -> str:
        steps = "\n".join(f"    {step_to_json(s)}" for s in self.sch.steps)
        return f"OpCase({self.label}, steps=[\n{steps}\n])"


@st.composite
def operator_cases(draw) -> OpCase:
    """Small instances of every operator in ``tensortune.ops``, including fused epilogues and packed layouts."""
    from tensortune import ops

    kind = draw(st.sampled_from(["matmul", "dense", "conv2d", "depthwise", "conv2d_nchwc", "spatial_pack",
                                 "depthwise_nchwc", "nchwc_packed"]))
    small = st.integers(1, 12)
    bias, relu = draw(st.booleans()), draw(st.booleans())
    if kind in ("matmul", "dense"):
        M, N, K = draw(small), draw(small), draw(small)
        if kind == "matmul":
            tb = draw(st.booleans())
            op = ops.matmul(M, N, K, bias=bias, relu=relu, transpose_b=tb)
            label = f"ops.matmul({M}, {N}, {K}, bias={bias}, relu={relu}, transpose_b={tb})"
        else:
            op = ops.dense(M, K, N, bias=bias, relu=relu)
            label = f"ops.dense({M}, {K}, {N}, bias={bias}, relu={relu})"
        return OpCase(label, op, random_schedule(draw, op.output), K)
    k = draw(st.integers(1, 3))
    pad, stride = draw(st.integers(0, 2)), draw(st.integers(1, 2))
    h, w = draw(st.integers(max(1, k - 2 * pad), 8)), draw(st.integers(max(1, k - 2 * pad), 8))
    n = draw(st.integers(1, 2))
    blocks = st.sampled_from([1, 2, 4])
    if kind == "conv2d":
        c, o = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        args = (n, c, h, w, o, k)
        op = ops.conv2d_nchw(*args, stride=stride, pad=pad, bias=bias, relu=relu)
        label = f"ops.conv2d_nchw{args}, stride={stride}, pad={pad}, bias={bias}, relu={relu})"
        red = c * k * k
    elif kind == "depthwise":
        c = draw(st.integers(1, 4))
        args = (n, c, h, w, k)
        op = ops.depthwise_conv2d_nchw(*args, stride=stride, pad=pad, bias=bias, relu=relu)
        label = f"ops.depthwise_conv2d_nchw{args}, stride={stride}, pad={pad}, bias={bias}, relu={relu})"
        red = k * k
    elif kind in ("conv2d_nchwc", "nchwc_packed"):  # NCHW in/out, or NCHW[x]c in/out
        make = ops.conv2d_nchwc if kind == "conv2d_nchwc" else ops.conv2d_nchwc_packed
        icb, ocb = draw(blocks), draw(blocks)
        c, o = icb * draw(st.integers(1, 2)), ocb * draw(st.integers(1, 2))
        args = (n, c, h, w, o, k)
        op = make(*args, stride=stride, pad=pad, icb=icb, ocb=ocb)
        label = f"ops.{make.__name__}{args}, stride={stride}, pad={pad}, icb={icb}, ocb={ocb})"
        red = c * k * k
    elif kind == "spatial_pack":
        ocb = draw(blocks)
        c, o = draw(st.integers(1, 3)), ocb * draw(st.integers(1, 2))
        args = (n, c, h, w, o, k)
        op = ops.conv2d_spatial_pack(*args, stride=stride, pad=pad, ocb=ocb)
        label = f"ops.conv2d_spatial_pack{args}, stride={stride}, pad={pad}, ocb={ocb})"
        red = c * k * k
    else:
        cb = draw(blocks)
        c = cb * draw(st.integers(1, 2))
        args = (n, c, h, w, k)
        op = ops.depthwise_conv2d_nchwc(*args, stride=stride, pad=pad, cb=cb)
        label = f"ops.depthwise_conv2d_nchwc{args}, stride={stride}, pad={pad}, cb={cb})"
        red = k * k
    return OpCase(label, op, random_schedule(draw, op.output), red)

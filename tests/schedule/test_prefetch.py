"""Prefetch (``StageHandle.prefetch``): while an iteration of a loop runs, the cache lines the next iteration reads
of a tensor are fetched, in shares at the iterations of an inner loop; results do not change.

The lowered IR is run in Python (``ir_eval.run_indices``) to compare, iteration by iteration of the loop, the lines
fetched with the lines the next iteration loads; the kernels are built and compared with numpy."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from tensortune import te
from tensortune.autotvm.task import Task
from tensortune.autotvm.templates.conv2d import conv2d_nchwc_packed_template
from tensortune.benchmarking.compare import build_config
from tensortune.errors import ScheduleError
from tensortune.ir import For, Prefetch
from tensortune.lower import lower
from tensortune.ops.operator import check_output
from tensortune.schedule import Schedule, create_schedule, step_from_json, step_to_json
from tensortune.target import CACHE_LINE, Target
from tensortune.te.expr import walk

from gpu_cases import matmul_decl as matmul
from ir_eval import run_indices

AVX2 = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")


def scheduled_matmul(m: int = 8, n: int = 8, k: int = 8):
    """``A @ B`` declared and given a schedule: (A, B, C, schedule, C's stage)."""
    A, B, C = matmul(m, n, k)
    s = create_schedule(C)
    return A, B, C, s, s[C]


def lines_by_iteration(func, tensor: str, loop: str):
    """Per iteration of the loop named ``loop``: the cache lines of ``tensor`` loaded and prefetched, and every
    prefetched element index. A loop of one iteration is gone from the IR: everything is iteration 0."""
    per_line = CACHE_LINE // 4
    var = next((n.var for n in walk(func.body) if isinstance(n, For) and n.var.name == loop), None)
    loads: dict[int, set[int]] = {}
    fetched: dict[int, set[int]] = {}
    indices: list[int] = []

    def on(kind, buf, index, env):
        if buf != tensor or kind == "store":
            return
        it = env.get(var, 0) if var is not None else 0
        (loads if kind == "load" else fetched).setdefault(it, set()).add(index // per_line)
        if kind == "prefetch":
            indices.append(index)

    run_indices(func.body, on)
    extent = next((n.extent for n in walk(func.body) if isinstance(n, For) and n.var is var), 1)
    return loads, fetched, indices, extent


def assert_next_iteration_fetched(func, tensor: str, loop: str, size: int) -> None:
    """Each iteration fetches every line the next one loads (the last: the first's), nothing outside the span of
    those lines, and only elements of the tensor."""
    loads, fetched, indices, extent = lines_by_iteration(func, tensor, loop)
    assert indices and all(0 <= i < size for i in indices), (min(indices, default=None), size)
    for it in range(extent):
        nxt = loads.get((it + 1) % extent, set())
        got = fetched.get(it, set())
        assert nxt <= got, f"iteration {it} misses lines {sorted(nxt - got)[:8]} of the next"
        assert got <= set(range(min(nxt), max(nxt) + 1)), f"iteration {it} fetches lines the next does not read"


@st.composite
def matmul_prefetches(draw):
    m, n, k = draw(st.integers(1, 20)), draw(st.integers(1, 40)), draw(st.integers(1, 20))
    return (m, n, k, draw(st.integers(1, m)), draw(st.integers(1, n)), draw(st.sampled_from(["B", "A"])),
            draw(st.booleans()), draw(st.integers(0, 4)), draw(st.booleans()))


@pytest.mark.slow
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(matmul_prefetches())
def test_prefetch_fetches_what_the_next_iteration_reads_and_changes_no_result(case):
    """Random matrix products, tilings (dividing or not) and places: the lines of B a column block reads (rows of
    a panel, one chunk per row) or of A a row block reads (one contiguous chunk), fetched at any loop inside the
    block's loop, or at the reduction loop of an accumulator computed inside it; the kernel still equals numpy."""
    m, n, k, fi, fj, tensor, cached, at_choice, vectorize = case
    A, B, C = matmul(m, n, k)
    s = create_schedule(C)
    c = s[C]
    if cached:  # the accumulator in a local buffer, computed inside the row tile, issuing the prefetches
        CL = s.cache_write(C, "local")
    i, j = c.axis
    jo, ji = c.split(j, fj)
    io, ii = c.split(i, fi)
    if cached:
        c.reorder(jo, io, ii, ji)
        acc = s[CL]
        acc.compute_at(c, io)
        ai, aj = acc.axis
        acc.reorder(acc.reduce_axis[0], ai, aj)
        if vectorize:
            acc.vectorize(aj)
        loop = jo if tensor == "B" else io
        acc.prefetch(tensor, loop, acc.reduce_axis[0])
    else:
        (kk,) = c.reduce_axis
        c.reorder(jo, io, ii, kk, ji)
        if vectorize:
            c.vectorize(ji)
        loop = jo if tensor == "B" else io
        inner = [jo, io, ii, kk] + ([] if vectorize else [ji])
        candidates = inner[inner.index(loop):]
        c.prefetch(tensor, loop, candidates[at_choice % len(candidates)])
    func = lower(s, [A, B, C])
    assert any(isinstance(x, Prefetch) for x in walk(func.body))
    assert_next_iteration_fetched(func, tensor, loop.name, (k * n) if tensor == "B" else (m * k))

    mod = tt.build(s, [A, B, C], "c")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")
    out = np.zeros((m, n), "float32")
    mod(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    assert "__builtin_prefetch" in mod.source


def _conv_task(C: int = 32, O: int = 64, H: int = 7):
    return Task(conv2d_nchwc_packed_template, (1, C, H, H, O, 1, 1, 0), AVX2)


def _configs(task, want: dict, limit: int = 4) -> list[int]:
    """Indices of the first ``limit`` configs, in a seeded random order, whose knobs include ``want``."""
    out = []
    for index in np.random.default_rng(0).permutation(len(task.space)):
        if all(task.config(int(index)).to_json()[k] == v for k, v in want.items()):
            out.append(int(index))
            if len(out) == limit:
                break
    return out


@pytest.mark.slow
@pytest.mark.parametrize("order", [[0, 1, 2], [1, 0, 2]])
def test_convolution_prefetches_the_next_weight_block_only_when_its_loop_is_outermost(order):
    """The 1x1 convolution's next block of output channels' weights is fetched at its input-channel loop when the
    block loop is the outermost (its lines cover the next block's, the kernel equals numpy); with the rows outside
    the blocks (seven row tiles) the weights are read again for every row and nothing is fetched."""
    task = _conv_task()
    indices = _configs(task, {"reorder_outer": order, "parallel": "fuse1", "tile_oh": [7, 1]}, limit=3)
    assert indices
    for index in indices:
        sch, op = task.instantiate(index)
        func = lower(sch, list(op.args))
        fetches = [x for x in walk(func.body) if isinstance(x, Prefetch)]
        if order[0] != 0:
            assert not fetches
            continue
        assert fetches and {f.buffer.name for f in fetches} == {"weight_packed"}
        loop = next(p.loop for stage in sch.stages.values() for p in stage.prefetches)
        weights = op.inputs[1]
        assert_next_iteration_fetched(func, "weight_packed", loop, int(np.prod(weights.shape)))
        module, _, inputs, expected = build_config(task, index)
        out = op.empty_output()
        module(*inputs, out)
        assert check_output(out, expected) is None


def test_the_cost_model_features_do_not_see_the_prefetches(monkeypatch):
    """A prefetch is no loop of the computation: a config's features are the same with and without it (the loop
    slots do not shift, so models trained before keep their meaning)."""
    from tensortune.autotvm import features
    from tensortune.autotvm.templates import conv2d

    task = _conv_task()
    (index,) = _configs(task, {"reorder_outer": [0, 1, 2], "parallel": "fuse1", "tile_oh": [7, 1]}, limit=1)
    sch, op = task.instantiate(index)
    assert any(isinstance(x, Prefetch) for x in walk(lower(sch, list(op.args)).body))
    with_prefetch = features.FeatureExtractor(task)([index])
    monkeypatch.setattr(conv2d, "_prefetch_weights", lambda *args: None)
    sch, op = task.instantiate(index)
    assert not any(isinstance(x, Prefetch) for x in walk(lower(sch, list(op.args)).body))
    np.testing.assert_array_equal(with_prefetch, features.FeatureExtractor(task)([index]))


# --- errors -----------------------------------------------------------------------------------------------

def test_prefetch_at_a_loop_outside_its_loop_is_refused():
    A, B, C, s, c = scheduled_matmul(8, 8, 8)
    i, j = c.axis
    with pytest.raises(ScheduleError, match="outside loop"):
        c.prefetch(B, j, i)


def test_prefetch_of_a_loop_of_a_stage_not_around_it_is_refused():
    A, B, C = matmul(8, 8, 8)
    s = create_schedule(C)
    CL = s.cache_write(C, "local")
    i, _ = s[C].axis
    with pytest.raises(ScheduleError, match="compute_at it there first"):
        s[CL].prefetch(B, i, s[CL].reduce_axis[0])


def test_prefetch_names_a_tensor_once_and_an_existing_one():
    A, B, C, s, c = scheduled_matmul(8, 8, 8)
    i, j = c.axis
    with pytest.raises(ScheduleError, match="no tensor named 'D'"):
        c.prefetch("D", i, j)
    c.prefetch(B, i, j)
    with pytest.raises(ScheduleError, match="already prefetched"):
        c.prefetch(B, i, i)


def test_prefetch_of_a_tensor_read_elsewhere_is_refused_when_lowering():
    A = te.placeholder((8, 8), "float32", "A")
    P = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, "P")
    Q = te.compute((8, 8), lambda i, j: P[i, j] + A[i, j], "Q")
    s = create_schedule(Q)
    i, j = s[P].axis
    s[P].prefetch(A, i, j)  # A is read by Q too
    with pytest.raises(ScheduleError, match="read only by 'P'"):
        lower(s, [A, Q])


def test_prefetch_loop_split_afterwards_is_refused_when_lowering():
    A, B, C, s, c = scheduled_matmul(8, 8, 8)
    i, j = c.axis
    c.prefetch(B, i, j)
    c.split(i, 2)
    with pytest.raises(ScheduleError, match="no longer a loop"):
        lower(s, [A, B, C])


def test_prefetch_inside_a_vectorized_loop_is_refused():
    A, B, C, s, c = scheduled_matmul(8, 16, 8)
    i, j = c.axis
    (k,) = c.reduce_axis
    c.reorder(i, k, j)
    c.vectorize(j)
    c.prefetch(B, i, j)
    with pytest.raises(ScheduleError, match="vectorized"):
        lower(s, [A, B, C])


def test_prefetch_in_a_gpu_kernel_is_refused():
    A, B, C, s, c = scheduled_matmul(8, 8, 8)
    i, j = c.axis
    c.bind(i, "blockIdx.x")
    c.bind(j, "threadIdx.x")
    (k,) = c.reduce_axis
    c.prefetch(B, i, k)
    with pytest.raises(ScheduleError, match="CPU kernels"):
        lower(s, [A, B, C])


def test_prefetch_steps_replay_to_the_same_kernel():
    A, B, C, s, c = scheduled_matmul(12, 40, 9)
    i, j = c.axis
    jo, ji = c.split(j, 8)
    (k,) = c.reduce_axis
    c.reorder(jo, i, k, ji)
    c.prefetch(B, jo, i)
    records = json.loads(json.dumps([step_to_json(x) for x in s.steps]))
    again = Schedule.replay(matmul(12, 40, 9)[2], [step_from_json(r) for r in records])
    assert str(lower(again)) == str(lower(s))
    assert "prefetch(B[" in str(lower(s))

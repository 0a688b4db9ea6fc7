"""Random valid schedules of matmul, conv2d and every library operator, built and checked against numpy.

The strategies in ``strategies.py`` draw schedules that are valid by construction, so any
``ScheduleError``, ``LoweringError``, IR verifier failure, compile error or wrong answer here is a
bug. Examples are derandomized (a fixed sequence), so CI is reproducible.

Bugs these tests found, each kept as a regression test at the end of this file (all fixed in
commit cbae3d0):

* BUG 1: a ``parallel`` loop inside a ``vectorize``d loop became ``omp parallel for`` nested in
  ``omp simd``, which gcc rejects. It is now a ``ScheduleError`` at lowering, and the strategies
  keep to that rule.
* BUG 2: a stage computed at an ``unroll``ed loop was declared once per unrolled copy in one C
  scope ("redeclaration of 'C_local'").
* BUG 3: gcc 12.2's loop auto-vectorizer (``-O3``) miscompiled correct generated C (a guarded
  reduction; a zero-padding select on AVX-512; a padded select in a reduction), so kernels
  returned wrong numbers. Kernels are now compiled with ``-fno-tree-loop-vectorize``.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tensortune as tt
from tensortune import ops, te
from tensortune.errors import ScheduleError
from tensortune.runtime import Module
from tensortune.schedule import Schedule, step_from_json, step_to_json

from strategies import (Case, OpCase, conv_cases, conv_reference, declare_conv, declare_matmul, matmul_cases,
                        operator_cases)

SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])


def _tolerance(reduction_length: int) -> dict:
    """float32 sums of ``reduction_length`` products of numbers in [-1, 1], against a float64 reference."""
    return dict(rtol=1e-4, atol=1e-5 * reduction_length + 1e-6)


def _run(module: Module, ins: list[np.ndarray], out_t) -> np.ndarray:
    # An element the kernel never writes shows up: NaN, or for integers a value no result here can take.
    fill = np.nan if out_t.dtype.is_float else -123456789
    out = np.full(out_t.shape, fill, out_t.dtype.numpy)
    module(*ins, out)
    return out


def check_schedule(sch: Schedule, args, ins: list[np.ndarray], ref: np.ndarray, reduction_length: int) -> None:
    """Lower with the verifier on, build, run on ``ins`` and compare with the reference ``ref``
    (float64, or exact int64 for integer kernels)."""
    first = tt.lower(sch, args, verify=True)
    assert str(tt.lower(sch, args)) == str(first)  # lowering does not change the schedule
    m = tt.build(sch, args)
    out_t = args[-1]
    out = _run(m, ins, out_t)
    if out_t.dtype.is_float:
        np.testing.assert_allclose(out, ref, **_tolerance(reduction_length))
    else:
        np.testing.assert_array_equal(out, ref)


def check(case: Case, seed: int = 0) -> None:
    ins = case.inputs(seed)
    check_schedule(case.sch, case.args, ins, case.reference(*ins), case.reduction_length)


@pytest.mark.slow
@settings(max_examples=150, **SETTINGS)
@given(matmul_cases())
def test_random_matmul_schedule_matches_numpy(case: Case) -> None:
    check(case)


@pytest.mark.slow
@settings(max_examples=150, **SETTINGS)
@given(conv_cases())
def test_random_conv2d_schedule_matches_numpy(case: Case) -> None:
    check(case)


@pytest.mark.slow
@settings(max_examples=100, **SETTINGS)
@given(operator_cases())
def test_random_schedule_of_library_operator_matches_its_reference(case: OpCase) -> None:
    """Every operator in ``tensortune.ops`` (fused epilogues, packed layouts), randomly scheduled."""
    op = case.op
    canonical = op.random_inputs(0)
    ref = np.asarray(op.reference(*[a.astype(np.float64) for a in canonical]))
    check_schedule(case.sch, op.args, op.prepare(*canonical), ref, case.reduction_length)


def _ir_text(sch: Schedule, args) -> str:
    return str(tt.lower(sch, args))


@settings(max_examples=100, **SETTINGS)
@given(matmul_cases())
def test_matmul_steps_replay_to_identical_ir(case: Case) -> None:
    fresh = case.declare()
    replayed = Schedule.replay(fresh[-1], case.steps)
    assert replayed.steps == list(case.steps)
    assert _ir_text(replayed, fresh) == _ir_text(case.sch, case.args)


@pytest.mark.slow
@settings(max_examples=100, **SETTINGS)
@given(conv_cases())
def test_conv2d_steps_replay_from_json_to_identical_ir(case: Case) -> None:
    records = json.loads(json.dumps([step_to_json(s) for s in case.steps]))
    steps = [step_from_json(r) for r in records]
    assert steps == list(case.steps)
    fresh = case.declare()
    assert _ir_text(Schedule.replay(fresh[-1], steps), fresh) == _ir_text(case.sch, case.args)


def test_replayed_ir_depends_on_the_declaration() -> None:
    """Guards the replay tests above: the IR text they compare does change with the declaration."""
    A, B, C = declare_matmul(8, 8, 8)
    s = tt.create_schedule(C)
    s[C].split("i", factor=4)
    A2, B2, C2 = declare_matmul(9, 8, 8)
    assert _ir_text(Schedule.replay(C2, s.steps), [A2, B2, C2]) != _ir_text(s, [A, B, C])


# --------------------------------------------------------------------------- regressions

def test_bug1_parallel_inside_vectorized_loop_is_a_schedule_error() -> None:
    A = te.placeholder((8, 8), "float32", "A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, "B")
    s = tt.create_schedule(B)
    i, j = s[B].axis
    s[B].vectorize(i)
    s[B].parallel(j)
    with pytest.raises(ScheduleError, match="vectorized"):
        tt.build(s, [A, B])


def test_bug1_parallel_stage_computed_inside_a_vectorized_loop_is_a_schedule_error() -> None:
    A, B, C = declare_matmul(8, 8, 8)
    s = tt.create_schedule(C)
    CC = s.cache_write(C, "local")
    i, j = s[C].axis
    s[C].vectorize(i)
    s[CC].compute_at(s[C], j)
    s[CC].parallel(s[CC].axis[0])
    with pytest.raises(ScheduleError, match="vectorized"):
        tt.lower(s, [A, B, C])


def test_parallel_outside_vectorized_loop_is_fine() -> None:
    A = te.placeholder((8, 8), "float32", "A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, "B")
    s = tt.create_schedule(B)
    i, j = s[B].axis
    s[B].parallel(i)
    s[B].vectorize(j)
    m = tt.build(s, [A, B])
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    b = np.zeros_like(a)
    m(a, b)
    np.testing.assert_array_equal(b, 2 * a)


def test_bug2_compute_at_an_unrolled_loop() -> None:
    A, B, C = declare_matmul(2, 4, 3)
    s = tt.create_schedule(C)
    CC = s.cache_write(C, "local")
    i, j = s[C].axis
    s[C].unroll(j)
    s[CC].compute_at(s[C], j)
    m = tt.build(s, [A, B, C])
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (2, 3)).astype(np.float32), rng.uniform(-1, 1, (3, 4)).astype(np.float32)
    c = np.zeros((2, 4), np.float32)
    m(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)


def test_bug3a_guarded_reduction_split_swapped() -> None:
    """gcc 12.2 -O3 vectorized this correct C wrongly (513 instead of 511)."""
    d, w, out = declare_conv(N=1, C=1, H=3, W=3, O=1, KH=3, KW=3, stride=1, pad=0)
    s = tt.create_schedule(out)
    s[out].split("rw", nparts=2)  # 2 x 2 > 3: guarded
    s[out].reorder("rw.inner", "rw.outer")
    m = tt.build(s, [d, w, out])
    x = (2.0 ** np.arange(9, dtype=np.float32)).reshape(1, 1, 3, 3)
    k = np.ones((1, 1, 3, 3), np.float32)
    o = np.zeros((1, 1, 1, 1), np.float32)
    m(x, k, o)
    assert o.item() == 511.0


def test_bug3b_padding_stage_computed_at_a_row() -> None:
    """gcc 12.2 -O3 -march=x86-64-v4 vectorized this correct C wrongly (all zeros)."""
    d, w, out = declare_conv(N=1, C=1, H=2, W=4, O=3, KH=1, KW=1, stride=1, pad=2)
    s = tt.create_schedule(out)
    CC = s.cache_write(out, "local")
    s[CC].reorder("n", "y", "o", "x", "rc", "rh", "rw")
    s["data_pad"].compute_at(s[CC], "y")
    m = tt.build(s, [d, w, out])
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, d.shape).astype(np.float32)
    k = rng.uniform(-1, 1, w.shape).astype(np.float32)
    o = np.full(out.shape, np.nan, np.float32)
    m(x, k, o)
    np.testing.assert_allclose(o, conv_reference(x, k, 1, 2), rtol=1e-5, atol=1e-6)


def test_bug3c_inlined_padding_in_a_guarded_reduction() -> None:
    """gcc 12.2 -O3 vectorized this correct C wrongly (max error 0.38)."""
    op = ops.conv2d_nchwc(1, 2, 2, 6, 1, 1, stride=1, pad=2, icb=1, ocb=1)
    s = tt.create_schedule(op.output)
    unpack, conv = s[op.output], s[op.part(ops.Part.ACCUMULATOR)]
    unpack.split("x", nparts=5)
    conv.compute_at(unpack, "y")
    conv.reorder("oc", "n", "x", "ob", "kw", "ico", "ici", "y", "kh")
    conv.fuse("x", "ob")
    conv.split("ici", nparts=2)
    s[op.part(ops.Part.PACKED_INPUT)].compute_inline()
    m = tt.build(s, op.args)
    canonical = op.random_inputs(0)
    out = np.full(op.output.shape, np.nan, np.float32)
    m(*op.prepare(*canonical), out)
    np.testing.assert_allclose(out, conv_reference(*canonical, 1, 2), rtol=1e-5, atol=1e-6)

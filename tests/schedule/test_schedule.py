"""Tests of schedules: one test per ScheduleError rule, atomic steps, axis extents, and exact replay."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import tensortune as tt
from tensortune import te
from tensortune.errors import ScheduleError
from tensortune.ir import ForKind
from tensortune.schedule import (Annotate, CacheRead, CacheWrite, ComputeAt, ComputeInline, ComputeRoot,
                                 Fuse, Reorder, Schedule, Split, step_from_json, step_to_json)
from tensortune.schedule.schedule import AttachAt


def matmul(n: int = 8, m: int = 8, kk: int = 8):
    A = te.placeholder((n, kk), "float32", "A")
    B = te.placeholder((kk, m), "float32", "B")
    k = te.reduce_axis(kk, "k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), "C")
    return A, B, C


def pipeline():
    """A -> (P = 2A) -> (Q = P + 1) -> R = Q + E, with E = A * 3 a second branch."""
    A = te.placeholder((8, 8), "float32", "A")
    P = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, "P")
    Q = te.compute((8, 8), lambda i, j: P[i, j] + 1.0, "Q")
    E = te.compute((8, 8), lambda i, j: A[i, j] * 3.0, "E")
    R = te.compute((8, 8), lambda i, j: Q[i, j] + E[i, j], "R")
    return A, P, Q, E, R


def snapshot(s: Schedule):
    """Everything a step can change, copied."""
    return (list(s.steps), list(s.stages), {
        n: (list(st.leaves), list(st.relations), dict(st.annotations), st.attach, dict(st.extents), st.op)
        for n, st in s.stages.items()
    })


def raises_rule(fn, stage: str, axis: str | None, words: str) -> ScheduleError:
    """Run ``fn``, expect a ScheduleError naming ``stage`` and ``axis`` whose rule contains ``words``."""
    with pytest.raises(ScheduleError) as info:
        fn()
    err = info.value
    assert err.stage == stage
    assert err.axis == axis
    assert words in err.rule and words in str(err)
    assert f"stage '{stage}'" in str(err)
    return err


# --- one test per rule --------------------------------------------------------------------------


def test_reorder_with_a_repeated_axis():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    i, j = s[C].axis
    raises_rule(lambda: s[C].reorder(j, i, j), "C", "j", "more than once")


def test_reorder_with_an_axis_not_in_the_stage():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    i, _ = s[C].axis
    raises_rule(lambda: s[C].reorder(i, "x"), "C", "x", "no such axis")


def test_axis_handle_of_another_stage_is_rejected():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    qi = s[Q].axis[0]
    raises_rule(lambda: s[R].reorder(s[R].axis[1], qi), "R", "i", "belongs to stage 'Q'")
    raises_rule(lambda: s[R].split(qi, 2), "R", "i", "belongs to stage 'Q'")


def test_split_of_an_already_split_axis():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    i, _ = s[C].axis
    s[C].split(i, 4)
    raises_rule(lambda: s[C].split(i, 2), "C", "i", "already split or fused")


def test_split_of_a_fused_axis_part():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    i, j = s[C].axis
    s[C].fuse(i, j)
    raises_rule(lambda: s[C].split(j, 2), "C", "j", "already split or fused")


@pytest.mark.parametrize("kw", [{"factor": 2, "nparts": 2}, {}])
def test_split_needs_exactly_one_of_factor_and_nparts(kw):
    _, _, C = matmul()
    s = tt.create_schedule(C)
    raises_rule(lambda: s[C].split(s[C].axis[0], **kw), "C", "i", "exactly one of factor= or nparts=")


@pytest.mark.parametrize("kw", [{"factor": 0}, {"factor": -3}, {"nparts": 0}, {"factor": 2.0}, {"nparts": True}])
def test_split_needs_a_positive_integer(kw):
    _, _, C = matmul()
    s = tt.create_schedule(C)
    raises_rule(lambda: s[C].split(s[C].axis[1], **kw), "C", "j", "positive integer")


def test_split_of_an_annotated_axis():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    i, _ = s[C].axis
    s[C].parallel(i)
    raises_rule(lambda: s[C].split(i, 2), "C", "i", "cannot split an annotated axis")


def test_fuse_of_non_adjacent_axes():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    i, j = s[C].axis
    io, ii = s[C].split(i, 2)
    raises_rule(lambda: s[C].fuse(io, j), "C", "j", "adjacent")
    raises_rule(lambda: s[C].fuse(ii, io), "C", "i.outer", "adjacent")  # inner first is not adjacent either


def test_fuse_of_a_spatial_and_a_reduce_axis():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    _, j = s[C].axis
    (k,) = s[C].reduce_axis
    raises_rule(lambda: s[C].fuse(j, k), "C", "k", "spatial axis with a reduction axis")


def test_fuse_of_an_annotated_axis():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    i, j = s[C].axis
    s[C].unroll(j)
    raises_rule(lambda: s[C].fuse(i, j), "C", "j", "cannot fuse an annotated axis")


def test_fuse_needs_two_axes():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    raises_rule(lambda: s[C].fuse(s[C].axis[0]), "C", None, "at least two axes")


def test_vectorize_a_reduction_axis():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    (k,) = s[C].reduce_axis
    raises_rule(lambda: s[C].vectorize(k), "C", "k", "cannot vectorize a reduction axis")


def test_parallel_a_reduction_axis():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    (k,) = s[C].reduce_axis
    ko, _ = s[C].split(k, 2)
    raises_rule(lambda: s[C].parallel(ko), "C", "k.outer", "cannot parallel a reduction axis")


def test_unroll_a_reduction_axis_is_allowed():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    (k,) = s[C].reduce_axis
    s[C].unroll(k)
    assert s.steps == [Annotate("C", "k", ForKind.UNROLLED)]


def test_two_parallel_axes_in_one_stage():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    i, j = s[C].axis
    s[C].parallel(i)
    raises_rule(lambda: s[C].parallel(j), "C", "j", "already parallel")


def test_annotating_an_axis_twice_differently():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    _, j = s[C].axis
    s[C].unroll(j)
    raises_rule(lambda: s[C].vectorize(j), "C", "j", "already marked unroll")
    s[C].unroll(j)  # the same annotation again is harmless
    assert s[C].state.annotations == {"j": ForKind.UNROLLED}


def test_annotating_a_split_axis():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    i, _ = s[C].axis
    s[C].split(i, 2)
    raises_rule(lambda: s[C].vectorize(i), "C", "i", "already split or fused")


def test_compute_at_a_stage_that_does_not_consume_the_tensor():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    raises_rule(lambda: s[P].compute_at(s[E], s[E].axis[0]), "P", None, "does not read 'P'")
    raises_rule(lambda: s[Q].compute_at(s[Q], s[Q].axis[0]), "Q", None, "does not read 'Q'")


def test_compute_at_a_stage_whose_consumer_is_not_computed_inside_it():
    """A stage may be computed at a loop of its consumer's consumer only when its consumer is computed inside it."""
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    raises_rule(lambda: s[P].compute_at(s[R], s[R].axis[0]), "P", None, "or of a stage its consumers are computed")
    s[Q].compute_at(s[R], s[R].axis[1])
    s[P].compute_at(s[R], s[R].axis[0])  # now Q, P's consumer, is computed inside R
    assert s.stages["P"].attach == AttachAt("R", s[R].axis[0].name)


def test_compute_at_an_axis_that_is_not_a_loop_of_the_target():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    s[R].split(s[R].axis[0], 2)
    raises_rule(lambda: s[Q].compute_at(s[R], "i"), "R", "i", "is not a current loop of 'R'")


def test_compute_at_a_stage_read_by_several_stages():
    """A stage read by several may be computed at a loop of one of them only once the others are computed inside
    that stage."""
    A = te.placeholder((8,), "float32", "A")
    P = te.compute((8,), lambda i: A[i] * 2.0, "P")
    Q1 = te.compute((8,), lambda i: P[i] + 1.0, "Q1")
    Q2 = te.compute((8,), lambda i: P[i] + Q1[i], "Q2")
    s = tt.create_schedule(Q2)
    raises_rule(lambda: s[P].compute_at(s[Q2], s[Q2].axis[0]), "P", None, "nor computes its reader(s) ['Q1']")
    s[Q1].compute_at(s[Q2], s[Q2].axis[0])
    s[P].compute_at(s[Q2], s[Q2].axis[0])
    assert s.stages["P"].attach == AttachAt("Q2", s[Q2].axis[0].name)


def test_compute_at_of_an_output():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule([Q, R])
    raises_rule(lambda: s[R].compute_at(s[Q], s[Q].axis[0]), "R", None, "output stage must be computed at the root")
    # Q is an output too, although R reads it
    raises_rule(lambda: s[Q].compute_at(s[R], s[R].axis[0]), "Q", None, "output stage must be computed at the root")


def test_compute_inline_of_an_output():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    raises_rule(lambda: s[R].compute_inline(), "R", None, "output stage must be computed at the root")


def test_compute_inline_of_a_reduction():
    A, B, C = matmul()
    D = te.compute((8, 8), lambda i, j: C[i, j] + 1.0, "D")
    s = tt.create_schedule(D)
    raises_rule(lambda: s[C].compute_inline(), "C", None, "reduction cannot be inlined")


@pytest.mark.parametrize("action", [
    lambda h: h.split("x", 2),
    lambda h: h.compute_inline(),
    lambda h: h.compute_root(),
    lambda h: h.vectorize("x"),
])
def test_scheduling_a_placeholder(action):
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    assert s[A].axis == () and s[A].reduce_axis == ()
    raises_rule(lambda: action(s[A]), "A", None, "placeholder")


def test_cache_write_after_split():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    s[R].split(s[R].axis[0], 2)
    raises_rule(lambda: s.cache_write(R, "local"), "R", None, "cache_write must come before")


def test_cache_write_after_annotate_or_reorder():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    i, j = s[R].axis
    s[R].reorder(j, i)
    raises_rule(lambda: s.cache_write(R), "R", None, "cache_write must come before")
    s2 = tt.create_schedule(R)
    s2[Q].unroll(s2[Q].axis[1])
    raises_rule(lambda: s2.cache_write(Q), "Q", None, "cache_write must come before")


def test_cache_write_twice_in_one_scope():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    s.cache_write(R, "local")
    raises_rule(lambda: s.cache_write(R, "local"), "R", None, "'R.local' already exists")


def test_cache_read_with_a_reader_that_does_not_read_the_tensor():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    raises_rule(lambda: s.cache_read(A, "shared", [P, Q]), "A", None, "'Q' does not read 'A'")
    raises_rule(lambda: s.cache_read(A, "shared", ["nope"]), "A", None, "'nope' does not read 'A'")
    raises_rule(lambda: s.cache_read(A, "shared", []), "A", None, "at least one reader")


def test_unknown_stage_name():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    raises_rule(lambda: s["nope"], "nope", None, "no such stage")
    raises_rule(lambda: s.apply(Split("nope", "i", 2)), "nope", None, "no such stage")
    raises_rule(lambda: s[P].compute_at("nope", "i"), "P", None, "no stage named 'nope'")
    # a tensor that is not part of this schedule is an unknown stage too
    other = te.placeholder((3,), "float32", "other")
    raises_rule(lambda: s[other], "other", None, "no such stage")


def test_unknown_step_kind_in_a_record():
    with pytest.raises(ScheduleError, match="unknown schedule step 'Tile'"):
        step_from_json({"step": "Tile", "stage": "C"})


@pytest.mark.parametrize("record", [
    {"step": "Split", "stage": "C"},
    {"step": "Annotate", "stage": "C", "axis": "i", "annotation": "gpu"},
])
def test_corrupt_record_is_a_schedule_error(record):
    with pytest.raises(ScheduleError):
        step_from_json(record)


# --- a failing step changes nothing -------------------------------------------------------------


def _prepared():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    i, j = s[R].axis
    io, ii = s[R].split(i, 4)
    s[R].parallel(io)
    s[Q].compute_at(s[R], io)
    s[P].compute_inline()
    return s, (A, P, Q, E, R)


@pytest.mark.parametrize("bad_step", [
    Reorder("R", ("j", "j")),
    Reorder("R", ("j", "i.inner", "zz")),
    Split("R", "i", 2),
    Split("R", "j", 2, 2),
    Split("R", "j", 0),
    Split("R", "i.outer", 2),
    Fuse("R", "i.outer", "j"),
    Annotate("R", "j", ForKind.PARALLEL),
    Annotate("R", "i.outer", ForKind.VECTORIZED),
    ComputeInline("R"),
    ComputeAt("E", "Q", "i"),
    ComputeAt("Q", "R", "zz"),
    ComputeRoot("A"),
    CacheWrite("R"),
    CacheRead("A", "shared", ("E", "Q")),
    Split("nope", "i", 2),
])
def test_a_failing_step_leaves_the_schedule_unchanged(bad_step):
    s, (A, P, Q, E, R) = _prepared()
    before = snapshot(s)
    ir_before = str(tt.lower(s, [A, R]))
    with pytest.raises(ScheduleError):
        s.apply(bad_step)
    assert snapshot(s) == before
    assert str(tt.lower(s, [A, R])) == ir_before


def test_a_failing_tile_leaves_the_schedule_unchanged():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    i, j = s[C].axis
    before = snapshot(s)
    with pytest.raises(ScheduleError):
        s[C].tile(i, j, 2, 0)
    assert snapshot(s) == before


def test_a_failing_fuse_of_three_axes_leaves_the_schedule_unchanged():
    _, _, C = matmul()
    s = tt.create_schedule(C)
    i, j = s[C].axis
    (k,) = s[C].reduce_axis
    before = snapshot(s)
    with pytest.raises(ScheduleError):
        s[C].fuse(i, j, k)
    assert snapshot(s) == before


# --- axis handles -------------------------------------------------------------------------------


@pytest.mark.parametrize("extent, kw, outer, inner", [
    (10, {"factor": 4}, 3, 4),
    (10, {"nparts": 3}, 3, 4),
    (10, {"factor": 16}, 1, 16),
    (10, {"nparts": 16}, 16, 1),
    (12, {"factor": 4}, 3, 4),
    (12, {"nparts": 5}, 5, 3),
    (7, {"factor": 1}, 7, 1),
])
def test_split_extents(extent, kw, outer, inner):
    A = te.placeholder((extent,), "float32", "A")
    C = te.compute((extent,), lambda i: A[i] + 1.0, "C")
    s = tt.create_schedule(C)
    o, n = s[C].split(s[C].axis[0], **kw)
    assert (o.stage, o.name, o.extent, o.kind) == ("C", "i.outer", outer, te.AxisKind.SPATIAL)
    assert (n.stage, n.name, n.extent, n.kind) == ("C", "i.inner", inner, te.AxisKind.SPATIAL)
    assert [a.name for a in s[C].leaf_axes] == ["i.outer", "i.inner"]


def test_split_extents_of_a_reduction_and_fuse_extents():
    _, _, C = matmul(6, 10, 9)
    s = tt.create_schedule(C)
    i, j = s[C].axis
    (k,) = s[C].reduce_axis
    assert (i.extent, j.extent, k.extent) == (6, 10, 9)
    ko, ki = s[C].split(k, nparts=2)
    assert (ko.extent, ki.extent, ko.kind, ki.kind) == (2, 5, te.AxisKind.REDUCE, te.AxisKind.REDUCE)
    jo, ji = s[C].split(j, 3)
    f = s[C].fuse(i, jo)
    assert (f.name, f.extent) == ("i.j.outer.fused", 6 * 4)
    assert [a.name for a in s[C].leaf_axes] == ["i.j.outer.fused", "j.inner", "k.outer", "k.inner"]
    # root axes keep their full extents
    assert [a.extent for a in s[C].axis] == [6, 10]


def test_tile_returns_outer_then_inner_axes_and_records_steps():
    _, _, C = matmul(10, 9)
    s = tt.create_schedule(C)
    i, j = s[C].axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 4)
    assert [(a.name, a.extent) for a in (io, jo, ii, ji)] == [("i.outer", 3), ("j.outer", 3), ("i.inner", 4),
                                                               ("j.inner", 4)]
    assert s.steps == [Split("C", "i", 4), Split("C", "j", 4),
                       Reorder("C", ("i.outer", "j.outer", "i.inner", "j.inner"))]
    assert [a.name for a in s[C].leaf_axes] == ["i.outer", "j.outer", "i.inner", "j.inner", "k"]


def test_cache_write_and_cache_read_return_new_stages():
    A, B, C = matmul()
    s = tt.create_schedule(C)
    CL = s.cache_write(C, "local")
    AS = s.cache_read(A, "shared", [CL])
    assert (CL.name, AS.name) == ("C.local", "A.shared")
    assert list(s.stages) == ["A", "B", "A.shared", "C.local", "C"]
    assert s.steps[-2:] == [CacheWrite("C", "local"), CacheRead("A", "shared", ("C.local",))]
    assert [a.name for a in s[CL].reduce_axis] == ["k"] and s[C].reduce_axis == ()
    assert s.consumers("A") == ["A.shared"] and s.consumers("A.shared") == ["C.local"]


def test_compute_root_undoes_compute_at_and_inline(check_lowering):
    A, P, Q, E, R = pipeline()
    plain = str(check_lowering(tt.create_schedule(R), [A, R]))
    s = tt.create_schedule(R)
    io, _ = s[R].split(s[R].axis[0], 2)
    s[Q].compute_at(s[R], io)
    s[P].compute_inline()
    s[Q].compute_root()
    s[P].compute_root()
    s2 = tt.create_schedule(R)
    s2[R].split(s2[R].axis[0], 2)
    assert str(check_lowering(s, [A, R])) == str(check_lowering(s2, [A, R]))
    assert str(check_lowering(s, [A, R])) != plain


# --- errors found only when the whole schedule is lowered -----------------------------------------


def test_compute_at_axis_split_afterwards_is_reported_at_lowering():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    i, _ = s[R].axis
    s[Q].compute_at(s[R], i)
    s[R].split(i, 2)
    with pytest.raises(ScheduleError, match="no longer a loop of 'R'") as info:
        tt.lower(s, [A, R])
    assert (info.value.stage, info.value.axis) == ("R", "i")


def test_parallel_inside_parallel_is_reported_at_lowering():
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    i, _ = s[R].axis
    s[R].parallel(i)
    s[Q].compute_at(s[R], i)
    s[Q].parallel(s[Q].axis[1])
    with pytest.raises(ScheduleError, match="parallel loop nested") as info:
        tt.lower(s, [A, R])
    assert info.value.stage == "Q"


# --- replay ----------------------------------------------------------------------------------------


def _tuned_matmul_schedule(A, B, C) -> Schedule:
    s = tt.create_schedule(C)
    CC = s.cache_write(C, "local")
    AS = s.cache_read(A, "shared", [CC])
    i, j = s[C].axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 4)
    f = s[C].fuse(io, jo)
    s[C].parallel(f)
    s[CC].compute_at(s[C], f)
    ci, cj = s[CC].axis
    (kk,) = s[CC].reduce_axis
    ko, ki = s[CC].split(kk, nparts=3)
    s[CC].reorder(ko, ci, ki, cj)
    s[CC].vectorize(cj)
    s[CC].unroll(ci)
    s[AS].compute_at(s[CC], ko)
    return s


def test_replay_from_json_on_a_fresh_declaration_gives_identical_ir(check_lowering, rng):
    A, B, C = matmul(10, 9, 12)
    s = _tuned_matmul_schedule(A, B, C)
    log = "\n".join(json.dumps(step_to_json(st)) for st in s.steps)
    steps = [step_from_json(json.loads(line)) for line in log.splitlines()]
    assert steps == s.steps
    assert {type(st) for st in steps} >= {CacheWrite, CacheRead, Split, Reorder, Fuse, Annotate, ComputeAt}

    A2, B2, C2 = matmul(10, 9, 12)  # fresh tensors and variables
    s2 = Schedule.replay(C2, steps)
    assert s2.steps == s.steps
    original = str(check_lowering(s, [A, B, C]))
    assert str(check_lowering(s2, [A2, B2, C2])) == original

    m = tt.build(s2, [A2, B2, C2])
    a = rng.standard_normal((10, 12)).astype("float32")
    b = rng.standard_normal((12, 9)).astype("float32")
    c = np.zeros((10, 9), "float32")
    m(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_replay_of_inline_and_compute_at_steps(check_lowering):
    A, P, Q, E, R = pipeline()
    s = tt.create_schedule(R)
    io, ii = s[R].split(s[R].axis[0], 3)
    s[Q].compute_at(s[R], io)
    s[P].compute_inline()
    s[E].compute_inline()
    s[Q].unroll(s[Q].axis[0])
    records = json.loads(json.dumps([step_to_json(st) for st in s.steps]))
    assert records[0] == {"step": "Split", "stage": "R", "axis": "i", "factor": 3, "nparts": None}
    A2, P2, Q2, E2, R2 = pipeline()
    s2 = Schedule.replay([R2], [step_from_json(r) for r in records])
    assert str(check_lowering(s2, [A2, R2])) == str(check_lowering(s, [A, R]))


def test_replay_validates_each_step():
    A, P, Q, E, R = pipeline()
    with pytest.raises(ScheduleError, match="already split"):
        Schedule.replay(R, [Split("R", "i", 2), Split("R", "i", 2)])


def test_steps_are_frozen_records():
    st = Split("C", "i", 4)
    with pytest.raises(AttributeError):
        st.factor = 8  # type: ignore[misc]
    assert copy.deepcopy(st) == st and hash(st) == hash(Split("C", "i", 4))

"""``te.scan``: a recurrence along one axis (each element from the ones before it), the kernel of a cumulative sum.
Its loops along the axis run in order whatever the schedule does to the others; a schedule that would run them in
parallel or as vectors, inline it or compute it inside another stage is refused, and so is a body that reads the
tensor anywhere but along the axis."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune as tt
from tensortune import te
from tensortune.errors import ExprError, ScheduleError

SHAPE = (3, 10, 8)


def cumsum(x: te.Tensor, axis: int = 1, name: str = "out") -> te.Tensor:
    def body(out, *idx):
        i = idx[axis]
        before = list(idx)
        before[axis] = te.maximum(i - 1, 0)
        return te.select(i > 0, out[tuple(before)], te.const(0.0, "float32")) + x[idx]

    return te.scan(x.shape, "float32", axis, body, name)


def test_a_scan_is_one_pass_reading_its_own_earlier_elements(check_lowering, check_run, rng):
    x = te.placeholder(SHAPE, "float32", "x")
    out = cumsum(x)
    assert out.op.inputs() == [x] and out.op.scan_axis == 1
    s = tt.create_schedule(out)
    func = check_lowering(s, [x, out])
    assert "out[i0 * 80 + max(i1 - 1, 0) * 8 + i2]" in str(func)
    a = rng.uniform(-1, 1, SHAPE).astype(np.float32)
    check_run(s, [x, out], [a], np.cumsum(a, 1), rtol=1e-5, atol=1e-5)


@settings(max_examples=10, deadline=None)
@given(axis=st.integers(0, 2), factor=st.integers(1, 11), data=st.data())
def test_any_schedule_of_the_other_axes_keeps_the_order_along_the_scan_axis(axis, factor, data):
    """The scan axis split (the parts in any order among the others); the other axes in parallel or as vectors."""
    x = te.placeholder(SHAPE, "float32", "x")
    out = cumsum(x, axis)
    s = tt.create_schedule(out)
    st_ = s[out]
    axes = list(st_.axis)
    scan_outer, scan_inner = st_.split(axes[axis], factor)
    others = [a for k, a in enumerate(axes) if k != axis]
    order = data.draw(st.permutations(others + [scan_outer, scan_inner]))
    order.remove(scan_inner)
    order.insert(order.index(scan_outer) + 1, scan_inner)  # outer part before inner part: the order along the axis
    st_.reorder(*order)
    first, last = order[0], order[-1]
    if first in others:
        st_.parallel(first)
    if last in others and last is not first:
        st_.vectorize(last)
    a = np.random.default_rng(axis).uniform(-1, 1, SHAPE).astype(np.float32)
    m = tt.build(s, [x, out])
    got = np.zeros(SHAPE, np.float32)
    m(a, got)
    np.testing.assert_allclose(got, np.cumsum(a, axis), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("how", ["parallel", "vectorize", "parallel the split", "vectorize the fused"])
def test_running_the_scan_axis_in_parallel_or_as_vectors_is_refused(how):
    x = te.placeholder(SHAPE, "float32", "x")
    out = cumsum(x)
    s = tt.create_schedule(out)
    st_ = s[out]
    o, i, j = st_.axis
    if how == "parallel":
        st_.parallel(i)
    elif how == "vectorize":
        st_.reorder(o, j, i)
        st_.vectorize(i)
    elif how == "parallel the split":
        io, _ = st_.split(i, 5)
        st_.reorder(io, o, j)
        st_.parallel(io)
    else:
        st_.vectorize(st_.fuse(i, j))
    with pytest.raises(ScheduleError, match="along the axis of a scan"):
        tt.lower(s, [x, out])


def test_a_scan_stays_at_the_root():
    x = te.placeholder(SHAPE, "float32", "x")
    scan = cumsum(x, name="scan")
    out = te.compute(SHAPE, lambda *i: scan[i] * 2.0, "out")
    for how in ("compute_inline", "compute_at", "cache_write"):
        s = tt.create_schedule(out)
        with pytest.raises(ScheduleError, match="a scan reads its own earlier elements"):
            if how == "compute_at":
                s[scan].compute_at(s[out], s[out].axis[0])
            elif how == "cache_write":
                s.cache_write(scan, "local")
            else:
                s[scan].compute_inline()


def test_a_cache_read_into_a_scan_keeps_it_a_scan(check_run, rng):
    x = te.placeholder(SHAPE, "float32", "x")
    out = cumsum(x)
    s = tt.create_schedule(out)
    s.cache_read(x, "local", [out])
    assert s.stages["out"].op.scan_axis == 1
    a = rng.uniform(-1, 1, SHAPE).astype(np.float32)
    check_run(s, [x, out], [a], np.cumsum(a, 1), rtol=1e-5, atol=1e-5)


def test_what_a_scan_body_cannot_do():
    x = te.placeholder(SHAPE, "float32", "x")
    with pytest.raises(ExprError, match="only at its own index along every axis but 1"):
        te.scan(SHAPE, "float32", 1, lambda out, o, i, j: out[o, i, te.maximum(j - 1, 0)] + x[o, i, j], "out")
    with pytest.raises(ExprError, match="the body is int32, the tensor float32"):
        te.scan(SHAPE, "float32", 1, lambda out, o, i, j: i, "out")
    k = te.reduce_axis(8, "k")
    with pytest.raises(ExprError, match="cannot reduce"):
        te.scan(SHAPE, "float32", 1, lambda out, o, i, j: te.sum(x[o, i, k], axis=k), "out")
    with pytest.raises(tt.errors.ShapeError, match="axis 3 is out of range"):
        te.scan(SHAPE, "float32", 3, lambda out, o, i, j: x[o, i, j], "out")

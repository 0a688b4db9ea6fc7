"""Memory planning: buffers alive at the same time never share bytes; the others do."""
from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tensortune.network.memory import ALIGN, Buffer, plan_memory


def test_disjoint_lifetimes_share_memory():
    bufs = [Buffer("a", 1000, 0, 1), Buffer("b", 1000, 1, 2), Buffer("c", 1000, 2, 3)]
    plan = plan_memory(bufs)
    plan.check(bufs)
    assert plan.offsets["a"] == plan.offsets["c"]  # a is dead when c is written
    assert plan.total == 2 * 1024


def test_offsets_are_aligned():
    bufs = [Buffer(f"b{k}", 3 + k, k, k + 1) for k in range(6)]
    plan = plan_memory(bufs)
    assert all(off % ALIGN == 0 for off in plan.offsets.values())
    plan.check(bufs)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(0, 20), st.integers(0, 6)), min_size=1, max_size=25))
def test_random_buffers_never_overlap_while_alive(items):
    bufs = [Buffer(f"b{k}", size, first, first + span) for k, (size, first, span) in enumerate(items)]
    random.Random(0).shuffle(bufs)
    plan = plan_memory(bufs)
    plan.check(bufs)
    assert plan.total <= sum(-(-b.size // ALIGN) * ALIGN for b in bufs)

"""Config spaces: knob policies, sizes, mixed-radix index round trips, sampling, neighbours, filters."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings, strategies as st

from tensortune.autotvm.space import ConfigEntity, ConfigSpace, SpaceError, split_candidates
from tensortune.autotvm.catalog import create_task, task_from_workload


def test_three_way_factor_split_of_224_has_63_configs():
    s = ConfigSpace()
    s.define_split("tile", 224, num_outputs=3)
    assert len(s) == 63
    sizes = {tuple(e.size) for e in s.knobs["tile"].entities}
    assert len(sizes) == 63 and all(a * b * c == 224 for a, b, c in sizes)


def test_split_policies():
    assert {e.size for e in split_candidates(12, 2, "factors")} == {(1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1)}
    p2 = {e.size for e in split_candidates(12, 2, "power2")}
    assert p2 == {(-1, 1), (-1, 2), (-1, 4), (-1, 8)}
    verbose = {e.size for e in split_candidates(12, 2, "verbose")}
    assert (-1, 8) in verbose and (3, 4) in verbose and (-1, 4) not in verbose  # (-1, 4) == (3, 4)
    assert [e.size for e in split_candidates(12, 2, "candidate", candidates=[[3, 4]])] == [(3, 4)]
    assert all(e.size[-1] <= 4 for e in split_candidates(64, 3, max_factor=4))
    with pytest.raises(SpaceError, match="unknown split policy"):
        split_candidates(12, 2, "bogus")
    with pytest.raises(SpaceError, match="no candidates"):
        split_candidates(12, 2, filter=lambda e: False)


def test_reorder_annotate_and_knob_sizes():
    s = ConfigSpace()
    s.define_reorder("r", [0, 1, 2], policy="all")
    s.define_reorder("g", [0, 1, 2, 3], policy="groups", groups=[[0, 1], [2, 3]])
    s.define_annotate("a", 2, options=("none", "unroll", "vec"))
    s.define_knob("k", [1, 2, 4, 8, 16])
    assert s.dims == [6, 4, 9, 5] and len(s) == 6 * 4 * 9 * 5
    with pytest.raises(SpaceError, match="defined twice"):
        s.define_knob("k", [1])
    with pytest.raises(SpaceError, match="partition"):
        s.define_reorder("bad", [0, 1, 2], policy="groups", groups=[[0, 1]])


@given(st.lists(st.integers(1, 7), min_size=1, max_size=6), st.data())
@settings(max_examples=60, deadline=None)
def test_index_round_trip(dims, data):
    s = ConfigSpace()
    for i, d in enumerate(dims):
        s.define_knob(f"k{i}", list(range(d)))
    index = data.draw(st.integers(0, len(s) - 1))
    ch = s.index_to_choices(index)
    assert s.choices_to_index(ch) == index
    cfg = s.get(index)
    assert [cfg[f"k{i}"] for i in range(len(dims))] == list(ch)


def test_index_out_of_range_is_an_error():
    s = ConfigSpace()
    s.define_knob("k", [1, 2])
    with pytest.raises(SpaceError):
        s.get(2)


def test_sample_respects_filters_and_exclusions():
    s = ConfigSpace()
    s.define_knob("a", list(range(10)))
    s.define_knob("b", list(range(10)))
    s.add_filter(lambda c: c["a"] + c["b"] < 8)
    rng = random.Random(0)
    exclude = set(range(0, 100, 3))
    picks = s.sample(20, rng, exclude=exclude)
    assert len(picks) == 20 == len(set(picks))
    assert not exclude.intersection(picks)
    assert all(s.get(i)["a"] + s.get(i)["b"] < 8 for i in picks)


def test_neighbour_changes_exactly_one_knob():
    s = ConfigSpace()
    for k in "abcd":
        s.define_knob(k, list(range(5)))
    rng = random.Random(1)
    for i in rng.sample(range(len(s)), 50):
        j = s.neighbour(i, rng)
        diff = [x != y for x, y in zip(s.index_to_choices(i), s.index_to_choices(j))]
        assert sum(diff) == 1


def test_config_entity_json_and_equality():
    t = create_task("matmul", {"M": 64, "N": 64, "K": 64})
    cfg = t.config(5)
    assert isinstance(cfg, ConfigEntity) and cfg == t.config(5) and cfg != t.config(6)
    assert set(cfg.to_json()) == set(t.space.knobs)


@pytest.mark.parametrize("workload", ["resnet18:C2", "resnet18:C6"])
@pytest.mark.parametrize("template", ["conv2d_nchw_spatial_pack", "conv2d_nchwc"])
def test_conv2d_spaces_hold_over_a_million_configs(workload, template):
    assert len(task_from_workload(workload, template).space) >= 1_000_000


def test_annotate_knob_uses_the_loop_kinds_of_the_ir():
    from tensortune import te
    from tensortune.ir import ForKind
    from tensortune.schedule import create_schedule

    s = ConfigSpace()
    s.define_annotate("a", 2, options=(ForKind.SERIAL, "unroll", "vec"))  # short spellings are accepted
    assert len(s) == 9
    A = te.placeholder((4, 8), "float32", "A")
    B = te.compute((4, 8), lambda i, j: A[i, j] * 2.0, "B")
    sch = create_schedule(B)
    entity = s.knobs["a"].entities[s.knobs["a"].entities.index(
        next(e for e in s.knobs["a"].entities if e.kinds == (ForKind.UNROLLED, ForKind.VECTORIZED)))]
    assert entity.to_json() == ["unrolled", "vectorized"]
    entity.apply(sch[B], sch[B].axis)
    assert sch[B].state.annotations == {"i": ForKind.UNROLLED, "j": ForKind.VECTORIZED}
    with pytest.raises(SpaceError, match="unknown loop kind 'sideways'"):
        ConfigSpace().define_annotate("b", 1, options=("sideways",))

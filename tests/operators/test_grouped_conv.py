"""Grouped convolutions (ResNeXt, RegNet, ShuffleNet): groups narrower than a channel block run as fewer, wider groups
with block-diagonal weights (``conv_kernels.merged_groups``), blocked and vectorized, and equal onnxruntime."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.operators import Conv
from tensortune.operators.conv_kernels import MAX_MERGE, group_merge, merge_group_weights


@settings(max_examples=40, deadline=None)
@given(groups=st.sampled_from([2, 3, 4, 6, 8, 16, 32]), cg=st.integers(1, 5), og=st.integers(1, 5),
       merged_by=st.sampled_from([1, 2, 4, 8, 16]), k=st.integers(1, 3), stride=st.integers(1, 2))
def test_merged_groups_compute_the_same_convolution(groups, cg, og, merged_by, k, stride):
    """The block-diagonal weights of ``groups / m`` groups give the convolution of the ``groups`` groups exactly."""
    if groups % merged_by:
        merged_by = 1
    x = rand((1, groups * cg, 7, 6), 1)
    w = rand((groups * og, cg, k, k), 2)
    own = Conv((stride, stride), groups=groups).reference(x, w)
    merged = groups // merged_by
    wide = merge_group_weights(w, groups, merged)
    assert wide.shape == (groups * og, cg * merged_by, k, k)
    np.testing.assert_allclose(Conv((stride, stride), groups=merged).reference(x, wide), own, rtol=1e-5, atol=1e-6)


def test_group_merge_is_the_fewest_groups_that_hold_whole_blocks():
    assert group_merge(32, ((128, 16), (128, 16))) == 4  # ResNeXt-50 32x4d's first stage on AVX-512
    assert group_merge(32, ((256, 16), (256, 16))) == 2
    assert group_merge(16, ((128, 8), (128, 8))) == 1  # RegNet's groups of 8 on AVX2
    assert group_merge(3, ((48, 16), (48, 16))) == 1
    assert group_merge(64, ((64, 16),)) == 16 <= MAX_MERGE  # one channel per group
    assert group_merge(6, ((24, 16),)) is None  # no merge of divisors of 6 gives a multiple of 16


@settings(max_examples=6, deadline=None)
@given(groups=st.sampled_from([4, 8, 16, 32]), cg=st.sampled_from([1, 2, 4, 8]), og=st.sampled_from([1, 2, 4]),
       stride=st.integers(1, 2), relu=st.booleans())
def test_a_network_of_narrow_groups_runs_blocked_and_equals_onnxruntime(groups, cg, og, stride, relu):
    c, o = groups * cg, groups * og
    nodes = [node("Conv", ["x", "w", "b"], ["c" if relu else "y"], pads=[1] * 4, group=groups, strides=[stride] * 2)]
    nodes += [node("Relu", ["c"], ["y"])] if relu else []
    m = model(nodes, {"x": (1, c, 10, 9)}, ["y"], {"w": rand((o, cg, 3, 3), 1), "b": rand((o,), 2)})
    feeds = {"x": rand((1, c, 10, 9), 3)}
    module = nw.compile(m)
    assert_close(module.run(feeds)["y"], ort_run(m, feeds)[0])
    kinds = [k.kind for k in module.manifest.kernels]
    assert "conv2d_generic" not in kinds, kinds

"""Grouped convolutions as tasks of ``conv2d_nchwc_packed``: the workload's ``groups``, the template's configs equal
numpy's grouped convolution, its block knobs keep blocks whole groups hold, and the templates of ungrouped
convolutions refuse grouped workloads (a ``TaskError``, never a crash)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tensortune as tt
from tensortune import cli
from tensortune.autotvm.catalog import create_task
from tensortune.autotvm.task import TEMPLATES, Task, TaskError
from tensortune.autotvm.templates import conv2d_nchwc_packed_template as packed, default_template
from tensortune.autotvm.workload import Conv2d, DefaultKernel
from tensortune.errors import ShapeError
from tensortune.operators.conv_tasks import network_templates
from tensortune.target import TargetKind

HOST = tt.Target.host()
LANES = HOST.lanes("float32")


def run_config(task: Task, index: int, canonical) -> None:
    sch, op = task.instantiate(index)
    out = np.full(op.output.shape, np.nan, op.output.dtype.numpy)
    tt.build(sch, op.args)(*task.kernel_inputs(index, canonical), out)
    np.testing.assert_allclose(out, task.reference(canonical, index), rtol=1e-4, atol=1e-4,
                               err_msg=f"{task} config {index}")


def test_a_grouped_workload_keeps_groups_in_its_key_and_an_ungrouped_one_the_old_key():
    wl = Conv2d(1, 64, 8, 8, 32, 3, 1, 1, groups=4)
    assert wl.args() == (1, 64, 8, 8, 32, 3, 1, 1, "float32", 4) and Conv2d.from_args(wl.args()) == wl
    assert Conv2d(1, 64, 8, 8, 32, 3, 1, 1, groups=1).args() == (1, 64, 8, 8, 32, 3, 1, 1)
    assert Task(packed, wl.args(), HOST).workload_key == '["conv2d_nchwc_packed",[1,64,8,8,32,3,1,1,"float32",4]]'
    assert str(wl) == "conv2d(N=1, IC=64, H=8, W=8, OC=32, K=3, stride=1, pad=1, dtype=float32, groups=4)"
    for bad in (0, 3, 128):
        with pytest.raises(ShapeError, match=f"groups={bad} must be positive and divide"):
            Conv2d(1, 64, 8, 8, 32, 3, 1, 1, groups=bad)


@settings(max_examples=8, deadline=None)
@given(groups=st.sampled_from([2, 4, 8]), cg=st.sampled_from([1, 2]), og=st.sampled_from([1, 2]),
       k=st.sampled_from([1, 3]), stride=st.integers(1, 2), size=st.integers(4, 7), data=st.data())
def test_random_configs_of_a_grouped_workload_equal_numpy(groups, cg, og, k, stride, size, data):
    """Groups of whole vectors of channels (``cg``, ``og`` vectors in and out), random configs."""
    wl = Conv2d(1, groups * cg * LANES, size, size + 1, groups * og * LANES, k, stride, k // 2, groups=groups)
    task = Task(packed, wl, HOST)
    index = data.draw(st.integers(0, len(task.space) - 1), "config")
    run_config(task, index, task.make_inputs(0))


def test_the_block_knobs_offer_only_blocks_whole_groups_hold():
    """Two vectors per block only where a group holds whole ones."""
    wide = Task(packed, Conv2d(1, 8 * LANES, 6, 6, 8 * LANES, 3, 1, 1, groups=2), HOST)
    narrow = Task(packed, Conv2d(1, 8 * LANES, 6, 6, 8 * LANES, 3, 1, 1, groups=8), HOST)
    def blocks(task, knob):
        return [e.val for e in task.space.knobs[knob].entities]

    assert blocks(wide, "block_in") == blocks(wide, "block_out") == [LANES, 2 * LANES]
    assert blocks(narrow, "block_in") == blocks(narrow, "block_out") == [LANES]  # 8 groups of one vector
    # the untuned kernel of a grouped layer is its default blocks' direct convolution (never Winograd)
    dk = Task(default_template, DefaultKernel(packed.name, narrow.workload), HOST)
    assert dk.args == (packed.name, 1, 8 * LANES, 6, 6, 8 * LANES, 3, 1, 1, "float32", 8)
    run_config(dk, 0, dk.make_inputs(0))


def test_groups_that_hold_no_whole_block_are_a_shape_error_naming_the_way_out():
    task = Task(packed, Conv2d(1, 2 * LANES, 6, 6, 2 * LANES, 3, 1, 1, groups=2 * LANES), HOST)  # 1 channel each
    with pytest.raises(ShapeError, match="hold no whole channel block .* give fewer, wider groups"):
        task.space


@pytest.mark.parametrize("name", [n for n, t in TEMPLATES.items() if t.workload is Conv2d
                                  and n not in (packed.name, "auto_conv2d")])
def test_templates_of_ungrouped_convolutions_refuse_grouped_workloads(name):
    wl = Conv2d(1, 32, 8, 8, 32, 3, 1, 1, groups=2)
    target = HOST if TargetKind.C in TEMPLATES[name].targets else tt.Target.parse("cuda -arch=sm_90")
    with pytest.raises(TaskError, match=f"'{name}' does not compute .*groups=2.*takes no groups; templates that do: "
                                        f"{packed.name}, auto_conv2d"):
        Task(TEMPLATES[name], wl, target)
    assert Task(TEMPLATES[name], Conv2d(1, 32, 8, 8, 32, 3, 1, 1), target)  # ungrouped: as before
    assert not TEMPLATES[name].computes(wl)


def test_a_networks_grouped_layer_is_tuned_with_the_packed_template_only():
    three = Conv2d(1, 64, 14, 14, 64, 3, 1, 1, groups=4)  # no Winograd alternative
    assert network_templates(three, HOST) == [packed]


def test_the_command_line_makes_grouped_tasks():
    args = cli.build_parser().parse_args(["tune", "conv2d", "--shape", "IC=64", "OC=32", "H=8", "W=8", "K=3", "pad=1",
                                          "groups=4", "--log", "x"])
    task = cli._task_from_args(args)  # the default template (spatial pack) takes no groups: the one that does
    assert task.template is packed and task.workload == Conv2d(1, 64, 8, 8, 32, 3, 1, 1, groups=4)
    assert create_task("conv2d", {"IC": 64, "OC": 32, "H": 8, "W": 8, "K": 3, "groups": 1}).workload.args() == (
        1, 64, 8, 8, 32, 3, 1, 0)
    with pytest.raises(TaskError, match="takes no groups"):
        create_task("conv2d", {"IC": 64, "OC": 32, "H": 8, "W": 8, "K": 3, "groups": 4},
                    template="conv2d_nchw_spatial_pack")
    with pytest.raises(TaskError, match="groups must be a positive integer"):
        create_task("conv2d", {"IC": 64, "OC": 32, "H": 8, "W": 8, "K": 3, "groups": 0})
    with pytest.raises(TaskError, match="its parameters are N IC H W OC K stride pad groups"):
        create_task("conv2d", {"IC": 64, "OC": 32, "H": 8, "W": 8, "K": 3, "group": 4})
    with pytest.raises(TaskError, match="has no shape parameter"):
        create_task("depthwise_conv2d", {"C": 64, "H": 8, "W": 8, "K": 3, "groups": 4})

"""Typed workloads and the one template table: workloads by named fields whose positional form keeps old logs'
keys, templates registered with what they serve, tasks made from either form."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from tensortune.autotvm.catalog import create_task, default_template, templates_of
from tensortune.autotvm.task import TEMPLATES, Task
from tensortune.autotvm.templates import conv2d_nchwc_packed_template, conv2d_winograd_template, default_template as dk
from tensortune.autotvm.workload import Conv2d, DefaultKernel, DepthwiseConv2d, Matmul
from tensortune.errors import ShapeError
from tensortune.operators.conv_tasks import network_templates
from tensortune.target import Target, TargetKind

HOST = Target.host()
CUDA = Target.parse("cuda -arch=sm_90")
PACKAGE = {n: t for n, t in TEMPLATES.items() if t.fn.__module__.startswith("tensortune.")}


@given(st.integers(1, 4), st.integers(1, 64), st.integers(1, 56), st.integers(1, 56), st.integers(1, 64),
       st.sampled_from([1, 3, 5]), st.integers(1, 2), st.integers(0, 2))
def test_a_float32_workload_keeps_the_positional_key_of_old_logs(n, c, h, w, o, k, stride, pad):
    wl = Conv2d(n, c, h, w, o, k, stride, pad)
    assert wl.args() == (n, c, h, w, o, k, stride, pad)  # always all eight, as logs before typed workloads
    assert Conv2d.from_args(wl.args()) == wl
    task = Task(conv2d_nchwc_packed_template, (n, c, h, w, o, k, stride, pad), HOST)
    assert task.workload == wl and task == Task(conv2d_nchwc_packed_template, wl, HOST)
    assert task.workload_key == f'["conv2d_nchwc_packed",[{n},{c},{h},{w},{o},{k},{stride},{pad}]]'


def test_optional_fields_join_the_key_only_where_they_differ_from_their_defaults():
    assert Matmul(64, 32, 16).args() == (64, 32, 16)
    assert Matmul(64, 32, 16, relu=True).args() == (64, 32, 16, "float32", False, True)
    assert Conv2d(1, 8, 8, 8, 8, 3, 1, 1, dtype="bfloat16").args() == (1, 8, 8, 8, 8, 3, 1, 1, "bfloat16")
    assert Matmul.from_args((64, 32, 16, "float32", False, True)) == Matmul(64, 32, 16, relu=True)
    dkw = DefaultKernel("depthwise_conv2d_nchwc_packed", DepthwiseConv2d(1, 16, 8, 8, 3, 1, 1))
    assert dkw.args() == ("depthwise_conv2d_nchwc_packed", 1, 16, 8, 8, 3, 1, 1)
    assert Task(dk, dkw.args(), HOST).workload == dkw


@pytest.mark.parametrize("kind, args, match", [
    (Conv2d, (1, 8, 8, 8, 16, 3, 1), "takes 8 to 10 arguments"),
    (Conv2d, (1, 8, 8, 8, 16, 3, 1, 1, "float32", 3), "groups=3 must be positive and divide both IC=8 and OC=16"),
    (DepthwiseConv2d, (1, 8, 8, 8, 3, 1, 1, "float32", 5), "takes 7 to 8 arguments"),
    (Matmul, (8, 8.5, 8), "N must be an integer"),
    (Conv2d, (1, 8, 8, 8, 16, 3, 1, 1, "float7"), "unsupported dtype"),
])
def test_a_workload_of_wrong_arguments_is_a_shape_error_naming_its_fields(kind, args, match):
    with pytest.raises(ShapeError, match=match):
        kind.from_args(args)


def test_every_package_template_says_what_it_serves():
    for name, t in PACKAGE.items():
        assert t.workload is not None and t.targets and t.dtypes, name
        assert t.layout in ("", "NCHW", "NCHWc"), name
    for op in ("matmul", "conv2d", "depthwise_conv2d"):
        for kind in (TargetKind.C, TargetKind.CUDA):
            defaults = [t for t in PACKAGE.values() if t.operator == op and t.default and kind in t.targets]
            assert len(defaults) == 1, (op, kind)
        assert set(templates_of(op)) >= {t.name for t in PACKAGE.values() if t.operator == op}
    assert default_template("conv2d", HOST) == "conv2d_nchw_spatial_pack"
    assert default_template("conv2d", CUDA) == "conv2d_nchw_cuda"


def test_a_networks_templates_come_from_the_table_by_workload_and_where_they_apply():
    three = Conv2d(1, 16, 14, 14, 16, 3, 1, 1)
    assert network_templates(three, HOST) == [conv2d_nchwc_packed_template, conv2d_winograd_template]
    assert network_templates(Conv2d(1, 16, 14, 14, 16, 3, 2, 1), HOST) == [conv2d_nchwc_packed_template]
    assert [t.name for t in network_templates(DepthwiseConv2d(1, 16, 14, 14, 3, 1, 1), HOST)] == [
        "depthwise_conv2d_nchwc_packed"]
    assert network_templates(three, CUDA) == []  # no network template schedules for GPUs yet


def test_channel_blocked_templates_say_how_a_config_blocks_channels():
    lanes = HOST.lanes("float32")
    wl = Conv2d(1, 4 * lanes, 8, 8, 2 * lanes, 3, 1, 1)
    assert conv2d_nchwc_packed_template.channel_blocks({}, wl, lanes) == (lanes, lanes)  # a record before the knobs
    assert conv2d_nchwc_packed_template.channel_blocks({"block_in": 2 * lanes, "block_out": lanes}, wl, lanes) == (
        2 * lanes, lanes)
    assert dk.channel_blocks({}, DefaultKernel("conv2d_nchwc_packed", wl), lanes) == (lanes, lanes)


def test_the_cli_names_of_shape_parameters_map_to_the_fields():
    task = create_task("conv2d", {"IC": 8, "OC": 16, "H": 9, "W": 9, "K": 3, "pad": 1})
    assert task.workload == Conv2d(1, 8, 9, 9, 16, 3, 1, 1)
    assert str(task.workload) == "conv2d(N=1, IC=8, H=9, W=9, OC=16, K=3, stride=1, pad=1)"

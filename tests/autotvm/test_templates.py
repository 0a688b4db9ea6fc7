"""Every template: random configs compile and equal numpy (weights packed by ``prepare``)."""
from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

import tensortune as tt
from tensortune.autotvm.task import Task
from tensortune.autotvm.catalog import create_task
from tensortune.autotvm.templates import TEMPLATES

CASES = [
    ("matmul", (48, 64, 40)),
    ("matmul", (33, 40, 17)),
    ("conv2d_nchwc", (1, 16, 12, 12, 32, 3, 1, 1)),
    ("conv2d_nchwc", (1, 3, 15, 15, 16, 5, 2, 2)),
    ("conv2d_nchw_spatial_pack", (1, 16, 12, 12, 32, 3, 1, 1)),
    ("conv2d_nchw_spatial_pack", (1, 8, 14, 14, 16, 1, 2, 0)),
    ("conv2d_nchwc_packed", (1, 32, 12, 12, 48, 3, 1, 1)),
    ("conv2d_nchwc_packed", (1, 3, 15, 15, 32, 5, 2, 2)),
    ("conv2d_nchwc_packed", (1, 16, 14, 14, 12, 1, 2, 0)),
    ("depthwise_conv2d_nchwc", (1, 32, 14, 14, 3, 1, 1)),
    ("depthwise_conv2d_nchwc", (1, 16, 15, 15, 3, 2, 1)),
    # prime and few-divisor extents: register tiles that do not divide are padded (or guarded)
    ("matmul", (37, 41, 29)),
    ("conv2d_nchw_spatial_pack", (1, 16, 17, 17, 24, 3, 1, 1)),
    ("conv2d_nchwc_packed", (1, 16, 7, 7, 32, 3, 1, 1)),
    ("conv2d_nchwc", (1, 8, 11, 11, 16, 3, 1, 0)),
    ("depthwise_conv2d_nchwc", (1, 24, 13, 13, 3, 1, 1)),
]


@pytest.mark.parametrize("name,args", CASES)
def test_random_configs_equal_numpy(name, args):
    task = Task(TEMPLATES[name], args, tt.Target.host())
    canonical = task.make_inputs(0)
    for index in task.space.sample(4, random.Random(zlib.crc32(name.encode()))):
        sch, op = task.instantiate(index)
        mod = tt.build(sch, op.args)
        out = np.full(op.output.shape, np.nan, op.output.dtype.numpy)
        mod(*task.kernel_inputs(index, canonical), out)
        ref = task.reference(canonical, index)  # in the config's layout (packed templates: its channel blocks)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4, err_msg=f"{name}{args} config {index}")


def test_templates_see_the_task_target():
    """The recording run and every instantiation get the task's target as ``cfg.target``, not the host's."""
    from tensortune.autotvm.space import ConfigSpace
    from tensortune.autotvm.task import template
    from tensortune.ops import matmul
    from tensortune.target import ISA

    seen = []

    @template("test_target")
    def record_target(cfg, n: int):
        cfg.define_knob("x", [0, 1])
        seen.append(cfg.target)
        op = matmul(n, n, n, target=cfg.target)
        return op.default_schedule(cfg.target), op

    host = tt.Target.host()
    scalar = tt.Target(ISA.SCALAR, 1, host.arch)
    foreign = Task(record_target, (8,), host).config(1)  # records that task's space, for the host
    seen.clear()
    task = Task(record_target, (8,), scalar)
    task.space
    task.instantiate(1)
    task.instantiate(task.space.get(0))
    task.instantiate(foreign)  # a config of another task's space still sees this task's target
    assert seen == [scalar] * 4
    assert ConfigSpace().target == host and ConfigSpace(scalar).get(0).target == scalar


def test_workload_key_is_stable_and_tasks_pickle():
    import pickle

    t = create_task("conv2d", {"IC": 16, "OC": 32, "H": 12, "W": 12, "K": 3, "pad": 1})
    assert t.workload_key == '["conv2d_nchw_spatial_pack",[1,16,12,12,32,3,1,1]]'
    t2 = pickle.loads(pickle.dumps(t))
    assert t2 == t and t2.workload_key == t.workload_key and len(t2.space) == len(t.space)
    assert t.flops == 2 * 32 * 12 * 12 * 16 * 9


def test_instantiate_without_a_config_is_a_task_error():
    from tensortune.autotvm.task import TaskError

    task = create_task("matmul", {"M": 16, "N": 16, "K": 16})
    with pytest.raises(TaskError, match="no successful config has no best_index"):
        task.instantiate(None)
    with pytest.raises(TaskError, match="config index or a ConfigEntity"):
        task.kernel_inputs("3", task.make_inputs())


@pytest.mark.parametrize("template", ["conv2d_nchw_spatial_pack", "conv2d_nchwc", "conv2d_nchwc_packed"])
def test_conv_template_with_a_kernel_larger_than_the_input_is_a_shape_error(template):
    from tensortune.errors import ShapeError

    with pytest.raises(ShapeError, match="7-wide kernel does not fit an input of 5"):
        create_task("conv2d", {"N": 1, "IC": 16, "OC": 16, "H": 5, "W": 5, "K": 7}, template=template).space


PRIME = [("matmul", (37, 41, 29), "tile_y", 37), ("conv2d_nchw_spatial_pack", (1, 16, 17, 17, 24, 3, 1, 1), "tile_ow", 17),
         ("conv2d_nchwc_packed", (1, 16, 7, 7, 32, 3, 1, 1), "tile_ow", 7),
         ("depthwise_conv2d_nchwc", (1, 24, 13, 13, 3, 1, 1), "tile_ow", 13)]


@pytest.mark.parametrize("name,args,knob,extent", PRIME)
def test_register_tiles_that_do_not_divide_the_extent_are_offered_and_correct(name, args, knob, extent):
    """A prime extent leaves only tiles of 1 and of the whole extent among its divisors; the space also
    holds the tiles in between, and their kernels (padded domain, cropped output) equal numpy."""
    task = Task(TEMPLATES[name], args, tt.Target.host())
    space = task.space
    inner = {e.size[-1] for e in space.knobs[knob].entities}
    assert {2, 3} <= inner  # neither divides the prime extent
    rng = random.Random(zlib.crc32(name.encode()))
    picked = []
    while len(picked) < 3:
        i = space.sample(1, rng)[0]
        if extent % task.config(i)[knob].size[-1]:
            picked.append(i)
    canonical = task.make_inputs(0)
    for index in picked:
        sch, op = task.instantiate(index)
        out = np.full(op.output.shape, np.nan, op.output.dtype.numpy)
        tt.build(sch, op.args)(*task.kernel_inputs(index, canonical), out)
        np.testing.assert_allclose(out, task.reference(canonical, index), rtol=1e-4, atol=1e-4, err_msg=f"{name}{args} config {index}")

"""Templates and default schedules for AVX-512, AVX2 and NEON: sizes come from the target.

The register check reads the lowered loop IR, not the knobs: the local accumulator buffer of every
valid config (its size in vectors of the target) plus one operand vector and one broadcast must fit
the target's vector registers.
"""
from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

import tensortune as tt
from tensortune import ops
from tensortune.autotvm.task import Task
from tensortune.autotvm.templates import TEMPLATES
from tensortune.ir import Allocate, Scope
from tensortune.ops import Part
from tensortune.target import ISA, Target

TARGETS = {"avx512": Target(ISA.AVX512, 2, "x86_64"), "avx2": Target(ISA.AVX2, 2, "x86_64"),
           "neon": Target(ISA.NEON, 2, "aarch64")}
SHAPES = {
    "matmul": (96, 128, 64),
    "conv2d_nchwc": (1, 32, 14, 14, 64, 3, 1, 1),
    "conv2d_nchw_spatial_pack": (1, 32, 28, 28, 64, 3, 1, 1),
    "conv2d_nchwc_packed": (1, 64, 28, 28, 64, 3, 1, 1),
    "depthwise_conv2d_nchwc": (1, 64, 28, 28, 3, 1, 1),
    "conv2d_winograd_nchwc_packed": (1, 64, 14, 14, 64, 3, 1, 1),
    "conv2d_winograd_nchw": (1, 32, 14, 14, 64, 3, 1, 1),
}
SAMPLES = 24


def accumulator_vectors(func, op, lanes: int) -> int:
    """Vector registers of the register tile's accumulators: the local buffer of the operator's accumulator (or of
    its local cache). Other local buffers (a Winograd kernel's transformed tiles) live in memory."""
    acc = op.part(Part.ACCUMULATOR).name
    sizes = [n.buffer.size for n in tt.te.expr.walk(func.body) if isinstance(n, Allocate)
             and n.buffer.scope is Scope.LOCAL and n.buffer.name in (acc, f"{acc}.local")]
    assert sizes, "no local accumulator in the lowered kernel"
    return -(-max(sizes) // lanes)


@pytest.mark.slow
@pytest.mark.parametrize("target_name", list(TARGETS))
@pytest.mark.parametrize("template", list(SHAPES))
def test_every_register_tile_of_the_space_fits_the_targets_registers(template, target_name):
    target = TARGETS[target_name]
    task = Task(TEMPLATES[template], SHAPES[template], target)
    lanes = target.lanes("float32")
    for index in task.space.sample(SAMPLES, random.Random(zlib.crc32(f"{template}{target_name}".encode()))):
        sch, op = task.instantiate(index)
        used = accumulator_vectors(tt.lower(sch, list(op.args)), op, lanes)
        assert used + 2 <= target.vector_registers, (template, target_name, task.config(index))


def test_avx2_spaces_leave_out_the_avx512_register_tiles():
    """An 8 x 32 float32 block (16 AVX2 accumulators) is valid on AVX-512 only."""
    avx512, avx2 = (Task(TEMPLATES["matmul"], (128, 128, 128), TARGETS[n]) for n in ("avx512", "avx2"))

    def has_block(task, rows, cols):
        return any(task.space.is_valid(i) for i in range(len(task.space))
                   if task.config(i)["tile_y"].size[-1] == rows and task.config(i)["tile_x"].size[-1] == cols)

    assert has_block(avx512, 8, 32) and not has_block(avx2, 8, 32)
    assert has_block(avx2, 6, 16)


def test_packed_layout_blocks_are_one_vector_of_the_target():
    for name, block in (("avx512", 16), ("avx2", 8), ("neon", 4)):
        op = ops.conv2d_nchwc_packed(1, 64, 8, 8, 32, 3, pad=1, target=TARGETS[name])
        assert op.inputs[0].shape == (1, 64 // block, 8, 8, block) and op.output.shape[-1] == block
        task = Task(TEMPLATES["conv2d_nchwc_packed"], (1, 64, 8, 8, 32, 3, 1, 1), TARGETS[name])
        assert task.operator.output.shape[-1] == block
    assert ops.conv2d_nchwc_packed(1, 3, 8, 8, 32, 3, target=TARGETS["avx2"]).inputs[0].shape[-1] == 3  # RGB


def runnable_targets() -> list[Target]:
    """The targets whose code this machine runs: the host, and narrower ISAs of its architecture."""
    host = Target.host()
    order = {ISA.AVX512: [ISA.AVX512, ISA.AVX2, ISA.SCALAR], ISA.AVX2: [ISA.AVX2, ISA.SCALAR],
             ISA.NEON: [ISA.NEON, ISA.SCALAR], ISA.SCALAR: [ISA.SCALAR]}[host.isa]
    return [Target(isa, host.num_cores, host.arch) for isa in order]


OPERATORS = {
    "matmul": lambda t: ops.matmul(40, 48, 24, target=t),
    "matmul_prime": lambda t: ops.matmul(37, 41, 19, target=t),
    "dense_bias_relu": lambda t: ops.dense(3, 40, 24, bias=True, relu=True, target=t),
    "conv2d": lambda t: ops.conv2d_nchw(1, 16, 10, 10, 32, 3, pad=1),
    "depthwise": lambda t: ops.depthwise_conv2d_nchw(1, 16, 10, 10, 3, stride=2, pad=1),
    "conv2d_nchwc": lambda t: ops.conv2d_nchwc(1, 16, 10, 10, 32, 3, pad=1, icb=4, target=t),
    "conv2d_spatial_pack": lambda t: ops.conv2d_spatial_pack(1, 16, 10, 10, 32, 3, pad=1, target=t),
    "conv2d_nchwc_packed": lambda t: ops.conv2d_nchwc_packed(1, 16, 10, 10, 32, 3, pad=1, target=t),
    "depthwise_nchwc": lambda t: ops.depthwise_conv2d_nchwc(1, 16, 10, 10, 3, pad=1, target=t),
}


@pytest.mark.parametrize("target", runnable_targets(), ids=str)
@pytest.mark.parametrize("make", list(OPERATORS))
def test_default_schedules_build_and_equal_numpy_on_every_runnable_target(make, target):
    op = OPERATORS[make](target)
    module = tt.build(op.default_schedule(target), op.args, target=target)
    canonical = op.random_inputs(0)
    out = np.full(op.output.shape, np.nan, op.output.dtype.numpy)
    module(*op.prepare(*canonical), out)
    np.testing.assert_allclose(out, op.reference(*canonical), rtol=1e-4, atol=1e-4)
    if target.isa is not ISA.SCALAR and make not in ("conv2d", "depthwise"):  # those vectorize short rows
        assert f"vector_size({target.vector_bytes})" in module.source  # channel blocks of whole vectors
    assert f"vector_size({2 * target.vector_bytes})" not in module.source  # never wider than the target


@pytest.mark.parametrize("target", runnable_targets(), ids=str)
# rows, chunks, K and (2.5 panels) columns that do not divide
@pytest.mark.parametrize("m, n_panels, k", [(13, 5, 30), (16, 9, 64), (7, 2.5, 12)])
def test_the_hand_written_matmul_of_bench_matmul_equals_numpy(target, m, n_panels, k, script):
    bench = script("bench_matmul")
    bm, bn = bench.register_block(target)
    assert bm * 2 <= target.accumulator_budget(2)  # the register block fits the target
    chunk = bench.column_chunk(target, k, bn)
    assert 1 <= chunk <= bench.MAX_CHUNK_PANELS and (chunk == 1 or chunk * k * bn * 4 <= target.caches.l2 // 2)
    n = int(n_panels * bn)
    s, args = bench.schedule_matmul(n, m, k, target)
    module = tt.build(s, args, target=target)
    rng = np.random.default_rng(m)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, np.float32)
    module(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels, lanes, block", [
    (64, 16, 16), (64, 8, 8), (3, 16, 3), (24, 16, 24),  # one vector; all channels when they fit 4 vectors
    (1000, 16, 40), (1000, 8, 8), (100, 8, 20), (100, 16, 50), (997, 16, 1),  # the divisor whose vectors are fullest
])
def test_default_block_of_channels_that_do_not_divide_into_vectors(channels, lanes, block):
    assert ops.default_block(channels, lanes) == block
    assert ops.packed_blocks(channels, 64, lanes) == (block, lanes if 64 % lanes == 0 else 64)


@pytest.mark.parametrize("target_name", list(TARGETS))
def test_a_1000_class_classifier_tunes_on_every_target(target_name):
    """A network's final Gemm runs as a 1x1 convolution with 1000 output channels, which do not divide into 16-float
    vectors: its space must still hold register tiles that fit (on AVX-512 it held none when all 1000 channels
    formed one block), and on a target this machine runs its configs equal numpy."""
    target = TARGETS[target_name]
    task = Task(TEMPLATES["conv2d_nchwc_packed"], (1, 512, 1, 1, 1000, 1, 1, 0), target)
    assert len(task.space) > 0
    runnable = {t.isa for t in runnable_targets()}
    canonical = task.make_inputs(0)
    for index in task.space.sample(4, random.Random(7)):
        sch, op = task.instantiate(index)
        lanes = target.lanes("float32")
        assert accumulator_vectors(tt.lower(sch, list(op.args)), op, lanes) + 2 <= target.vector_registers
        if target.isa in runnable and target.arch == Target.host().arch:
            out = np.full(op.output.shape, np.nan, np.float32)
            tt.build(sch, op.args, target=target)(*task.kernel_inputs(index, canonical), out)
            np.testing.assert_allclose(out, task.reference(canonical, index), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", [t for t in runnable_targets() if t.isa is ISA.AVX2], ids=str)
def test_a_classifiers_register_tile_holds_several_vectors_and_equals_numpy(target):
    """1000 output channels are 125 vectors of 8 on AVX2, and 125 has no divisor from 2 to 4: the packed template's
    register tiles also hold 5 vectors, independent accumulators for a layer of one pixel (one vector alone waits
    on its own FMA chain). Such configs fit the registers and compute the reference."""
    task = Task(TEMPLATES["conv2d_nchwc_packed"], (1, 96, 1, 1, 1000, 1, 1, 0), target)
    wide = [i for i in task.space.sample(400, random.Random(5)) if task.space.get(i)["tile_oc"].size[-1] == 5]
    assert wide, "no register tile of 5 vectors in the space"
    x, w = task.make_inputs()
    for index in wide[:3]:
        s, op = task.instantiate(index)
        module = tt.build(s, list(op.args), target=target, num_threads=2)
        assert accumulator_vectors(tt.lower(s, list(op.args)), op, target.lanes("float32")) == 5
        y = op.empty_output()
        module(*task.kernel_inputs(index, [x, w]), y)
        np.testing.assert_allclose(y, task.reference([x, w], index), rtol=1e-4, atol=1e-4)

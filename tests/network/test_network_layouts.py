"""Channel blocks as knobs: the packed templates' block knobs, old logs read with the default blocks, and the
network's layout chosen per layer from a log (``network.layouts``)."""
from __future__ import annotations

import dataclasses
import random
import time
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensortune as tt
from onnx_models import assert_close, ort_run, rand
from tensortune.network.tasks import Search
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import Record, append_records, load_records, task_records, write_records
from tensortune.autotvm.space import ConfigSpace, SpaceError
from tensortune.autotvm.task import Task
from tensortune.autotvm.templates import TEMPLATES
from tensortune.dtype import DType
from tensortune.operators import Conv, Relayout
from tensortune.passes import plan_layout
from network_logs import CONV_TEMPLATE
from tensortune.network.tasks import extract_tasks
from tensortune.network import layouts, optimized_graph, zoo
from tensortune.network.layouts import choose_blocks, estimate_seconds, layer_times
from tensortune.network.program import build_program
from tensortune.network.refinements import layer_tag, network_fingerprint
from tensortune.network.module import runs_here
from tensortune.network.tuned import TunedKernels, TunedLayoutWarning
from tensortune.target import Target

HOST = tt.Target.host()
LANES = HOST.lanes(DType.float32)


def with_knobs(task: Task, index: int, **values) -> int:
    """``index`` with the named knobs set to the given values."""
    space = task.space
    choices = list(space.index_to_choices(index))
    for k, (name, knob) in enumerate(space.knobs.items()):
        if name in values:
            choices[k] = [e.val for e in knob.entities].index(values[name])
    return space.choices_to_index(choices)


def valid_with(task: Task, rng: random.Random, **values) -> int:
    """A valid config of ``task`` whose named knobs have the given values."""
    for index in task.space.sample(200, rng):
        index = with_knobs(task, index, **values)
        if task.space.is_valid(index):
            return index
    raise AssertionError(f"no valid config of {task} with {values}")


def test_a_knob_added_later_gives_old_configs_its_legacy_value():
    space = ConfigSpace(HOST)
    space.define_knob("a", [1, 2, 3])
    space.define_knob("b", ["x", "y"], legacy="y")
    space.define_knob("c", [True, False])
    assert space.index_of({"a": 2, "c": False}) == space.choices_to_index([1, 1, 1])
    assert space.index_of({"a": 2, "b": "x", "c": False}) == space.choices_to_index([1, 0, 1])
    assert space.index_of({"a": 2}) is None  # c has no legacy value: such a config is not in this space
    assert space.index_of({"a": 2, "c": False, "d": 0}) is None
    with pytest.raises(SpaceError, match="legacy value 'z' is not one of"):
        space.define_knob("e", ["x"], legacy="z")


@pytest.mark.parametrize("template,args,knobs", [
    (CONV_TEMPLATE, (1, 4 * LANES, 9, 9, 2 * LANES, 3, 1, 1), ("block_in", "block_out")),
    ("depthwise_conv2d_nchwc_packed", (1, 2 * LANES, 9, 9, 3, 2, 1), ("block",)),
])
def test_every_block_of_the_packed_templates_equals_numpy(template, args, knobs):
    task = Task(TEMPLATES[template], args, HOST)
    canonical = task.make_inputs(0)
    rng = random.Random(3)
    choices = [[e.val for e in task.space.knobs[k].entities] for k in knobs]
    assert all(c == [LANES, 2 * LANES] for c in choices)
    for values in ([(a, b) for a in choices[0] for b in choices[1]] if len(knobs) == 2 else [(a,) for a in choices[0]]):
        index = valid_with(task, rng, **dict(zip(knobs, values)))
        sch, op = task.instantiate(index)
        data = task.kernel_inputs(index, canonical)[0]
        out = np.full(op.output.shape, np.nan, np.float32)
        tt.build(sch, op.args)(*task.kernel_inputs(index, canonical), out)
        assert data.shape[-1] == values[0] and out.shape[-1] == values[-1]
        np.testing.assert_allclose(out, task.reference(canonical, index), rtol=1e-4, atol=1e-4, err_msg=str(values))


def test_records_written_before_the_block_knobs_read_as_the_default_blocks():
    task = Task(TEMPLATES[CONV_TEMPLATE], (1, 32, 9, 9, 16, 3, 1, 1), HOST)
    index = valid_with(task, random.Random(0), block_in=LANES, block_out=LANES)
    old_config = {k: v for k, v in task.config(index).to_json().items() if not k.startswith("block")}
    rec = Record.from_measurement(MeasureInput(task, 12345), MeasureResult((1e-3,), ErrorKind.NONE, "", 0.1, 0.0))
    rec = dataclasses.replace(rec, config=old_config)
    (found,) = task_records([rec], task)
    assert found.config_index == index


def _record(task, index, seconds):
    return MeasureInput(task, index), MeasureResult((seconds,), ErrorKind.NONE, "", 0.1, time.time())


@pytest.fixture(scope="module")
def resnet():
    return zoo.resnet18(image=32)


@pytest.mark.slow
def test_the_log_chooses_a_layers_block_and_the_network_stays_exact(resnet, tmp_path):
    """A layer whose log is faster with two-vector output blocks writes them; its readers adapt (a convolution
    reads any block, a residual add gets a relayout, counted); the compiled network still equals onnxruntime."""
    g = optimized_graph(resnet, HOST)
    tasks = [t for t in extract_tasks(g, HOST, search=Search.TEMPLATES) if t.task is not None and t.task.name == CONV_TEMPLATE]
    layer = next(t for t in tasks if t.task.args[4] % (2 * LANES) == 0 and t.task.args[5] == 3)
    rng = random.Random(1)
    log = tmp_path / "log.jsonl"
    append_records(log, [_record(layer.task, valid_with(layer.task, rng, block_in=bi, block_out=bo),
                                 1e-3 if bo == 2 * LANES else 2e-3)
                         for bi in (LANES, 2 * LANES) for bo in (LANES, 2 * LANES)])

    records = load_records(log)
    blocked = optimized_graph(resnet, HOST, records=records)
    writes = {n.name: blocked.values[n.outputs[0]].layout.block for n in blocked.nodes if isinstance(n.op, Conv)}
    assert {writes[n] for n in layer.nodes} == {2 * LANES}
    before = optimized_graph(resnet, HOST)
    times = layer_times(before, HOST, records)
    assert estimate_seconds(blocked, times) < estimate_seconds(before, times)

    module = tt.compile(resnet, log=log)
    tuned = {n for k in module.manifest.kernels if k.template for n in k.nodes}
    assert set(layer.nodes) <= tuned  # every node of the layer runs the fast config: its blocks are the plan's
    x = rand((1, 3, 32, 32), 7)
    assert_close(module(x), ort_run(resnet, {"input": x})[0], "resnet18 with a two-vector block layer")


def test_relayouts_cost_what_a_block_saves(resnet, tmp_path, monkeypatch):
    """With copies made very expensive, no block change that needs a relayout is worth it: the plan has no more
    relayouts than the default one, and its estimate never exceeds the default's."""
    g = optimized_graph(resnet, HOST)
    tasks = [t for t in extract_tasks(g, HOST, search=Search.TEMPLATES) if t.task is not None and t.task.name == CONV_TEMPLATE]
    rng = random.Random(2)
    pairs = []
    for t in tasks:
        for bo in [e.val for e in t.task.space.knobs["block_out"].entities]:
            first = t.task.space.knobs["block_in"].entities[0].val  # the default (all 3 channels of an RGB input)
            pairs.append(_record(t.task, valid_with(t.task, rng, block_in=first, block_out=bo),
                                 rng.uniform(1, 2) * 1e-3))
    append_records(tmp_path / "log.jsonl", pairs)
    records = load_records(tmp_path / "log.jsonl")
    default = optimized_graph(resnet, HOST)
    times = layer_times(default, HOST, records)
    for speed in (10e9, 1e3):
        monkeypatch.setattr(layouts, "RELAYOUT_BYTES_PER_S", speed)
        chosen = optimized_graph(resnet, HOST, records=records)
        assert estimate_seconds(chosen, times) <= estimate_seconds(default, times)
        relayouts = sum(isinstance(n.op, Relayout) for n in chosen.nodes)
        if speed == 1e3:
            assert relayouts <= sum(isinstance(n.op, Relayout) for n in default.nodes)


def test_without_a_log_every_layer_keeps_one_vector_blocks(resnet):
    g = optimized_graph(resnet, HOST)
    blocks = {g.values[n.outputs[0]].layout.block for n in g.nodes if isinstance(n.op, Conv)}
    assert blocks == {LANES}
    assert choose_blocks(_pre_layout(resnet), HOST, []) == {}


def _pre_layout(model):
    from tensortune.frontend import import_onnx
    from tensortune.passes import graph_passes

    g = import_onnx(model)
    for name, fn in graph_passes(HOST):
        if name == "plan_layout":
            return g
        g = fn(g)
    raise AssertionError("no plan_layout pass")


@pytest.mark.slow
def test_nodes_of_one_workload_reading_different_blocks_are_refined_and_compiled_apart(resnet, tmp_path):
    """A workload whose nodes get inputs of different blocks (the first reads the stem's two-vector output, the
    others one-vector outputs) is two layers to ``refine``, each timing only configs its nodes can run; compile
    then runs each layer's choice at every node of it, none left out for its blocks, and the network equals
    onnxruntime."""
    g = optimized_graph(resnet, HOST)
    tasks = [t for t in extract_tasks(g, HOST, search=Search.TEMPLATES) if t.task is not None and t.task.name == CONV_TEMPLATE]
    stem = next(t for t in tasks if t.task.args[1] == 3)
    repeated = next(t for t in tasks if len(t.nodes) > 1 and t.task.args[1] == stem.task.args[4])
    rng = random.Random(4)
    first = stem.task.space.knobs["block_in"].entities[0].val
    pairs = [_record(stem.task, valid_with(stem.task, rng, block_in=first, block_out=bo), seconds)
             for bo, seconds in ((2 * LANES, 1e-3), (LANES, 3e-3))]
    pairs += [_record(repeated.task, valid_with(repeated.task, rng, block_in=bi, block_out=LANES), 1e-3)
              for bi in (LANES, 2 * LANES) for _ in range(2)]
    log = tmp_path / "log.jsonl"
    append_records(log, pairs)

    planned = optimized_graph(resnet, HOST, records=load_records(log))
    reads = {planned.values[n.inputs[0]].layout.block for n in planned.nodes if n.name in repeated.nodes}
    assert reads == {LANES, 2 * LANES}  # the premise: one workload, two input blocks

    result = tt.network.refine(resnet, log, top_k=2, rounds=1, runs=1, check=False)
    mine = [layer for layer in result.layers if layer.workload == repeated.workload]
    assert {layer.blocks for layer in mine} == {(LANES, LANES), (2 * LANES, LANES)}
    choose = TunedKernels(log, HOST)
    with warnings.catch_warnings():
        warnings.simplefilter("error", TunedLayoutWarning)
        build_program(planned, HOST, choose)
    for layer in mine:
        chosen = layer.candidates[layer.chosen]
        for n in layer.nodes:
            assert (n in choose.kept_default) if chosen.is_default else choose.applied[n] == (chosen.task.name,
                                                                                               chosen.index)
    module = tt.compile(resnet, log=log)
    x = rand((1, 3, 32, 32), 8)
    assert_close(module(x), ort_run(resnet, {"input": x})[0], "resnet18, one workload read in two blocks")

    # each layer's in-network timings are its own: the untuned kernel timed fastest in the other layer (its
    # records carry the same task and config) does not replace this layer's tuned choice
    fp = network_fingerprint(planned, HOST)
    wide = {c.index: c for layer in mine if layer.blocks == (2 * LANES, LANES) for c in layer.candidates}
    one = next(layer for layer in mine if layer.blocks == (LANES, LANES))
    tuned = next(c for c in one.candidates if not c.is_default)
    default = next(c for c in one.candidates if c.is_default)
    later = time.time() + 1
    inside = [(tuned, (LANES, LANES), 2e-4), (default, (LANES, LANES), 3e-4), (default, (2 * LANES, LANES), 1e-4)]
    inside += [(c, (2 * LANES, LANES), 5e-4) for c in wide.values() if not c.is_default]
    write_records(log, [dataclasses.replace(Record.from_measurement(MeasureInput(c.task, c.index), MeasureResult(
        (s,), ErrorKind.NONE, "", 0.1, later)), network=layer_tag(fp, blocks)) for c, blocks, s in inside])
    choose = TunedKernels(log, HOST)
    build_program(planned, HOST, choose)
    assert all(choose.applied[n] == (tuned.task.name, tuned.index) for n in one.nodes)
    assert all(n in choose.kept_default for layer in mine if layer is not one for n in layer.nodes)


def test_the_untuned_kernel_counts_for_any_blocks_and_a_record_without_timings_for_none(resnet):
    """The planner's estimate: the untuned kernel's record holds whatever blocks the plan gives the layer (its kernel
    runs any); a successful record without timings (infinite) never makes the estimate infinite."""
    from tensortune.operators.conv_tasks import default_task

    g = optimized_graph(resnet, HOST)
    t = next(t for t in extract_tasks(g, HOST, search=Search.TEMPLATES) if t.task is not None and t.task.name == CONV_TEMPLATE
             and t.task.args[1] % LANES == 0 and t.task.args[4] % (2 * LANES) == 0)
    wide = valid_with(t.task, random.Random(5), block_in=LANES, block_out=2 * LANES)
    records = [Record.from_measurement(MeasureInput(default_task(t.task), 0),
                                       MeasureResult((1e-3,), ErrorKind.NONE, "", 0.1, 1.0)),
               Record.from_measurement(MeasureInput(t.task, wide), MeasureResult((), ErrorKind.NONE, "", 0.1, 1.0))]
    times = layer_times(g, HOST, records)
    assert all(times[n] == {None: 1e-3} for n in t.nodes)
    assert estimate_seconds(g, times) - estimate_seconds(g, {}) == pytest.approx(len(t.nodes) * 1e-3)
    blocked = plan_layout(_pre_layout(resnet), HOST, {n: 2 * LANES for n in t.nodes})
    assert estimate_seconds(blocked, times) - estimate_seconds(blocked, {}) == pytest.approx(len(t.nodes) * 1e-3)


@pytest.mark.slow
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(channels=st.sampled_from([1, 3, 5, 8, 16, 24]), size=st.integers(5, 19), kernel=st.sampled_from([1, 2, 5, 7]),
       stride=st.integers(1, 2), pad=st.integers(1, 3), isa=st.sampled_from(["avx2", "host"]),
       relu=st.booleans())
def test_a_padded_convolution_blocks_the_plain_input_as_it_pads(channels, size, kernel, stride, pad, isa, relu):
    """A network's image input arrives plain (NCHW) and its first convolution wants it blocked: the convolution's
    padding stage reads the plain input and blocks it as it copies, and no relayout runs; the output equals
    onnxruntime's, for any channel count (one block or several), kernel, stride and padding."""
    from onnx_models import model, node

    size = max(size, kernel)
    w = rand((16, channels, kernel, kernel), seed=1)
    nodes = [node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[kernel, kernel], strides=[stride, stride],
                  pads=[pad] * 4)]
    nodes += [node("Relu", ["c"], ["y"])] if relu else [node("Identity", ["c"], ["y"])]
    m = model(nodes, {"x": (1, channels, size, size)}, ["y"], {"w": w, "b": rand((16,), seed=2)})
    target = Target.host() if isa == "host" else Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
    if not runs_here(target):  # AVX2 code on a host without AVX2 (an Arm machine): the host's code only
        target = Target.host()
    module = nw_compile(m, target)
    assert not any(n.startswith("relayout_x_") for n in module.manifest.call_order), module.manifest.call_order
    x = rand((1, channels, size, size), seed=3)
    assert_close(module(x), ort_run(m, {"x": x})[0])


def test_a_winograd_first_layer_keeps_its_relayout():
    """A 3x3, stride-1 first layer whose default kernel is Winograd (its input transform reads blocked data) keeps
    the relayout, and the network stays exact."""
    from onnx_models import model, node
    from tensortune.operators.conv_kernels import default_winograd_tile

    m = model([node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], {"x": (1, 16, 28, 28)},
              ["y"], {"w": rand((32, 16, 3, 3), seed=1)})
    target = Target.host()
    module = nw_compile(m, target)
    g = optimized_graph(m, target)
    conv = next(n for n in g.nodes if isinstance(n.op, Conv))
    winograd = default_winograd_tile(g, conv, target, target.lanes("float32")) is not None
    assert any(n.startswith("relayout_x_") for n in module.manifest.call_order) == winograd
    x = rand((1, 16, 28, 28), seed=3)
    assert_close(module(x), ort_run(m, {"x": x})[0])


def nw_compile(m, target):
    from tensortune.network import compile as compile_network

    return compile_network(m, target)

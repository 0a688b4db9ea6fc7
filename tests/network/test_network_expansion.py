"""A 1x1 expansion fused into the depthwise convolution that reads it (``operators.expansion``: the rule that makes
the fused node, applied by ``passes.fuse_producers``, and its kernel): exact against onnxruntime for random shapes
and tilings, fused only where nothing else reads the expanded tensor, and refined and profiled as one call."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from network_logs import timed, tuned_layers, valid_configs
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.network.tasks import Search
from tensortune.autotvm.record import append_records
from tensortune.network import optimized_graph
from tensortune.network.compile_model import load_program
from tensortune.network.module import runs_here
from tensortune.operators import ExpandDepthwise, expansion
from tensortune.operators.conv_kernels import ConvShape
from tensortune.operators.expansion import ExpansionPlan, expansion_plan
from tensortune.network.program import build_program
from tensortune.target import Target

HOST = Target.host()
AVX2 = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")


def block(cin: int, cmid: int, size: int, kernel: int = 3, stride: int = 1, pad: int = 1, act: str = "Clip",
          bias: bool = True, extra_reader: bool = False, seed: int = 0, stem: bool = False, dilation: int = 1,
          batch: int = 1):
    """x -> 1x1 conv (cin -> cmid) -> act -> depthwise conv (kernel, stride, pad) -> act -> y (and, with
    ``extra_reader``, the expanded tensor also read by a second output; with ``stem``, x made by a 3x3 convolution
    of ``cin`` channels first)."""
    inits = {"w1": rand((cmid, cin, 1, 1), seed), "w2": rand((cmid, 1, kernel, kernel), seed + 1)}
    b1, b2 = (["b1"], ["b2"]) if bias else ([], [])
    if bias:
        inits |= {"b1": rand((cmid,), seed + 2), "b2": rand((cmid,), seed + 3)}
    bounds = ["lo", "hi"] if act == "Clip" else []  # ReLU6, as MobileNetV2 has it
    inits |= {"lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)} if bounds else {}
    nodes = [node("Conv", ["x", "w1", *b1], ["e"], kernel_shape=[1, 1]), node(act, ["e", *bounds], ["ea"]),
             node("Conv", ["ea", "w2", *b2], ["d"], kernel_shape=[kernel, kernel], strides=[stride, stride],
                  pads=[pad] * 4, group=cmid, dilations=[dilation, dilation]),
             node(act, ["d", *bounds], ["y"])]
    outputs = ["y"]
    if stem:
        nodes.insert(0, node("Conv", ["image", "w0"], ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        inits["w0"] = rand((cin, cin, 3, 3), seed + 4)
        return model(nodes, {"image": (1, cin, size, size)}, outputs, inits, opset=11)
    if extra_reader:
        nodes.append(node("Relu", ["ea"], ["z"]))
        outputs.append("z")
    return model(nodes, {"x": (batch, cin, size, size)}, outputs, inits, opset=11)


@pytest.fixture
def fuse_any_size(monkeypatch):
    monkeypatch.setattr(expansion, "MIN_EXPANDED_BYTES", 0)


def _target(isa: str) -> Target:
    target = HOST if isa == "host" else AVX2
    return target if runs_here(target) else HOST  # AVX2 code on a host without AVX2 (Arm): the host's code only


def _pair(m, target):
    """The optimized graph and its fused nodes: depthwise node name -> expansion node name."""
    g = optimized_graph(m, target)
    return g, {n.name: n.op.expand_node for n in g.nodes if isinstance(n.op, ExpandDepthwise)}


def compile_network(m, target):
    """``compile`` without the network caches (the tests change the fusion rule, which no cache key holds)."""
    return load_program(build_program(optimized_graph(m, target), target, use_cache=False), target)


@pytest.mark.slow
@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(cin=st.sampled_from([3, 8, 16, 24]), mult=st.sampled_from([1, 2, 3, 6]), size=st.integers(4, 23),
       kernel=st.sampled_from([3, 5]), stride=st.integers(1, 2), pad=st.integers(0, 2),
       act=st.sampled_from(["Clip", "Relu"]), bias=st.booleans(), isa=st.sampled_from(["avx2", "host"]),
       dilation=st.sampled_from([1, 1, 2]))
def test_the_fused_kernel_equals_onnxruntime(fuse_any_size, cin, mult, size, kernel, stride, pad, act, bias, isa,
                                             dilation):
    """Any expansion and depthwise shape (kernel, stride, padding, dilation, with or without bias, Clip or ReLU):
    one kernel computes both, the expansion's own kernel does not run, and the output equals onnxruntime's."""
    target = _target(isa)
    lanes = target.lanes("float32")
    size = max(size, (kernel - 1) * dilation + 1 - 2 * pad)
    m = block(cin, lanes * mult, size, kernel, stride, pad, act, bias, dilation=dilation)
    g, fused = _pair(m, target)
    assert len(fused) == 1
    (dw, pw), = fused.items()
    module = compile_network(m, target)
    kinds = {k.kind: k.nodes for k in module.manifest.kernels}
    assert kinds["expand_depthwise"] == (dw,)
    assert pw not in module.manifest.call_order
    x = rand((1, cin, size, size), seed=7)
    assert_close(module(x), ort_run(m, {"x": x})[0])


def test_a_batch_of_images_is_exact(fuse_any_size):
    """Two images: the bands of both run in parallel (batch and bands fused), and each equals onnxruntime's."""
    target = _target("avx2")
    m = block(8, 2 * target.lanes("float32"), 9, stride=2, batch=2)
    module = compile_network(m, target)
    assert any(k.kind == "expand_depthwise" for k in module.manifest.kernels)
    x = rand((2, 8, 9, 9), seed=6)
    assert_close(module(x), ort_run(m, {"x": x})[0])


@pytest.mark.slow
@settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(rows=st.integers(1, 9), group=st.integers(1, 4), tile=st.integers(1, 9), dw_tile=st.integers(1, 9),
       stride=st.integers(1, 2), size=st.integers(6, 20), mult=st.sampled_from([2, 3, 4]))
def test_any_tiling_of_the_fused_kernel_is_exact(fuse_any_size, monkeypatch, rows, group, tile, dw_tile, stride, size,
                                                 mult):
    """Bands, channel groups and register tiles that divide nothing (guards at the edges) compute the same
    network."""
    target = _target("avx2")
    lanes = target.lanes("float32")
    m = block(8, lanes * mult, size, 3, stride, 1)
    monkeypatch.setattr(expansion, "expansion_plan", lambda *_: ExpansionPlan(rows, group, tile, dw_tile))
    g, fused = _pair(m, target)
    module = compile_network(m, target)
    assert any(k.kind == "expand_depthwise" for k in module.manifest.kernels)
    x = rand((1, 8, size, size), seed=3)
    assert_close(module(x), ort_run(m, {"x": x})[0])


def test_an_expanded_tensor_read_elsewhere_or_small_is_not_fused(monkeypatch):
    """The expansion stays a kernel of its own where another node reads its output, where it is a graph output,
    and where its output is smaller than ``MIN_EXPANDED_BYTES`` (it stays in the cache between the two kernels);
    the network is exact either way."""
    lanes = AVX2.lanes("float32")
    target = _target("avx2")
    shared = block(8, 2 * lanes, 12, extra_reader=True)
    g, fused = _pair(shared, target)
    assert fused == {}
    module = compile_network(shared, target)
    assert all(k.kind != "expand_depthwise" for k in module.manifest.kernels)
    x = rand((1, 8, 12, 12), seed=5)
    for got, want in zip(module(x), ort_run(shared, {"x": x})):
        assert_close(got, want)

    small = block(8, 2 * lanes, 12)
    g, fused = _pair(small, target)
    assert fused == {}  # 16 channels of 12x12: far below the threshold
    monkeypatch.setattr(expansion, "MIN_EXPANDED_BYTES", 0)
    g, fused = _pair(small, target)
    assert len(fused) == 1 and not any(n.name in fused.values() for n in g.nodes)  # the expansion's node is gone


def test_the_plan_fits_the_stack_and_the_registers():
    """The default tiling: the expanded buffer of a band fits the stack limit, the 1x1 tile's accumulators and
    operands fit the vector registers, the depthwise tile divides the output width, the bands divide the rows and
    are shared evenly by the threads where the rows allow (MobileNetV2's three fused pairs)."""
    from tensortune.codegen.c import STACK_LIMIT_BYTES

    for target in (AVX2, Target.parse("c -isa=avx512 -cores=2 -arch=x86_64")):
        lanes = target.lanes("float32")
        for c, h, stride in ((96, 112, 2), (144, 56, 1), (144, 56, 2)):
            oh = (h - 1) // stride + 1
            dw = ConvShape(1, c, h, h, c, 3, 3, (stride, stride), (1, 1, 1, 1), (1, 1), c, oh, oh)
            cb = lanes if c % lanes == 0 else lanes // 2
            plan = expansion_plan(dw, cb, target)
            band = (plan.rows - 1) * stride + 3
            width = -(-((oh - 1) * stride + 3) // plan.tile) * plan.tile
            assert plan.group * cb * band * width * 4 <= STACK_LIMIT_BYTES
            vectors = plan.group * (cb // lanes)
            assert plan.tile * vectors + vectors + 1 <= target.vector_registers
            assert oh % plan.dw_tile == 0 and oh % plan.rows == 0 and (oh // plan.rows) % 2 == 0


def test_refine_and_profile_treat_the_fused_pair_as_one_call(fuse_any_size, tmp_path):
    """``refine`` leaves the fused nodes out of its layers (no config of theirs runs) and times the convolution
    before them with the fused call as its reader; the profile names the fused call, with both nodes' FLOPs."""
    from tensortune.network import refine
    from tensortune.network.profiling import profile_network
    from tensortune.network.refine import _readers

    target = _target("avx2")
    m = block(8, 2 * target.lanes("float32"), 12, stem=True)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    g, layers = tuned_layers(m, target)
    log = tmp_path / "log.jsonl"
    append_records(log, [timed(t.task, i, 1e-4 * (k + 1)) for t, n in layers
                         for k, i in enumerate(valid_configs(g, n, t.task, 2))])
    fused = next(n for n in g.nodes if isinstance(n.op, ExpandDepthwise))
    sub, (pw, dw) = fused.op.unfused(g, fused)
    stem = next(n for n in g.nodes if pw.inputs[0] in n.outputs)  # the 3x3 convolution
    result = refine(path, log, target, rounds=1, runs=1, check=False)
    assert [layer.nodes for layer in result.layers] == [(stem.name,)]
    assert _readers(g)[stem.name] == [dw.name]  # the stem's candidates are charged the fused call
    prof = profile_network(path, log, target, rounds=1, repeat=1)
    fused_calls = [c for c in prof.calls if c.kind == "expand_depthwise"]
    assert [c.node for c in fused_calls] == [dw.name] and fused_calls[0].kernel == "1x1 expansion fused in"
    assert pw.name not in [c.node for c in prof.calls]
    assert fused_calls[0].flops == ConvShape.of(sub, pw).flops + ConvShape.of(sub, dw).flops


def test_build_program_without_fusion_runs_both_kernels(monkeypatch, fuse_any_size):
    """Turning the fusion off (as ``benchmarks/network_ab.py --change expansion`` does) gives the two kernels
    back, and both programs compute the same network."""
    target = _target("avx2")
    m = block(8, 2 * target.lanes("float32"), 10)
    fused_calls = len(build_program(optimized_graph(m, target), target, use_cache=False).calls)
    monkeypatch.setattr(expansion, "fusable_expansion", lambda *_: None)
    assert len(build_program(optimized_graph(m, target), target, use_cache=False).calls) == fused_calls + 1
    x = rand((1, 8, 10, 10), seed=1)
    assert_close(compile_network(m, target)(x), ort_run(m, {"x": x})[0])


def test_the_fused_nodes_are_not_tuned(fuse_any_size, tmp_path, capsys):
    """``tune-model``'s tasks (``network_tasks``) leave out the nodes of a fused pair (their kernel runs no config
    of theirs), keep every other node, ``tensortune tasks`` names the pair and ``compile`` counts its call."""
    import json

    from tensortune import cli
    from tensortune.network.tuning import network_tasks

    target = _target("avx2")
    m = block(8, 2 * target.lanes("float32"), 12, stem=True)
    g, fused = _pair(m, target)
    (dw, pw), = fused.items()
    kept = {n for t in network_tasks(m, target, search=Search.TEMPLATES) for n in t.nodes}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(expansion, "fusable_expansion", lambda *_: None)
        everything = {n for t in network_tasks(m, target, search=Search.TEMPLATES) for n in t.nodes}
    assert {dw, pw} <= everything and kept == everything - {dw, pw}
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    assert cli.main(["tasks", str(path), "--target", str(target), "--json", "--search", "templates"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["fused"] == [{"expansion": pw, "depthwise": dw}]
    assert {n for t in report["tasks"] for n in t["nodes"]} == kept
    assert cli.main(["compile", str(path), "-o", str(tmp_path / "m.tt"), "--target", str(target), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["fused_calls"] == 1


def test_the_fused_kernel_equals_the_two_kernels_on_neon(fuse_any_size):
    """ARM NEON code (cross-compiled, run under qemu on other machines): the fused kernel's output equals the
    expansion's kernel followed by the depthwise one's, on the same blocked input."""
    import tensortune as tt
    from neon_tools import MISSING, NEON

    if MISSING:
        pytest.skip(f"running aarch64 kernels here needs {', '.join(MISSING)}")
    m = block(8, 3 * NEON.lanes("float32"), 11, stride=2)
    g = optimized_graph(m, NEON)
    fused = next(n for n in g.nodes if isinstance(n.op, ExpandDepthwise))
    g, (pw, dw) = fused.op.unfused(g, fused)
    rng = np.random.default_rng(4)

    def run(kd, data):
        arrays = [data if arg.value is not None else arg.const for arg in kd.args[:-1]]
        out = np.zeros(kd.tensors[-1].shape, "float32")
        tt.build(kd.schedule, list(kd.tensors), target=NEON)(*arrays, out)
        return out

    one = expansion.expand_depthwise_kernel(g, pw, dw, NEON)
    x = rng.standard_normal(one.tensors[0].shape).astype("float32")
    two = run(dw.op.kernel(g, dw, NEON), run(pw.op.kernel(g, pw, NEON), x))
    assert np.allclose(run(one, x), two, rtol=1e-4, atol=1e-4)

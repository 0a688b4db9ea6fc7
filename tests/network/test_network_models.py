"""Whole networks compiled into one module equal onnxruntime: ResNet-18 and MobileNetV2 (full topologies, small
images), SqueezeNet-, ShuffleNet-, Inception- and VGG-style nets, with weights as initializers or Constant nodes.
The module runs, times, exports and loads; wrong inputs are typed errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tensortune as tt
import tensortune.network as nw
from onnx_models import assert_close, ort_run, rand
from tensortune.errors import ArgumentError
from tensortune.network import zoo
from tensortune.operators.conv_kernels import default_winograd_tile
from tensortune.network.plan import Place

IMAGE = {"resnet18": 32, "mobilenet_v2": 32, "squeezenet": 48, "shufflenet": 32, "inception": 32, "vgg": 32}
CONSTANT_NODES = {"mobilenet_v2", "inception"}


@pytest.fixture(scope="module")
def compiled():
    """Each zoo network compiled once for this module's tests: name -> (model, input, module)."""
    out = {}
    for name, fn in zoo.MODELS.items():
        weights = zoo.Weights.CONSTANT_NODES if name in CONSTANT_NODES else zoo.Weights.INITIALIZERS
        m = fn(image=IMAGE[name], weights=weights)
        out[name] = (m, rand((1, 3, IMAGE[name], IMAGE[name]), 7), nw.compile(m))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_network_equals_onnxruntime(compiled, name):
    m, x, module = compiled[name]
    (expected,) = ort_run(m, {"input": x})
    assert_close(module(x), expected, name)


def test_resnet18_is_fused_and_blocked(compiled):
    _, _, module = compiled["resnet18"]
    kinds = [k.kind for k in module.manifest.kernels for _ in k.nodes]
    assert kinds.count("conv2d") == 20 and "add" not in kinds and "relu" not in kinds
    assert "pool" in kinds and kinds.count("dense") == 1
    assert "network_run(" in module.source and "k0_" in module.source


def test_mobilenet_uses_depthwise_kernels(compiled):
    kinds = [k.kind for k in compiled["mobilenet_v2"][2].manifest.kernels]
    assert "depthwise_conv2d" in kinds


def test_workspace_is_shared_between_layers(compiled):
    manifest = compiled["resnet18"][2].manifest
    assert manifest.workspace_bytes < manifest.buffers_bytes / 3


def test_run_by_name_and_batch(compiled):
    m = zoo.squeezenet(batch=2, image=48)
    module = nw.compile(m)
    x = rand((2, 3, 48, 48), 3)
    out = module.run({"input": x})
    assert list(out) == [m.graph.output[0].name]
    assert_close(out[m.graph.output[0].name], ort_run(m, {"input": x})[0])


def test_wrong_inputs_are_typed_errors(compiled):
    _, x, module = compiled["vgg"]
    with pytest.raises(ArgumentError, match=r"must have shape \(1, 3, 32, 32\)"):
        module(x[:, :, :16])
    with pytest.raises(ArgumentError, match="dtype float32"):
        module(x.astype(np.float64))
    with pytest.raises(ArgumentError, match="missing"):
        module.run({})
    with pytest.raises(ArgumentError, match="takes 1 input"):
        module(x, x)
    module(np.asfortranarray(x))  # not contiguous: copied, not refused


def test_time_evaluator_and_profile(compiled):
    _, x, module = compiled["resnet18"]
    t = module.time_evaluator(number=2, repeat=2)(x)
    assert len(t.results) == 2 and t.median > 0
    prof = module.profile(x, repeat=1)
    assert len(prof) == module.manifest.calls and all(p["seconds"] >= 0 for p in prof)


def test_export_and_load_without_recompiling(compiled, tmp_path, monkeypatch):
    m, x, module = compiled["shufflenet"]
    path = module.export(tmp_path / "net.tt")
    meta = json.loads((path / "manifest.json").read_text())
    assert meta["format"] == 1 and meta["inputs"][0]["shape"] == [1, 3, 32, 32]
    import tensortune.runtime.compiler as compiler

    def no_compiler(*a, **k):
        raise AssertionError("load must not compile")

    monkeypatch.setattr(compiler, "compile_shared", no_compiler)
    loaded = nw.load(path)
    np.testing.assert_array_equal(loaded(x), module(x))
    assert tt.load is nw.load and tt.compile is nw.compile


def test_load_rejects_damaged_exports(compiled, tmp_path):
    _, _, module = compiled["vgg"]
    path = module.export(tmp_path / "vgg.tt")
    with open(path / "constants.bin", "r+b") as f:
        f.write(b"\x00\x01\x02")
    with pytest.raises(nw.NetworkLoadError, match="checksum"):
        nw.load(path)
    with pytest.raises(nw.NetworkLoadError, match="not an exported"):
        nw.load(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(nw.ExportError, match="not an exported network"):
        module.export(tmp_path / "file")
    with pytest.raises(nw.ExportError, match="does not exist"):
        module.export(tmp_path / "no" / "such" / "dir")


def test_outputs_written_in_place_or_copied():
    from onnx_cases import CASES

    m, feeds = dict((c.id, c) for c in CASES)["constant_output_and_passthrough"].build()
    module = nw.compile(m)
    out = module.run(feeds)
    np.testing.assert_array_equal(out["y"], feeds["x"])
    assert [k.kind for k in module.manifest.kernels] == ["copy", "copy"]
    m, feeds = dict((c.id, c) for c in CASES)["conv3x3_pad1"].build()
    program_places = nw.compile(m)
    g = nw.optimized_graph(m, tt.Target.host())
    conv = next(n for n in g.nodes if n.op.kind == "Conv")
    winograd = default_winograd_tile(g, conv, tt.Target.host(), tt.Target.host().lanes("float32")) is not None
    # conv (its padding stage blocks the plain input, unless Winograd's transform reads it relaid out first), then
    # the relayout out straight into the output
    assert program_places.manifest.calls == (3 if winograd else 2)
    assert Place.OUTPUT.value == "output"


def test_second_compile_skips_lowering(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORTUNE_CACHE_DIR", str(tmp_path))
    m = zoo.squeezenet(image=32)
    first = nw.compile(m)
    import tensortune.network.program as program

    def no_lowering(*a, **k):
        raise AssertionError("a cached program must not be lowered again")

    monkeypatch.setattr(program, "lower", no_lowering)
    second = nw.compile(m)
    x = rand((1, 3, 32, 32), 2)
    np.testing.assert_array_equal(first(x), second(x))
    assert second.source == first.source
    with pytest.raises(AssertionError, match="lowered again"):
        nw.compile(zoo.squeezenet(image=48))  # other shapes: other kernels, not in the cache


def test_a_model_file_compiled_before_is_loaded_from_the_cache(monkeypatch, tmp_path):
    import onnx

    monkeypatch.setenv("TENSORTUNE_CACHE_DIR", str(tmp_path / "cache"))
    onnx.save(zoo.vgg(image=32), tmp_path / "vgg.onnx")
    first = nw.compile(tmp_path / "vgg.onnx")
    import tensortune.network.compile_model as compile_module

    def no_build(*a, **k):
        raise AssertionError("a cached network must not be built again")

    monkeypatch.setattr(compile_module, "build_program", no_build)
    second = nw.compile(tmp_path / "vgg.onnx")
    x = rand((1, 3, 32, 32), 4)
    np.testing.assert_array_equal(first(x), second(x))
    with pytest.raises(AssertionError, match="built again"):
        nw.compile(tmp_path / "vgg.onnx", shapes={"input": (1, 3, 32, 32)})  # other arguments: another key


def test_a_target_kind_without_a_network_backend_is_refused_with_what_is_missing():
    """A GPU target compiles single operators; a whole network for it is refused before anything is lowered,
    naming the target and what the network compiler serves."""
    from tensortune.graph import NetworkCompileError

    cuda = tt.Target.parse("cuda -arch=sm_90")
    with pytest.raises(NetworkCompileError, match="cannot be compiled for 'cuda -arch=sm_90' yet.*CPU targets \\(c\\)"):
        nw.compile(zoo.vgg(image=32), target=cuda)


def test_a_network_module_is_a_runtime_module():
    """The network's module is built on the runtime's module base: its argument specs are the inputs then the
    outputs, and the base's ``time_evaluator`` times whole runs."""
    from tensortune.runtime.module import BaseModule

    module = nw.compile(zoo.vgg(image=32))
    assert isinstance(module, BaseModule)
    assert module.args == module.inputs + module.outputs and module.entry == "network_run"
    t = module.time_evaluator(number=2, repeat=2)(rand((1, 3, 32, 32), 1))
    assert len(t.results) == 2 and all(r > 0 for r in t.results)

"""The networks users export from PyTorch (``tests/model_zoo.py``, small configurations) compile with tensortune and
equal onnxruntime within a float32 relative error of 1e-3: CNNs of torchvision's families, segmentation nets, the
ONNX model zoo's opset-9 nets with Dropout masks, recurrent language models, the audio and text transformers and
ViT of ``transformers`` (BERT and DistilBERT with a padding mask, GPT-2's causal mask);
exported by the legacy exporter at opset 17 (9 for the old zoo's), a few also by the dynamo exporter (opsets 18-20);
dynamic dimensions compiled at the shapes given."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("torch")

import model_zoo  # noqa: E402
import tensortune.network as nw  # noqa: E402
from onnx_models import ort_run  # noqa: E402

RELATIVE = 1e-3
NEEDS_TRANSFORMERS = {"whisper_encoder", "wav2vec2", "bert", "distilbert", "gpt2", "vit"}
SLOW = {"googlenet", "deeplabv3", "whisper_encoder", "mobilenet_v3", "inception_v3", "unet", "squeezenet",
        "efficientnet_b0", "shufflenet_v2", "densenet121", "resnext50"}  # 2.5 s or more each on 2 busy cores


def assert_relative(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Same shape, and the largest error at most ``RELATIVE`` of the largest expected magnitude."""
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    scale = float(np.max(np.abs(expected)))
    assert scale > 0, f"{what}: the expected output is all zeros, which tests nothing"
    error = float(np.max(np.abs(actual.astype(np.float64) - expected)))
    assert error <= RELATIVE * scale, f"{what}: largest error {error:.3g} is {error / scale:.2g} of {scale:.3g}"


def check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> nw.NetworkModule:
    """``model`` compiled (at the feeds' shapes where its inputs are dynamic) equals onnxruntime on ``feeds``."""
    expected = ort_run(model, feeds)
    module = nw.compile(model, shapes=model_zoo.static_shapes(model, feeds))
    got = module.run(feeds)
    for out, want in zip(model.graph.output, expected):
        assert_relative(got[out.name], want, out.name)
    return module


def _param(name: str):
    marks = [pytest.mark.slow] if name in SLOW else []
    return pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", [_param(n) for n in model_zoo.ZOO])
def test_network_equals_onnxruntime(name):
    if name in NEEDS_TRANSFORMERS:
        pytest.importorskip("transformers")
    check(*model_zoo.export(name))


# the dynamo exporter's opsets, and what each brings: LayerNormalization and Gelu (20), Resize (19), IsNaN with
# Where in masked attention (18), a dynamic number of time steps
DYNAMO = {"convnext": 20, "deeplabv3": 19, "mobilenet_v3": 18, "wav2vec2": 18, "lstm_lm": 18}


@pytest.mark.slow
@pytest.mark.parametrize("name, opset", sorted(DYNAMO.items()))
def test_dynamo_export_equals_onnxruntime(name, opset):
    if name in NEEDS_TRANSFORMERS:
        pytest.importorskip("transformers")
    z = model_zoo.ZOO[name]
    module, inputs = z.build(True)
    model = model_zoo.to_onnx(module, inputs, opset, True, z.input_names, z.output_names, z.dynamic_axes or None)
    assert model.opset_import[0].version == opset
    check(model, {n: x.numpy() for n, x in zip(z.input_names, inputs)})


def test_dynamic_batch_compiles_at_the_given_batch():
    """ResNet-50 exported with a dynamic batch: compiled for batch 2 by ``shapes=``."""
    model, feeds = model_zoo.export("resnet50")
    assert model_zoo.static_shapes(model, feeds) == {"input": (1, 3, 32, 32)}
    x = np.concatenate([feeds["input"], -feeds["input"]])
    module = check(model, {"input": x})
    assert module.manifest.inputs[0].shape == (2, 3, 32, 32)


def test_old_zoo_nets_have_dropout_masks_nothing_reads():
    """The opset-9 nets as the ONNX model zoo's files have them: Dropout nodes with a mask output, read by none."""
    model, _ = model_zoo.export("alexnet")
    assert model.opset_import[0].version == 9
    dropouts = [n for n in model.graph.node if n.op_type == "Dropout"]
    read = {i for n in model.graph.node for i in n.input} | {o.name for o in model.graph.output}
    assert len(dropouts) == 2 and all(len(n.output) == 2 and n.output[1] not in read for n in dropouts)


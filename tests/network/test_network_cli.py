"""``tensortune compile / run / tasks``: the whole-network commands, and their one-line errors (exit status 2)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnx_models import assert_close, ort_run
from tensortune.cli import main
from tensortune.network import zoo


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    m = zoo.vgg(image=32, classes=1000)
    onnx.save(m, d / "vgg.onnx")
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 32, 32)).astype(np.float32)
    np.save(d / "x.npy", x)
    dyn = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                       ["N", 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(dyn, d / "dyn.onnx")
    return d, m, x


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_compile_run_and_tasks(files, capsys):
    d, m, x = files
    code, out, _ = _run(capsys, "compile", d / "vgg.onnx", "-o", d / "vgg.tt")
    assert code == 0 and "kernels" in out and "written" in out
    code, out, _ = _run(capsys, "run", d / "vgg.tt", "--input", d / "x.npy", "--output", d / "y.npy")
    assert code == 0
    expected = ort_run(m, {"input": x})[0]
    top5 = " ".join(map(str, np.argsort(-expected[0])[:5]))
    assert f"top-5 classes: {top5}" in out
    assert_close(np.load(d / "y.npy"), expected)
    code, out, _ = _run(capsys, "tasks", d / "vgg.onnx", "--json")
    report = json.loads(out)
    assert code == 0 and report["tasks"][0]["template"] == "conv2d_nchwc_packed"
    assert abs(sum(t["share"] for t in report["tasks"]) - 1) < 1e-9
    code, out, _ = _run(capsys, "tasks", d / "vgg.onnx")
    assert code == 0 and "share" in out and "dense" in out


def test_dynamic_shape_from_the_command_line(files, capsys):
    d, _, _ = files
    code, _, err = _run(capsys, "compile", d / "dyn.onnx", "-o", d / "dyn.tt")
    assert code == 2 and "--shape N=1" in err and err.count("\n") == 1
    code, out, _ = _run(capsys, "compile", d / "dyn.onnx", "-o", d / "dyn.tt", "--shape", "x=2,3,4,4", "--json")
    assert code == 0 and json.loads(out)["inputs"][0]["shape"] == [2, 3, 4, 4]
    code, out, _ = _run(capsys, "compile", d / "dyn.onnx", "-o", d / "dyn3.tt", "--shape", "N=3", "--json")
    assert code == 0 and json.loads(out)["inputs"][0]["shape"] == [3, 3, 4, 4]


@pytest.mark.parametrize("what", ["not_onnx", "truncated", "unsupported", "bad_shape_arg", "wrong_shape", "wrong_dtype",
                                  "unwritable_network", "missing_log"])
def test_bad_input_is_one_line_and_exit_2(files, capsys, what):
    d, m, _ = files
    (d / "text.onnx").write_text("hello\n")
    data = m.SerializeToString()
    (d / "cut.onnx").write_bytes(data[: len(data) // 3])
    unsupported = helper.make_model(helper.make_graph(
        [helper.make_node("Det", ["x"], ["y"], name="det")], "u",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]), opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(unsupported, d / "unsupported.onnx")
    np.save(d / "small.npy", np.zeros((1, 3, 16, 16), np.float32))
    np.save(d / "f64.npy", np.zeros((1, 3, 32, 32)))
    if not (d / "vgg.tt").exists():
        assert main(["compile", str(d / "vgg.onnx"), "-o", str(d / "vgg.tt")]) == 0
        capsys.readouterr()
    argv, message = {
        "not_onnx": (["compile", d / "text.onnx", "-o", d / "o.tt"], "not an ONNX model"),
        "truncated": (["compile", d / "cut.onnx", "-o", d / "o.tt"], "truncated"),
        "unsupported": (["compile", d / "unsupported.onnx", "-o", d / "o.tt"], "Det 'det' (opset 13)"),
        "bad_shape_arg": (["compile", d / "dyn.onnx", "-o", d / "o.tt", "--shape", "x=1,a"], "malformed --shape"),
        "wrong_shape": (["run", d / "vgg.tt", "--input", d / "small.npy"], "must have shape (1, 3, 32, 32)"),
        "wrong_dtype": (["run", d / "vgg.tt", "--input", d / "f64.npy"], "must have dtype float32"),
        "unwritable_network": (["compile", d / "vgg.onnx", "-o", d / "no" / "such" / "net.tt"], "does not exist"),
        "missing_log": (["compile", d / "vgg.onnx", "-o", d / "o.tt", "--log", d / "none.jsonl"], "no such tuning log"),
    }[what]
    code, out, err = _run(capsys, *argv)
    assert code == 2, err
    assert err.startswith("tensortune: error: ") and err.count("\n") == 1 and message in err


def test_run_output_path_that_cannot_be_written(files, capsys):
    d, _, _ = files
    if not (d / "vgg.tt").exists():
        assert main(["compile", str(d / "vgg.onnx"), "-o", str(d / "vgg.tt")]) == 0
    capsys.readouterr()
    code, _, err = _run(capsys, "run", d / "vgg.tt", "--input", d / "x.npy", "--output", d / "no" / "y.npy")
    assert code == 2 and "cannot write the output" in err

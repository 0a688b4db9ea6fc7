"""CPUID capping (``benchmarking.cpuid_cap``): a capped process sees no feature beyond the ISA it was capped to, the
libraries in it run and compute correctly, other segmentation faults still end the process as before, and a machine
that cannot cap says why with a typed error. The capping runs in child processes: it cannot be undone."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tensortune.benchmarking import cpuid_cap
from tensortune.benchmarking.cpuid_cap import ENV_VAR, CpuidCapError, cap_cpuid, cap_from_environment
from tensortune.target import ISA

needs_faulting = pytest.mark.skipif(cpuid_cap.cpuid_cap_problem() is not None,
                                    reason=f"{cpuid_cap.cpuid_cap_problem()}")
AVX512F, AVX2, AVX, FMA = (7, 1, 16), (7, 1, 5), (1, 2, 28), (1, 2, 12)  # (leaf, register, bit)


def _child(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=120)


def _has(regs: dict, feature: tuple[int, int, int]) -> bool:
    leaf, reg, bit = feature
    return bool(regs[str(leaf)][reg] >> bit & 1)


_PROBE = """
    import json
    from tensortune.benchmarking import cpuid_cap
    before = {leaf: cpuid_cap.cpuid(leaf) for leaf in (1, 7)}
    {cap}
    after = {leaf: cpuid_cap.cpuid(leaf) for leaf in (1, 7)}
    print(json.dumps({"before": before, "after": after, "emulated": cpuid_cap.emulated_count()}))
"""


@needs_faulting
@pytest.mark.parametrize("isa", [ISA.AVX2, ISA.SCALAR])
def test_a_capped_process_sees_no_feature_beyond_the_isa(isa):
    out = _child(_PROBE.replace("{cap}", f"cpuid_cap.cap_cpuid(cpuid_cap.ISA('{isa.value}'))"))
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    before, after = res["before"], res["after"]
    assert not _has(after, AVX512F) and res["emulated"] == 2  # both CPUIDs after the cap went through the handler
    for feature in (AVX2, AVX, FMA):
        assert _has(after, feature) == (_has(before, feature) and isa is ISA.AVX2)
    # the other bits are the machine's: only the masks' bits differ
    m_1_ecx, m_7_ebx, m_7_ecx, m_7_edx, _ = cpuid_cap.MASKS[isa]
    assert after["7"][1:] == [before["7"][1] & ~m_7_ebx, before["7"][2] & ~m_7_ecx, before["7"][3] & ~m_7_edx]
    assert after["1"][2] == before["1"][2] & ~m_1_ecx and after["1"][0] == before["1"][0]


@needs_faulting
def test_the_cap_from_the_environment_reaches_threads_started_later_and_numpy_stays_right():
    code = """
        import json, threading
        import numpy as np
        from tensortune.benchmarking import cpuid_cap
        isa = cpuid_cap.cap_from_environment()
        seen = []
        t = threading.Thread(target=lambda: seen.append(cpuid_cap.cpuid(7)[1]))
        t.start(); t.join()
        a = np.arange(12.0).reshape(3, 4)
        print(json.dumps({"isa": isa.value, "thread_ebx": seen[0], "sum": float((a @ a.T).sum())}))
    """
    out = _child(code, {ENV_VAR: "avx2"})
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    a = np.arange(12.0).reshape(3, 4)
    assert res["isa"] == "avx2" and not res["thread_ebx"] >> 16 & 1 and res["sum"] == float((a @ a.T).sum())


@needs_faulting
def test_other_segmentation_faults_still_end_the_process_with_the_handler_before():
    code = """
        import ctypes, faulthandler
        faulthandler.enable()
        from tensortune.benchmarking import cpuid_cap
        cpuid_cap.cap_cpuid(cpuid_cap.ISA.AVX2)
        ctypes.string_at(0)
    """
    out = _child(code)
    assert out.returncode == -11 and "Fatal Python error: Segmentation fault" in out.stderr


@needs_faulting
def test_onnxruntime_capped_to_avx2_computes_a_convolution_right():
    pytest.importorskip("onnxruntime")
    code = """
        from tensortune.benchmarking import cpuid_cap
        cpuid_cap.cap_cpuid(cpuid_cap.ISA.AVX2)
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
        from tensortune.ops import conv2d_nchw
        rng = np.random.default_rng(0)
        x, w = rng.standard_normal((1, 16, 14, 14), np.float32), rng.standard_normal((32, 16, 3, 3), np.float32)
        node = helper.make_node("Conv", ["X", "W"], ["Y"], kernel_shape=[3, 3], pads=[1] * 4)
        g = helper.make_graph([node], "c", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (1, 32, 14, 14))],
                              [numpy_helper.from_array(w, "W")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
        m.ir_version = 8
        y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
        ref = conv2d_nchw(1, 16, 14, 14, 32, 3, pad=1).reference(x, w)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
        assert cpuid_cap.emulated_count() > 0
        print("ok")
    """
    out = _child(code)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_a_machine_without_cpuid_faulting_says_so(monkeypatch):
    monkeypatch.setattr(cpuid_cap, "cpu_flags", lambda: {"fpu", "avx2"})
    monkeypatch.setattr(cpuid_cap.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(cpuid_cap.sys, "platform", "linux")
    with pytest.raises(CpuidCapError, match="no CPUID faulting"):
        cap_cpuid(ISA.AVX2)
    monkeypatch.setattr(cpuid_cap.platform, "machine", lambda: "aarch64")
    assert "needs x86-64 Linux" in cpuid_cap.cpuid_cap_problem()


def test_an_isa_that_cannot_be_capped_to_or_a_bad_name_is_a_typed_error(monkeypatch):
    with pytest.raises(CpuidCapError, match="not avx512"):
        cap_cpuid(ISA.AVX512)
    monkeypatch.setenv(ENV_VAR, "avx3")
    with pytest.raises(CpuidCapError, match="names no ISA"):
        cap_from_environment()
    monkeypatch.delenv(ENV_VAR)
    assert cap_from_environment() is None


@pytest.mark.slow
@needs_faulting
def test_the_peers_of_a_narrower_target_run_onnxruntime_capped_and_check_its_output():
    """``peers.time_peers`` on an AVX2 task of an AVX-512 machine: onnxruntime's child caps CPUID before importing
    it, checks its output against the numpy reference and times it."""
    pytest.importorskip("onnxruntime")
    from tensortune.autotvm.catalog import create_task
    from tensortune.benchmarking.peers import time_peers
    from tensortune.target import Target

    if Target.host().isa is not ISA.AVX512:
        pytest.skip("needs an AVX-512 host: the AVX2 target is then narrower than the machine")
    task = create_task("conv2d", {"IC": 8, "OC": 16, "H": 10, "W": 10, "K": 3, "pad": 1},
                       target=Target.parse("c -isa=avx2"))
    out = time_peers(task, 1, 2, 1.0)
    assert out["onnxruntime"]["cpuid_isa"] == "avx2"  # reported by the child that capped itself
    assert out["onnxruntime"]["capped"] == f"{ENV_VAR}=avx2" and out["onnxruntime"]["median_s"] > 0

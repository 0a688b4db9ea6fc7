"""The libraries a tuned kernel is compared with, timed with one protocol.

Peers: ``numpy.matmul`` and ``torch.matmul`` for matmul; PyTorch ``conv2d`` (NCHW and channels-last)
and onnxruntime (a one-node ONNX model whose weights are an initializer) for convolutions. PyTorch
and onnxruntime are optional: a missing one is reported as "not installed".

Peers run in a child process (``python -m tensortune.benchmarking.peers``) so that their thread pools
stay apart from ours and the OpenBLAS overrides of the environment (``OPENBLAS_CORETYPE``...) are off.
Every result is checked against the numpy reference before it is timed; a wrong one is reported, never
timed.

Protocol for everyone (``runtime.timer.time_repeats``): one warm-up call, then ``repeat`` timings of at
least ``min_repeat_ms`` each (calls per timing calibrated first); the median is reported.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ..ops.operator import check_output
from ..runtime.timer import MAX_CALIBRATIONS, time_repeats
from ..target import ISA, Target
from . import cpuid_cap

if TYPE_CHECKING:
    from ..autotvm.task import Task
    from ..ops import Operator

# Set on some machines to work around old OpenBLAS bugs; they slow a current numpy, so peers run without them.
OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
#: Settings that keep the peer libraries to an ISA narrower than the machine's, so that they stay comparable
#: with kernels compiled for it (AVX2 code measured on an AVX-512 machine). onnxruntime has no such setting: where
#: the machine can, its process also caps CPUID (``cpuid_cap``), which reaches every library.
#: PyTorch's matmul goes to MKL where it is built with it (the x86 wheels), hence ``MKL_ENABLE_INSTRUCTIONS``.
ISA_CAPS = {
    ISA.AVX2: {"OPENBLAS_CORETYPE": "Haswell", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
               "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    ISA.SCALAR: {"OPENBLAS_CORETYPE": "Prescott", "ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41",
                 "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
}
_ISA_RANK = {ISA.SCALAR: 0, ISA.NEON: 1, ISA.AVX2: 1, ISA.AVX512: 2}


def peer_environment(target: Target, threads: int) -> tuple[dict[str, str], dict[str, str]]:
    """The environment of a peer process, and the ISA caps in it: the peers run with ``threads`` threads,
    without the OpenBLAS overrides of this shell, and capped to ``target``'s ISA when it is narrower than
    this machine's (on the same architecture): the libraries' settings, and CPUID (``cpuid_cap.ENV_VAR``, which the
    child applies with ``cap_from_environment``) where this machine can cap it."""
    env = {k: v for k, v in os.environ.items() if k not in OPENBLAS_OVERRIDES and k != cpuid_cap.ENV_VAR}
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    host = Target.host()
    caps = {}
    if target.arch == host.arch and _ISA_RANK[target.isa] < _ISA_RANK[host.isa]:
        caps = dict(ISA_CAPS.get(target.isa, {}))
        if target.isa in cpuid_cap.MASKS and cpuid_cap.cpuid_cap_problem() is None:
            caps[cpuid_cap.ENV_VAR] = target.isa.value
    return {**env, **caps}, caps

PeerFactory = Callable[[list[np.ndarray], int], Callable[[], np.ndarray]]


def plain_operator(task: Task) -> Operator:
    """The NCHW (or plain matmul) operator of ``tensortune.ops`` that the task computes: its reference is
    what the peers compute, and its default schedule is the untuned baseline."""
    from .. import ops
    from ..autotvm.workload import Conv2d, DepthwiseConv2d, Matmul

    wl = task.workload
    if isinstance(wl, Matmul) and wl == Matmul(wl.M, wl.N, wl.K):
        return ops.matmul(wl.M, wl.N, wl.K)
    if isinstance(wl, Conv2d) and wl.dtype == "float32":
        return ops.conv2d_nchw(wl.N, wl.C, wl.H, wl.W, wl.O, wl.K, stride=wl.stride, pad=wl.pad, groups=wl.groups)
    if isinstance(wl, DepthwiseConv2d) and wl.dtype == "float32":
        return ops.depthwise_conv2d_nchw(wl.N, wl.C, wl.H, wl.W, wl.K, stride=wl.stride, pad=wl.pad)
    return task.operator  # another workload: the template's own operator


def time_peers(task: Task, threads: int, repeat: int, min_repeat_ms: float) -> dict[str, dict]:
    """Each peer's ``{"median_s", "runs_s"}``, ``{"unavailable": ...}`` or ``{"error": ...}``, timed in a child."""
    spec = {"template": task.name, "args": list(task.args), "target": str(task.target), "threads": threads,
            "repeat": repeat, "min_repeat_ms": min_repeat_ms}
    env, caps = peer_environment(task.target, threads)
    proc = subprocess.run([sys.executable, "-m", "tensortune.benchmarking.peers"], input=json.dumps(spec), env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"peers": {"error": f"the peer process failed (exit code {proc.returncode}): {tail}"}}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if caps:  # say which peers ran capped to the target's ISA; onnxruntime is capped by CPUID alone, if at all
        for name, entry in out.items():
            if name != "onnxruntime":
                entry["capped"] = " ".join(f"{k}={v}" for k, v in caps.items())
            elif cpuid_cap.ENV_VAR in caps and entry.get("cpuid_isa") == caps[cpuid_cap.ENV_VAR]:
                entry["capped"] = f"{cpuid_cap.ENV_VAR}={entry['cpuid_isa']}"
            else:
                why = cpuid_cap.cpuid_cap_problem() or "its process did not cap it"
                entry["uncapped"] = (f"onnxruntime has no setting that narrows its ISA and CPUID was not capped ({why}): "
                                     "it ran with this machine's")
    return out


def _worker_main() -> int:
    """In the child: read the spec on stdin, print the peers' timings as one JSON line."""
    spec = json.loads(sys.stdin.read())
    capped = cpuid_cap.cap_from_environment()  # before any peer library reads CPUID
    from ..autotvm.task import Task
    from ..autotvm.templates import TEMPLATES

    task = Task(TEMPLATES[spec["template"]], tuple(spec["args"]), Target.parse(spec["target"]))
    canonical = task.make_inputs(seed=0)
    expected = np.asarray(plain_operator(task).reference(*canonical))
    out = {}
    for name, make in peers_of(task):
        try:
            fn = make(canonical, spec["threads"])
        except ImportError:
            out[name] = {"unavailable": "not installed"}
            continue
        problem = check_output(np.asarray(fn()), expected)
        if problem:
            out[name] = {"error": problem}
            continue
        runs = time_callable(fn, spec["repeat"], spec["min_repeat_ms"])
        out[name] = {"median_s": statistics.median(runs), "runs_s": runs}
    if capped is not None:  # what this process's CPUID reported to the peers
        for entry in out.values():
            entry["cpuid_isa"] = capped.value
    print(json.dumps(out))
    return 0


def peers_of(task: Task) -> list[tuple[str, PeerFactory]]:
    """The peer implementations of the task's operator: (name, factory of a call returning the output)."""
    from ..autotvm.workload import BatchMatmul, Conv2d, ConvTranspose2d, DepthwiseConv2d, LayerNorm, Matmul, Softmax

    wl = task.workload
    if isinstance(wl, Matmul):
        return [("numpy", _numpy_matmul), ("torch", _torch_matmul)] if wl == Matmul(wl.M, wl.N, wl.K) else []
    if isinstance(wl, (Conv2d, DepthwiseConv2d)):
        stride, pad = wl.stride, wl.pad
        groups = wl.C if isinstance(wl, DepthwiseConv2d) else wl.groups
        return [("torch", lambda c, t: _torch_conv(c, t, stride, pad, groups, channels_last=False)),
                ("torch_channels_last", lambda c, t: _torch_conv(c, t, stride, pad, groups, channels_last=True)),
                ("onnxruntime", lambda c, t: _onnx_conv(c, t, stride, pad, groups))]
    if wl.dtype != "float32":
        return []
    if isinstance(wl, BatchMatmul):  # both operands at run time (attention's); B transposed by a node ORT folds in
        nodes = ([("Transpose", ["B"], ["BT"], {"perm": [0, 2, 1]}), ("MatMul", ["A", "BT"], ["Y"], {})]
                 if wl.transpose_b else [("MatMul", ["A", "B"], ["Y"], {})])
        ort = ("onnxruntime", lambda c, t: _onnx_graph(c, t, ["A", "B"], [], nodes))
        return [ort] if wl.transpose_b else [("numpy", _numpy_matmul), ort]
    if isinstance(wl, ConvTranspose2d):
        attrs = {"kernel_shape": [wl.K, wl.K], "strides": [wl.stride] * 2, "pads": [wl.pad] * 4,
                 "output_padding": [wl.output_padding] * 2}
        return [("onnxruntime", lambda c, t: _onnx_graph(c, t, ["X"], ["W"], [("ConvTranspose", ["X", "W"], ["Y"],
                                                                                 attrs)]))]
    if isinstance(wl, Softmax):
        return [("onnxruntime", lambda c, t: _onnx_graph(c, t, ["X"], [], [("Softmax", ["X"], ["Y"], {"axis": -1})]))]
    if isinstance(wl, LayerNorm):
        node = ("LayerNormalization", ["X", "G", "B"], ["Y"], {"axis": -1, "epsilon": 1e-5})
        return [("onnxruntime", lambda c, t: _onnx_graph(c, t, ["X"], ["G", "B"], [node], opset=17))]
    return []


def _numpy_matmul(canonical: list[np.ndarray], threads: int) -> Callable[[], np.ndarray]:
    a, b = canonical
    c = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), a.dtype)
    return lambda: np.matmul(a, b, out=c)  # BLAS threads: OPENBLAS_NUM_THREADS etc. set by the parent


def _torch_matmul(canonical: list[np.ndarray], threads: int) -> Callable[[], np.ndarray]:
    import torch

    torch.set_num_threads(threads)
    a, b = (torch.from_numpy(x) for x in canonical)
    c = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype)

    def run() -> np.ndarray:
        with torch.no_grad():
            return torch.matmul(a, b, out=c).numpy()

    return run


def _torch_conv(canonical, threads: int, stride: int, pad: int, groups: int,
                channels_last: bool) -> Callable[[], np.ndarray]:
    import torch

    torch.set_num_threads(threads)
    x, w = (torch.from_numpy(a) for a in canonical)
    if channels_last:  # NHWC in memory, as a channels-last network keeps its activations and weights
        x, w = (t.contiguous(memory_format=torch.channels_last) for t in (x, w))

    def run() -> np.ndarray:
        with torch.no_grad():
            return torch.nn.functional.conv2d(x, w, stride=stride, padding=pad, groups=groups).numpy()

    return run


def _onnx_conv(canonical, threads: int, stride: int, pad: int, groups: int) -> Callable[[], np.ndarray]:
    """One Conv node with the weights as an initializer (constant, as in a deployed model)."""
    attrs = {"kernel_shape": list(canonical[1].shape[2:]), "strides": [stride, stride], "pads": [pad] * 4,
             "group": groups}
    return _onnx_graph(canonical, threads, ["X"], ["W"], [("Conv", ["X", "W"], ["Y"], attrs)])


def _onnx_graph(canonical, threads: int, inputs: list[str], constants: list[str], nodes: list[tuple],
                opset: int = 13) -> Callable[[], np.ndarray]:
    """A graph of ``nodes`` (op type, inputs, outputs, attributes) whose output is ``Y``: the canonical arrays are
    its run-time ``inputs``, then its ``constants`` (initializers, as a deployed model's weights are). The output's
    shape comes from ONNX shape inference."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper, shape_inference

    feeds = dict(zip(inputs, canonical))
    graph = helper.make_graph([helper.make_node(op, ins, outs, **attrs) for op, ins, outs, attrs in nodes], "peer",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in feeds.items()],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(a, n) for n, a in zip(constants, canonical[len(inputs):])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)  # readable by older onnxruntime releases too
    inferred = shape_inference.infer_shapes(model, strict_mode=True)
    dims = next(o for o in inferred.graph.output if o.name == "Y").type.tensor_type.shape.dim
    out_shape = tuple(d.dim_value for d in dims)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    y = np.empty(out_shape, np.float32)
    binding = session.io_binding()  # preallocated inputs and output: no copies or allocation per call
    for name, a in feeds.items():
        binding.bind_cpu_input(name, a)
    binding.bind_ortvalue_output("Y", ort.OrtValue.ortvalue_from_numpy(y))

    def run() -> np.ndarray:
        session.run_with_iobinding(binding)
        return y

    return run


def time_callable(fn: Callable[[], Any], repeat: int, min_repeat_ms: float,
                  calibrations: int = MAX_CALIBRATIONS) -> list[float]:
    """Per-call seconds of ``repeat`` timings of ``fn`` in a Python loop, by ``Module.time_evaluator``'s protocol."""
    def run(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            fn()
        return time.perf_counter() - start

    return time_repeats(run, 1, repeat, min_repeat_ms, calibrations)


if __name__ == "__main__":
    sys.exit(_worker_main())

"""Chains the fusion passes make one kernel, against the same models with the pass turned off, and onnxruntime (all
its graph optimizations on) on the same models; timed in turns in one process.

    python benchmarks/fusion_ab.py --threads 2 --json results/fusion_ab.json

Cases: ``transpose_scale`` (attention's query heads: a [1,128,12,64] transpose, then a scale; ``fuse_injective``),
``glu`` (a gated linear unit: the two halves of [1,128,3072], one through a sigmoid, multiplied;
``fuse_injective``), ``relu_pad`` (a ReLU, then a zero pad of [1,64,56,56]; ``fuse_injective``) and
``pool_scale_add`` (a 2x2 average pooling of [1,64,56,56], a per-channel scale, a residual add and a ReLU;
``fuse_epilogues`` into the pooling). Prints per case the kernels with and without, the medians, and the median per
round of fused / unfused and of fused / onnxruntime.
"""
from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

from common import positive_int, write_json


def _model(nodes, inputs, output, inits=None) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "fusion", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m


def _ints(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def cases(rng) -> dict[str, tuple[onnx.ModelProto, dict[str, np.ndarray], str]]:
    """name -> (model, inputs, the pass whose fusion it measures)."""
    def x(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    mk = helper.make_node
    return {
        "transpose_scale": (_model([mk("Transpose", ["q"], ["t"], perm=[0, 2, 1, 3]), mk("Mul", ["t", "s"], ["y"])],
                                   {"q": (1, 128, 12, 64)}, "y", {"s": np.float32(0.125)}),
                            {"q": x(1, 128, 12, 64)}, "fuse_injective"),
        "glu": (_model([mk("Slice", ["h", "s0", "e0", "ax"], ["a"]), mk("Slice", ["h", "s1", "e1", "ax"], ["b"]),
                        mk("Sigmoid", ["b"], ["g"]), mk("Mul", ["a", "g"], ["y"])], {"h": (1, 128, 3072)}, "y",
                       {"s0": _ints(0), "e0": _ints(1536), "s1": _ints(1536), "e1": _ints(3072), "ax": _ints(2)}),
                {"h": x(1, 128, 3072)}, "fuse_injective"),
        "relu_pad": (_model([mk("Relu", ["f"], ["r"]), mk("Pad", ["r", "p"], ["y"])], {"f": (1, 64, 56, 56)}, "y",
                            {"p": _ints(0, 0, 1, 1, 0, 0, 1, 1)}),
                     {"f": x(1, 64, 56, 56)}, "fuse_injective"),
        "pad_relu": (_model([mk("Pad", ["f", "p"], ["r"]), mk("Relu", ["r"], ["y"])], {"f": (1, 64, 56, 56)}, "y",
                            {"p": _ints(0, 0, 1, 1, 0, 0, 1, 1)}),
                     {"f": x(1, 64, 56, 56)}, "fuse_injective"),
        "relu_concat": (_model([mk("Relu", ["f"], ["r"]), mk("Concat", ["r", "f"], ["y"], axis=3)],
                               {"f": (1, 64, 56, 56)}, "y"), {"f": x(1, 64, 56, 56)}, "fuse_injective"),
        "pool_scale_add": (_model([mk("AveragePool", ["f"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                                   mk("Mul", ["p", "k"], ["m"]), mk("Add", ["m", "r"], ["a"]),
                                   mk("Relu", ["a"], ["y"])], {"f": (1, 64, 56, 56), "r": (1, 64, 28, 28)}, "y",
                                  {"k": rng.uniform(0.5, 1.5, (1, 64, 1, 1)).astype(np.float32)}),
                           {"f": x(1, 64, 56, 56), "r": x(1, 64, 28, 28)}, "fuse_epilogues"),
    }


def _compiled(model, target, threads: int, off: str | None):
    """The model compiled with graph pass ``off`` (a name in ``tensortune.passes``) replaced by the identity."""
    from tensortune import passes
    from tensortune.network.compile_model import load_program, optimized_graph
    from tensortune.network.program import build_program

    keep = getattr(passes, off) if off else None
    if off:
        setattr(passes, off, lambda g: g)
    try:
        g = optimized_graph(model, target)
        program = build_program(g, target, use_cache=False)
        return load_program(program, target, threads), [k.kind for k in program.kernels]
    finally:
        if off:
            setattr(passes, off, keep)


def _onnxruntime(model, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)[0]


def main() -> int:
    from tensortune.benchmarking.peers import time_callable
    from tensortune.target import Target

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", help="target string (default: this machine)")
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--rounds", type=positive_int, default=9)
    p.add_argument("--cases", nargs="+", help="some of the cases (default: all)")
    p.add_argument("--json")
    args = p.parse_args()
    target = Target.parse(args.target) if args.target else Target.host()
    results = {}
    print(f"fusion on {target}, {args.threads} threads; medians of {args.rounds} rounds")
    for name, (model, feeds, off) in cases(np.random.default_rng(0)).items():
        if args.cases and name not in args.cases:
            continue
        fused, fused_kernels = _compiled(model, target, args.threads, None)
        unfused, unfused_kernels = _compiled(model, target, args.threads, off)
        peer = _onnxruntime(model, args.threads)
        expected = peer(feeds)
        for module in (fused, unfused):
            got = module.run(feeds)["y"]
            if not np.allclose(got, expected, rtol=1e-4, atol=1e-4):
                print(f"{name}: the compiled output differs from onnxruntime's", file=sys.stderr)
                return 1
        runs = {"fused": lambda: fused.run(feeds), "unfused": lambda: unfused.run(feeds),
                "onnxruntime": lambda: peer(feeds)}
        seconds = {k: [] for k in runs}
        for _ in range(args.rounds):
            for k, fn in runs.items():
                seconds[k].append(statistics.median(time_callable(fn, 5, 20.0)))
        med = {k: statistics.median(v) for k, v in seconds.items()}
        vs_unfused = statistics.median(a / b for a, b in zip(seconds["fused"], seconds["unfused"]))
        vs_ort = statistics.median(a / b for a, b in zip(seconds["fused"], seconds["onnxruntime"]))
        print(f"  {name:<16} fused {med['fused'] * 1e6:8.1f} us ({', '.join(fused_kernels)}); unfused "
              f"{med['unfused'] * 1e6:8.1f} us ({', '.join(unfused_kernels)}); onnxruntime "
              f"{med['onnxruntime'] * 1e6:8.1f} us; fused/unfused {vs_unfused:.2f}, fused/onnxruntime {vs_ort:.2f}")
        results[name] = {"pass": off, "kernels": {"fused": fused_kernels, "unfused": unfused_kernels},
                         "seconds": seconds, "fused_over_unfused": vs_unfused, "fused_over_onnxruntime": vs_ort}
    if args.json:
        write_json(args.json, {"target": str(target), "threads": args.threads, "cases": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())

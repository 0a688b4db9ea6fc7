"""A compiled network with and without the 1x1 template's weight prefetch, timed in turns in one process.

    python benchmarks/prefetch_ab.py --model mobilenet_v2 --log LOG --target "c -isa=avx2 -cores=2 -arch=x86_64"

Both networks are built from the same log (no build cache: the prefetch is not part of a kernel's key), the one
without by turning off ``templates.conv2d._prefetch_weights``; their outputs are compared, then they are timed in
turns (``--rounds`` timings of at least 50 ms each) and profiled (each call's time inside its network). Prints each
network's median, the median per round of with / without, and the layers that moved by more than 1.5 us.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from common import positive_int, save_zoo_model, write_json


def main() -> int:
    from tensortune.autotvm.templates import conv2d
    from tensortune.network.compile_model import load_program, optimized_graph
    from tensortune.network.program import build_program
    from tensortune.network.tuned import TunedKernels
    from tensortune.target import Target

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("resnet18", "mobilenet_v2"), default="mobilenet_v2")
    p.add_argument("--log", required=True, help="the network's tuning log")
    p.add_argument("--target", help="target string (default: this machine)")
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--rounds", type=positive_int, default=14)
    p.add_argument("--json")
    args = p.parse_args()

    target = Target.parse(args.target) if args.target else Target.host()
    with tempfile.TemporaryDirectory() as tmp:
        model = str(save_zoo_model(Path(tmp), args.model))
        chosen = TunedKernels(args.log, target)
        g = optimized_graph(model, target, None, records=chosen.records)
    prefetch = conv2d._prefetch_weights
    modules, kernels = {}, {}
    for name, fn in (("without", lambda *a: None), ("with", prefetch)):
        conv2d._prefetch_weights = fn
        program = build_program(g, target, chosen, use_cache=False)
        kernels[name] = sum("__builtin_prefetch" in f for f in program.source.split("\nstatic void "))
        modules[name] = load_program(program, target, args.threads)
    conv2d._prefetch_weights = prefetch
    x = np.random.default_rng(0).standard_normal(tuple(g.values[g.inputs[0]].shape)).astype("float32")
    if not np.allclose(modules["without"](x), modules["with"](x), rtol=1e-4, atol=1e-4):
        print("the two networks' outputs differ", file=sys.stderr)
        return 1
    seconds = {k: [] for k in modules}
    for _ in range(args.rounds):
        for k, m in modules.items():
            seconds[k].append(m.time_evaluator(20, 1, 50.0)(x).median)
    ratio = statistics.median(b / a for a, b in zip(seconds["without"], seconds["with"]))
    calls = {k: {} for k in modules}
    for _ in range(7):
        for k, m in modules.items():
            for row in m.profile(x, repeat=20):
                calls[k].setdefault(row["node"], []).append(row["seconds"])
    layers = sorted(((statistics.median(calls["with"][n]) - statistics.median(calls["without"][n])) * 1e6, n)
                    for n in calls["without"])
    print(f"{args.model} on {target}, {args.threads} threads; kernels that prefetch: {kernels['with']}")
    for k in modules:
        print(f"  {k:<8} median {statistics.median(seconds[k]) * 1e3:.3f} ms")
    print(f"  with / without, per round: median {ratio:.3f}")
    for d, n in layers:
        if abs(d) > 1.5:
            print(f"  {n:<28} {d:+7.1f} us")
    if args.json:
        write_json(args.json, {"model": args.model, "log": args.log, "target": str(target), "threads": args.threads,
                               "seconds": seconds, "with_over_without": ratio, "prefetching_kernels": kernels["with"],
                               "layers_us": {n: d for d, n in layers}})
    return 0


if __name__ == "__main__":
    sys.exit(main())

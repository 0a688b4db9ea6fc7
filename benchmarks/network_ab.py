"""A compiled network with and without one of its code generator's choices, timed in turns in one process.

    python benchmarks/network_ab.py --change prefetch --model mobilenet_v2 --log LOG \
        --target "c -isa=avx2 -cores=2 -arch=x86_64"

``--change prefetch``: the 1x1 template's prefetch of the next block of weights (``templates.conv2d.
_prefetch_weights``); ``--change input-relayout``: the first convolution blocking the plain image as it pads
(``operators.conv_kernels.plain_source``), against a relayout kernel first; ``--change expansion``: 1x1 expansions
fused into the depthwise convolutions that read them (``operators.expansion``), against the two kernels; ``--change
x86-minmax``: vector min/max (ReLU, Clip) as one MINPS/MAXPS (``codegen.c._x86_minmax``), against a comparison and
a blend. Both networks are built from the same log (no build cache: neither choice is part of a kernel's key), the
one "without" with the choice turned off; their outputs are compared, then they are timed in turns (``--rounds``
timings of at least 50 ms each) and profiled (each call's time inside its network). Prints each network's median,
the median per round of with / without, and the calls that moved by more than 1.5 us.
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
    from tensortune.codegen import c as c_codegen
    from tensortune.operators import conv_kernels
    from tensortune.operators import expansion
    from tensortune.network.compile_model import load_program, optimized_graph
    from tensortune.network.program import build_program
    from tensortune.network.tuned import TunedKernels
    from tensortune.target import Target

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--change", choices=("prefetch", "input-relayout", "expansion", "x86-minmax"), default="prefetch")
    p.add_argument("--model", choices=("resnet18", "mobilenet_v2"), default="mobilenet_v2")
    p.add_argument("--log", required=True, help="the network's tuning log")
    p.add_argument("--target", help="target string (default: this machine)")
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--rounds", type=positive_int, default=14)
    p.add_argument("--json")
    args = p.parse_args()

    target = Target.parse(args.target) if args.target else Target.host()
    owner, attr = {"prefetch": (conv2d, "_prefetch_weights"), "input-relayout": (conv_kernels, "plain_source"),
                   "expansion": (expansion, "fusable_expansion"),
                   "x86-minmax": (c_codegen, "_x86_minmax")}[args.change]
    keep = getattr(owner, attr)
    modules, calls_of = {}, {}
    tmp = tempfile.TemporaryDirectory()
    model = str(save_zoo_model(Path(tmp.name), args.model))
    try:
        for name, fn in (("without", lambda *a: None), ("with", keep)):
            setattr(owner, attr, fn)
            chosen = TunedKernels(args.log, target)
            g = optimized_graph(model, target, None, records=chosen.records)  # fusion is a graph pass
            program = build_program(g, target, chosen, use_cache=False)
            calls_of[name] = len(program.calls)
            modules[name] = load_program(program, target, args.threads)
    finally:
        setattr(owner, attr, keep)
        tmp.cleanup()
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
    def median_us(name: str, node: str) -> float:  # a call one network does not make takes no time
        return statistics.median(calls[name][node]) * 1e6 if node in calls[name] else 0.0

    layers = sorted((median_us("with", n) - median_us("without", n), n) for n in {*calls["without"], *calls["with"]})
    print(f"{args.change}: {args.model} on {target}, {args.threads} threads; calls {calls_of['without']} without, "
          f"{calls_of['with']} with")
    for k in modules:
        print(f"  {k:<8} median {statistics.median(seconds[k]) * 1e3:.3f} ms")
    print(f"  with / without, per round: median {ratio:.3f}")
    for d, n in layers:
        if abs(d) > 1.5:
            print(f"  {n:<28} {d:+7.1f} us")
    if args.json:
        write_json(args.json, {"change": args.change, "model": args.model, "log": args.log, "target": str(target),
                               "threads": args.threads, "seconds": seconds, "with_over_without": ratio,
                               "calls": calls_of, "layers_us": {n: d for d, n in layers}})
    return 0


if __name__ == "__main__":
    sys.exit(main())

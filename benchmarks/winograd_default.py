"""The untuned Winograd rule's measurement: ResNet-18's 3x3, stride-1 convolutions (fused conv + folded BN (+ add)
+ ReLU) inside one compiled ResNet-18 (224x224), each with the direct convolution's default schedule or Winograd's
F(2x2)/F(4x4)/F(6x6) default schedule; per-node times from ``module.profile``, the four modules interleaved in
rounds in one process. Ratios < 1: Winograd faster.

    PYTHONPATH=. /work/tools/benchlock python benchmarks/winograd_default.py THREADS PROFILE_REPEAT
"""
import sys
import time
from collections import defaultdict

import numpy as np

import tensortune as tt
from tensortune.dtype import DType
from tensortune.network import optimized_graph, zoo
from tensortune.network.compile_model import load_program
from tensortune.operators.conv_kernels import (conv_kind, conv_operator, is_blocked_conv, winograd_applies,
                                               winograd_kernel)
from tensortune.operators.kernel import KernelArgs
from tensortune.network.program import default_kernel
from tensortune.network.program import build_program

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
target = tt.Target.host()
lanes = target.lanes(DType.float32)
model = zoo.resnet18(image=224)
g = optimized_graph(model, target)
wino_nodes = [n.name for n in g.nodes if winograd_applies(g, n) and is_blocked_conv(g, n, lanes)]


def chooser(tile):
    if tile == "rule":  # what an untuned compile runs (operators.conv_kernels.default_winograd_tile)
        return default_kernel

    def choose(g, node, t):
        if tile and node.name in wino_nodes:
            return winograd_kernel(g, node, t, lanes, tile)
        if node.name in wino_nodes:  # the direct convolution's default schedule
            a = KernelArgs(g)
            op = conv_operator(g, node, a, lanes)
            return a.done(conv_kind(g, node), node, op.output, op.default_schedule(t), op.flops)
        return default_kernel(g, node, t)
    return choose


x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)
mods = {}
for tile in (0, 2, 4, 6, "rule"):
    t0 = time.time()
    mods[tile] = load_program(build_program(g, target, chooser(tile)), target, threads)
    print(f"compiled tile={tile} in {time.time() - t0:.1f}s", flush=True)
ref = mods[0](x)
for tile in (2, 4, 6, "rule"):
    err = np.abs(mods[tile](x) - ref).max() / np.abs(ref).max()
    print(f"tile {tile}: max rel diff vs direct {err:.2e}")

shape = {n.name: tuple(g.values[n.inputs[0]].shape[1:]) for n in g.nodes}
per = defaultdict(lambda: defaultdict(list))
total = defaultdict(list)
for rnd in range(5):  # interleaved rounds: load falls on all alike
    for tile, m in mods.items():
        prof = m.profile(x, repeat=int(sys.argv[2]) if len(sys.argv) > 2 else 5, num_threads=threads)
        for r in prof:
            if r["node"] in wino_nodes and tile != "rule":
                per[r["node"]][tile].append(r["seconds"])
        total[tile].append(sum(r["seconds"] for r in prof))
        ev = m.time_evaluator(number=3, repeat=1, num_threads=threads)(x)
print(f"threads={threads}")
print(f"{'node':<28} {'C,H,W':<14} {'direct ms':>9} " + " ".join(f"{'F%d/dir' % t:>8}" for t in (2, 4, 6)))
layer = defaultdict(lambda: defaultdict(float))
for n in wino_nodes:
    med = {t: float(np.median(v)) for t, v in per[n].items()}
    print(f"{n:<28} {str(shape[n]):<14} {med[0] * 1e3:9.3f} " + " ".join(f"{med[t] / med[0]:8.2f}" for t in (2, 4, 6)))
    for t in med:
        layer[shape[n]][t] += med[t]
print("per geometry (sum over its nodes), ratio = Winograd time / direct time (<1: Winograd faster)")
for sh, d in layer.items():
    print(f"  {str(sh):<14} direct {d[0] * 1e3:7.3f} ms  " + "  ".join(f"F{t}: {d[t] / d[0]:.2f}" for t in (2, 4, 6)))
all3 = {t: sum(d[t] for d in layer.values()) for t in (0, 2, 4, 6)}
print(f"all 3x3 s1 layers: direct {all3[0] * 1e3:.2f} ms; "
      + "  ".join(f"F{t}: {all3[t] / all3[0]:.2f}" for t in (2, 4, 6)))
print("whole network (sum of profiled calls; 0: direct): " + "  ".join(f"tile {t}: {np.median(v) * 1e3:.2f} ms"
                                                                  for t, v in total.items()))
print(f"untuned default rule / all direct: {np.median(total['rule']) / np.median(total[0]):.2f}")

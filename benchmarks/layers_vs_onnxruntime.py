"""Each layer of a compiled network against onnxruntime's kernel for it, both timed inside their networks.

    python benchmarks/layers_vs_onnxruntime.py --model mobilenet_v2 --log results/merged_intel.jsonl \\
        --json results/layers_vs_ort.json

tensortune's side is ``tensortune profile`` (``profile_network``: each kernel call timed inside the network, median
of ``--rounds`` profiles); onnxruntime's is its own profiler (``SessionOptions.enable_profiling``), the median
kernel time of each of its nodes over ``--runs`` runs after a warm-up. onnxruntime fuses a convolution with the
batch norm and activation after it and names the fused node after the last of them (with ``_nchwc`` when it
uses its blocked layout), so each of its nodes is mapped back to the graph's convolution, matrix product or pooling
node its output comes from (``Layers.layer_of``). A ratio below 1 is a layer where tensortune is faster. The two profiles
run one after the other in this process: read the ratios with the host's drift in mind, and compare whole-network
latencies with ``e2e.py``.

``--target`` compiles tensortune's network for another target of this machine (its AVX2 code on an AVX-512 host);
onnxruntime then runs with CPUID capped to that ISA (``benchmarking.cpuid_cap``), as ``e2e.py --target`` runs it.
    python benchmarks/layers_vs_onnxruntime.py --model mobilenet_v2 --target avx2 --log avx2.jsonl
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from common import positive_int, save_zoo_model, write_json

#: ONNX operators onnxruntime's fused kernels are named back to (the node that does a layer's arithmetic)
LAYER_OPS = ("Conv", "Gemm", "MatMul", "GlobalAveragePool", "AveragePool", "MaxPool")
#: suffixes onnxruntime's graph transformers add to a node's name
SUFFIXES = ("_nchwc", "_node")
MAX_HOPS = 8  # activations, batch norms, residual adds between a layer and the name of the fused node


class Layers:
    """Maps onnxruntime's node names back to the graph's layer nodes (see ``layer_of``)."""

    def __init__(self, graph):
        self.nodes = {n.name: n for n in graph.node}
        self.producer = {out: n for n in graph.node for out in n.output}

    def layer_of(self, name: str) -> str | None:
        """The name of the graph node whose arithmetic the onnxruntime node ``name`` runs: ``name`` itself when it
        is a layer node; else, read as the output of a fused chain (onnxruntime's suffixes and ``_token_N`` for a
        taken name stripped), the first layer node up the chain of *first* inputs (a residual ``Add`` whose first
        input is the skip connection would be charged to the wrong layer; the zoo's adds take the convolution
        first); None when there is none (a copy onnxruntime added)."""
        node = self.nodes.get(name)
        if node is not None and node.op_type in LAYER_OPS:
            return name
        base = re.sub(r"_token_\d+$", "", name)
        for suffix in SUFFIXES:
            base = base[:-len(suffix)] if base.endswith(suffix) else base
        node = self.nodes.get(base) or self.nodes.get(f"{base}_node") or self.producer.get(base)
        for _ in range(MAX_HOPS):
            if node is None:
                return None
            if node.op_type in LAYER_OPS:
                return node.name
            node = self.producer.get(node.input[0]) if node.input else None
        return None


def onnxruntime_layers(model: Path, threads: int, runs: int, work: Path) -> dict[str, float]:
    """onnxruntime's median kernel seconds per node name over ``runs`` runs (after as many warm-up runs)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    so.profile_file_prefix = str(work / "ort_profile")
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(0).uniform(-1, 1, [d if isinstance(d, int) else 1 for d in inp.shape]).astype(np.float32)
    for _ in range(2 * runs):
        sess.run(None, {inp.name: x})
    events = json.loads(Path(sess.end_profiling()).read_text())
    per: dict[str, list[float]] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            per.setdefault(e["name"][:-len("_kernel_time")], []).append(e["dur"] * 1e-6)
    return {name: statistics.median(times[-runs:]) for name, times in per.items()}


def compare(graph, calls: list[dict], ort_nodes: dict[str, float]) -> tuple[list[dict], dict[str, float]]:
    """Rows per tensortune call (its seconds, onnxruntime's for the same layer or None), and onnxruntime's time in
    nodes mapped to no call of tensortune's (copies and reorders it added)."""
    layers = Layers(graph)
    ort_by_layer: dict[str, float] = {}
    unmapped: dict[str, float] = {}
    for name, seconds in ort_nodes.items():
        layer = layers.layer_of(name)
        if layer is None:
            unmapped[name] = unmapped.get(name, 0.0) + seconds
        else:
            ort_by_layer[layer] = ort_by_layer.get(layer, 0.0) + seconds
    rows = [{"node": c["node"], "kind": c["kind"], "kernel": c["kernel"], "tensortune_s": c["seconds"],
             "onnxruntime_s": ort_by_layer.pop(c["node"], None)} for c in calls]
    unmapped.update(ort_by_layer)  # layers tensortune computes in no call of its own (folded away)
    return rows, unmapped


def cap_onnxruntime(target: str | None) -> str | None:
    """Cap this process's CPUID to ``target``'s ISA when it is narrower than this machine's (before onnxruntime is
    imported); the ISA, or None. A machine that cannot cap CPUID says so with ``CpuidCapError``, a target that names
    none with ``TargetError``."""
    from tensortune.benchmarking import cpuid_cap
    from tensortune.benchmarking.peers import peer_environment
    from tensortune.build import resolve_target

    if target is None:
        return None
    resolved = resolve_target(target)
    if not peer_environment(resolved, 1)[1]:
        return None
    cpuid_cap.cap_cpuid(resolved.isa)
    return resolved.isa.value


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mobilenet_v2",
                   help="a network of tensortune.network.zoo (resnet18, mobilenet_v2, ...) or an ONNX file")
    p.add_argument("--log", help="tuning log the network is compiled with (default: untuned)")
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--runs", type=positive_int, default=50, help="onnxruntime runs profiled (after as many warm-up)")
    p.add_argument("--rounds", type=positive_int, default=5, help="tensortune profiles (each call keeps its median)")
    p.add_argument("--target", help="target of tensortune's network (default: this machine); onnxruntime is capped "
                                    "to its ISA")
    p.add_argument("--json")
    args = p.parse_args()

    import onnx

    from tensortune.errors import TensortuneError
    from tensortune.network import zoo
    from tensortune.network.profiling import profile_network

    try:  # first: a machine that cannot cap says so before anything is profiled (CPUID is not read by tensortune)
        capped = cap_onnxruntime(args.target)
    except TensortuneError as e:
        p.error(f"--target: {e}")
    if capped:
        print(f"onnxruntime runs with CPUID capped to {capped}")
    with tempfile.TemporaryDirectory(prefix="tt-layers-") as tmp:
        work = Path(tmp)
        model = save_zoo_model(work, args.model) if args.model in zoo.MODELS else Path(args.model)
        profile = profile_network(str(model), args.log, args.target, num_threads=args.threads,
                                  rounds=args.rounds).to_json()
        ort_nodes = onnxruntime_layers(model, args.threads, args.runs, work)
        rows, unmapped = compare(onnx.load(str(model)).graph, profile["calls"], ort_nodes)
    tt_total = sum(r["tensortune_s"] for r in rows)
    ort_total = sum(r["onnxruntime_s"] or 0.0 for r in rows) + sum(unmapped.values())
    print(f"{'node':<24} {'kind':<16} {'tensortune':>11} {'onnxruntime':>11} {'ratio':>6}")
    for r in sorted(rows, key=lambda r: -r["tensortune_s"]):
        o = r["onnxruntime_s"]
        print(f"{r['node'][:24]:<24} {r['kind'][:16]:<16} {r['tensortune_s'] * 1e6:9.1f}us "
              + (f"{o * 1e6:9.1f}us {r['tensortune_s'] / o:6.2f}" if o else f"{'-':>11} {'-':>6}"))
    for name, s in unmapped.items():
        print(f"{name[:24]:<24} {'(onnxruntime)':<16} {'-':>11} {s * 1e6:9.1f}us")
    print(f"sum of the calls: tensortune {tt_total * 1e3:.3f} ms, onnxruntime {ort_total * 1e3:.3f} ms "
          f"({tt_total / ort_total:.2f}x); tensortune's whole run {profile['whole_s'] * 1e3:.3f} ms")
    if args.json:
        write_json(args.json, {"model": args.model, "log": args.log, "threads": args.threads, "rows": rows,
                               "onnxruntime_unmapped_s": unmapped, "tensortune_whole_s": profile["whole_s"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())

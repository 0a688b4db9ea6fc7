"""A transformer encoder layer tuned with and without the template-free search of its nodes, against onnxruntime.

The network is one BERT-base encoder layer (``--seq`` tokens, hidden 768, 12 heads, feed-forward 3072, GELU in its
Erf form, LayerNorm after each residual add; float32, batch 1, random weights), built here with ``onnx.helper``.
Only its dense layers have a template; its attention products, softmax and LayerNorms are tasks only for the
template-free search (``tune-model --search``). For each ``--searches`` entry the layer is tuned from an empty log
(in ``--out``; rerunning resumes) to ``--trials`` trials, compiled with the log, and then every module (untuned,
each tuned one) is timed in turns with onnxruntime in child processes (``e2e.time_interleaved``: the median of
``--repeat`` timings of at least ``--min-ms``), on ``--threads`` threads. Ratios are onnxruntime's latency over
ours (above 1: tensortune faster).

    python benchmarks/template_free_network.py --trials 300 --json results/template_free_network.json
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from common import positive_int, write_json
from e2e import compile_network, machine, time_interleaved

ROOT = Path(__file__).resolve().parent.parent
HIDDEN, HEADS, FFN = 768, 12, 3072


def encoder_layer(seq: int, seed: int = 0) -> onnx.ModelProto:
    """One post-LayerNorm BERT encoder layer over ``[seq, HIDDEN]``."""
    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {}

    def weight(name: str, *shape: int, scale: float = 0.05) -> str:
        inits[name] = (rng.standard_normal(shape) * scale).astype(np.float32)
        return name

    def const(name: str, value) -> str:
        inits[name] = np.asarray(value)
        return name

    nodes = []

    def op(kind: str, inputs: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def dense(x: str, name: str, n_in: int, n_out: int) -> str:
        mm = op("MatMul", [x, weight(f"{name}_w", n_in, n_out)], f"{name}_mm")
        return op("Add", [mm, weight(f"{name}_b", n_out, scale=0.01)], name)

    def heads(x: str, name: str) -> str:  # [seq, HIDDEN] -> [HEADS, seq, HIDDEN / HEADS]
        r = op("Reshape", [x, const(f"{name}_shape", np.array([seq, HEADS, HIDDEN // HEADS]))], f"{name}_r")
        return op("Transpose", [r], name, perm=[1, 0, 2])

    def layer_norm(x: str, name: str) -> str:
        g = const(f"{name}_g", np.ones(HIDDEN, np.float32))
        return op("LayerNormalization", [x, g, weight(f"{name}_b", HIDDEN, scale=0.01)], name, axis=-1,
                  epsilon=1e-12)

    q, k, v = (heads(dense("x", n, HIDDEN, HIDDEN), f"{n}_h") for n in ("q", "k", "v"))
    kt = op("Transpose", [k], "kt", perm=[0, 2, 1])
    scores = op("Mul", [op("MatMul", [q, kt], "qk"), const("scale", np.float32(1 / np.sqrt(HIDDEN // HEADS)))],
                "scores")
    probs = op("Softmax", [scores], "probs", axis=-1)
    ctx = op("Transpose", [op("MatMul", [probs, v], "ctx_h")], "ctx_t", perm=[1, 0, 2])
    ctx = op("Reshape", [ctx, const("ctx_shape", np.array([seq, HIDDEN]))], "ctx")
    h = layer_norm(op("Add", [dense(ctx, "out", HIDDEN, HIDDEN), "x"], "res1"), "ln1")
    up = dense(h, "up", HIDDEN, FFN)
    erf = op("Erf", [op("Div", [up, const("sqrt2", np.float32(np.sqrt(2)))], "up_s")], "up_erf")
    gelu = op("Mul", [op("Mul", [up, op("Add", [erf, const("one", np.float32(1))], "up_1")], "up_g"),
                      const("half", np.float32(0.5))], "gelu")
    y = layer_norm(op("Add", [dense(gelu, "down", FFN, HIDDEN), h], "res2"), "y")
    graph = helper.make_graph(nodes, "bert_layer", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                                  [seq, HIDDEN])],
                              [helper.make_tensor_value_info(y, onnx.TensorProto.FLOAT, [seq, HIDDEN])],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq", type=positive_int, default=128)
    p.add_argument("--trials", type=positive_int, default=300)
    p.add_argument("--searches", nargs="+", choices=("templates", "all", "auto"), default=["templates", "all"])
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--repeat", type=positive_int, default=15)
    p.add_argument("--min-ms", type=float, default=50.0)
    p.add_argument("--out", default=str(ROOT / "results" / "template_free_network"))
    p.add_argument("--json")
    args = p.parse_args()

    from tensortune.network.tasks import Search
    from tensortune.network.tuning import tune_model

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = out / f"bert_layer_{args.seq}.onnx"
    onnx.save(encoder_layer(args.seq), model)
    work = Path(tempfile.mkdtemp(prefix="tt_tfn_"))
    x = np.random.default_rng(1).standard_normal((args.seq, HIDDEN)).astype(np.float32)
    np.save(work / "x.npy", x)
    import onnxruntime as ort

    np.save(work / "expected.npy", ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
            .run(None, {"x": x})[0])
    report = {"machine": machine(), "seq": args.seq, "trials": args.trials, "threads": args.threads, "runs": {}}
    logs = {"tensortune_untuned": None}
    for search in args.searches:
        log = out / f"bert_layer_{args.seq}_{search}.jsonl"
        start = time.perf_counter()
        result = tune_model(model, args.trials, log, search=Search(search), num_threads=args.threads, progress=True)
        report["runs"][search] = {"tune_s": time.perf_counter() - start, "tasks": len(result.tasks),
                                  "estimated_latency_s": result.estimated_latency}
        logs[f"tensortune_{search}"] = str(log)
    specs = {}
    for name, log in logs.items():
        network = work / name
        compiled = compile_network(model, network, work / "cache", log)
        report["runs"].setdefault(name.removeprefix("tensortune_"), {}).update(compiled)
        specs[name] = {"peer": "tensortune", "network": str(network), "model": str(model), "threads": args.threads,
                       "input": str(work / "x.npy"), "expected": str(work / "expected.npy"), "min_ms": args.min_ms}
    specs["onnxruntime"] = dict(specs["tensortune_untuned"], peer="onnxruntime")
    timings = time_interleaved(specs, args.repeat)
    report["timings"] = timings
    ort_s = timings["onnxruntime"].get("median_s")
    print(f"BERT-base encoder layer, seq {args.seq}, {args.threads} threads, {machine()}")
    print(f"  {'peer':<24} {'median':>10} {'onnxruntime / ours':>20}")
    for name, t in timings.items():
        s = t.get("median_s")
        ratio = f"{ort_s / s:.2f}" if s and ort_s else "-"
        print(f"  {name:<24} {(f'{s * 1e3:.2f} ms' if s else t.get('error', t.get('unavailable', '?'))):>10} "
              f"{ratio:>20}")
    if args.json:
        write_json(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

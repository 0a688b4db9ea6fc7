"""GPU benchmark: correctness of every GPU operator on the GPU, then tuned matmuls and ResNet-18 C1-C12 against
PyTorch (cuBLAS / cuDNN, float32 with TF32 off), in one run and with one timing protocol.

    python benchmarks/gpu.py --quick --json results/gpu/quick.json     # ~10 minutes on an H200
    python benchmarks/gpu.py --json results/gpu/full.json              # matmul 1024/4096, C1-C12 at batch 1 and 16

Protocol (both sides): inputs on the GPU, one warm-up, then ``repeat`` timings, each of enough back-to-back
launches to last ``min_repeat_ms``, between two CUDA events; the median of the repeats. tensortune's kernels
are launched by a native loop (``runtime.cuda``), PyTorch's by a Python loop (a few microseconds of launch
overhead per call, hidden while the GPU is busy with the previous call).

Tuning: the xgb tuner (cost model + simulated annealing), the runner measuring on the GPU one candidate at a
time, records in one log per run (the target ``cuda -arch=sm_90`` in each). Needs: an NVIDIA GPU and driver,
nvcc, cuda-python (``cuda.bindings``), PyTorch with CUDA, xgboost (see benchmarks/gpu_check.sh).
"""
from __future__ import annotations

import argparse
import math
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from common import write_json

QUICK_CONVS = ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10", "C11", "C12")
CORRECTNESS = [  # operator, shape: small and odd shapes of every GPU template
    ("matmul", dict(M=128, N=96, K=64)),
    ("matmul", dict(M=33, N=65, K=17)),
    ("conv2d", dict(IC=16, H=14, W=14, OC=32, K=3, stride=1, pad=1)),
    ("conv2d", dict(IC=3, H=23, W=23, OC=16, K=7, stride=2, pad=3)),
    ("conv2d", dict(N=2, IC=8, H=9, W=9, OC=8, K=1, stride=2, pad=0)),
    ("depthwise_conv2d", dict(C=32, H=28, W=28, K=3, stride=1, pad=1)),
    ("depthwise_conv2d", dict(C=16, H=15, W=15, K=3, stride=2, pad=1)),
]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="short tuning (the ~10-minute check of benchmarks/gpu_check.sh)")
    p.add_argument("--json", default="gpu.json", help="where to write the results")
    p.add_argument("--log", default=None, help="tuning log (default: next to --json)")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--matmul-trials", type=int, default=None)
    p.add_argument("--conv-trials", type=int, default=None)
    p.add_argument("--convs", nargs="*", default=None, help="ResNet-18 workloads (default: C1-C12)")
    p.add_argument("--batches", nargs="*", type=int, default=None, help="conv batch sizes (default: 1 16; quick: 1)")
    p.add_argument("--sizes", nargs="*", type=int, default=None,
                   help="square matmul sizes (default 1024 4096; quick: 4096)")
    p.add_argument("--skip-correctness", action="store_true")
    args = p.parse_args(argv)

    import tensortune as tt
    from tensortune.runtime.cuda import device_name, gpu_available

    ok, why = gpu_available()
    if not ok:
        print(f"no GPU to benchmark on: {why}", file=sys.stderr)
        return 2
    try:
        import xgboost  # noqa: F401
    except ImportError:
        print("xgboost is missing: the xgb tuner needs it (benchmarks/gpu_wheels.sh fetches a wheel to carry)",
              file=sys.stderr)
        return 2
    target = tt.Target.parse(f"cuda -arch={args.arch}")
    quick = args.quick
    out: dict = {"gpu": device_name(), "target": str(target), "quick": quick, "host": platform.node(),
                 "started": time.strftime("%Y-%m-%d %H:%M:%S"), "protocol": PROTOCOL}
    json_path = Path(args.json)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    log = Path(args.log) if args.log else json_path.with_suffix(".log.jsonl")
    print(f"GPU: {out['gpu']}  target: {target}", flush=True)

    if not args.skip_correctness:
        out["correctness"] = correctness(target, 2 if quick else 4)
        write_json(json_path, out)
    sizes = args.sizes or ([4096] if quick else [1024, 4096])
    mm_trials = args.matmul_trials or (96 if quick else 600)
    conv_trials = args.conv_trials or (24 if quick else 300)
    batches = args.batches or ([1] if quick else [1, 16])
    convs = args.convs or list(QUICK_CONVS)
    rows = []
    for n in sizes:
        rows.append(tune_and_compare(target, "matmul", dict(M=n, N=n, K=n), f"matmul {n}", mm_trials, log))
        out["results"] = rows
        write_json(json_path, out)
    for batch in batches:
        for name in convs:
            shape = _conv_shape(name, batch)
            rows.append(tune_and_compare(target, "conv2d", shape, f"resnet18:{name} b{batch}", conv_trials, log))
            out["results"] = rows
            write_json(json_path, out)
    out["summary"] = summary(rows)
    out["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    write_json(json_path, out)
    print(table(out))
    return 0


PROTOCOL = ("CUDA events around back-to-back launches lasting >= 20 ms per repeat, median of 5 repeats after a "
            "warm-up; inputs resident on the GPU; float32; PyTorch's calls replayed from a CUDA graph (its time "
            "launched from Python also recorded), with TF32 off "
            "(torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False)")
REPEAT, MIN_REPEAT_MS = 5, 20.0


def _conv_shape(name: str, batch: int) -> dict[str, int]:
    from tensortune import workloads

    r = workloads.get(f"resnet18:{name}")
    return dict(N=batch, IC=r["ic"], H=r["h"], W=r["w"], OC=r["oc"], K=r["k"], stride=r["stride"], pad=r["pad"])


def correctness(target, configs: int) -> list[dict]:
    """Every GPU template on small shapes: its default schedule and random configs, run on the GPU, against
    numpy."""
    import tensortune as tt
    from tensortune.autotvm.catalog import create_task
    from tensortune.build import build_library
    from tensortune.ops.operator import check_output

    rows = []
    for operator, shape in CORRECTNESS:
        task = create_task(operator, shape, target=target)
        canonical = task.make_inputs()
        expected = task.reference(canonical)
        checks = [("default", None)] + [(f"config {i}", i) for i in task.space.sample(configs, random.Random(0))]
        for label, index in checks:
            if index is None:
                op = task.operator
                sch = op.default_schedule(target)
            else:
                sch, op = task.instantiate(index)
            try:
                module = build_library(tt.lower(sch, op.args, "kernel"), target).load()
                arrays = op.prepare(*canonical)
                outp = np.full(op.output.shape, np.nan, np.float32)
                module(*arrays, outp)
                module.close()
                problem = check_output(outp, expected)
            except Exception as e:  # a failure here is a result to report, not the end of the benchmark
                problem = f"{type(e).__name__}: {e}"
            rows.append({"task": str(task), "check": label, "ok": problem is None, "problem": problem or ""})
            print(f"  correctness {task} {label}: {'ok' if problem is None else problem}", flush=True)
    return rows


def tune_and_compare(target, operator: str, shape: dict, label: str, trials: int, log: Path) -> dict:
    """Tune one task (xgb), re-time its best kernel and PyTorch's with the same protocol."""
    from tensortune.autotvm.catalog import create_task
    from tensortune.autotvm.measure import BuildOptions, MeasureOptions, Measurer, RunOptions
    from tensortune.autotvm.tune import tune

    task = create_task(operator, shape, target=target)
    options = MeasureOptions(builder=BuildOptions(timeout=60.0),
                             runner=RunOptions(number=2, repeat=3, min_repeat_ms=5.0, timeout=10.0))
    start = time.perf_counter()
    with Measurer(options) as measurer:
        result = tune(task, trials, "xgb", batch_size=32, measure=measurer, log_file=str(log), progress=False, seed=0)
    tune_s = time.perf_counter() - start
    row = {"name": label, "task": str(task), "trials": trials, "tune_s": round(tune_s, 1),
           "flops": task.flops, "best_config": None}
    if result.best_index is None:
        row["error"] = "no config of the tuning run was measured successfully"
        print(f"{label}: no valid config", flush=True)
        return row
    row["best_config"] = task.config(result.best_index).to_json()
    ours = time_tensortune(task, result.best_index)
    eager, peer = time_torch(operator, shape)
    row.update(ours_ms=ours * 1e3, torch_ms=peer * 1e3, torch_eager_ms=eager * 1e3,
               ours_tflops=task.flops / ours / 1e12, torch_tflops=task.flops / peer / 1e12, speedup=peer / ours,
               speedup_vs_eager=eager / ours)
    print(f"{label}: tensortune {ours * 1e3:.4f} ms, PyTorch {peer * 1e3:.4f} ms in a CUDA graph "
          f"({eager * 1e3:.4f} ms launched from Python), ratio {peer / ours:.2f}x ({trials} trials, {tune_s:.0f} s)",
          flush=True)
    return row


def time_tensortune(task, index: int) -> float:
    import tensortune as tt
    from tensortune.build import build_library
    from tensortune.ops.operator import check_output

    sch, op = task.instantiate(index)
    module = build_library(tt.lower(sch, op.args, "kernel"), task.target).load()
    canonical = task.make_inputs()
    arrays = op.prepare(*canonical)
    outp = np.full(op.output.shape, np.nan, np.float32)
    module(*arrays, outp)
    problem = check_output(outp, task.reference(canonical))
    if problem:
        raise RuntimeError(f"the tuned kernel of {task} is wrong: {problem}")
    seconds = module.time_evaluator(1, REPEAT, MIN_REPEAT_MS)(*arrays, outp).median
    module.close()
    return seconds


def time_torch(operator: str, shape: dict) -> tuple[float, float]:
    """Seconds per call of PyTorch's operator (cuBLAS / cuDNN): launched from Python, and replayed from a CUDA
    graph."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    if operator == "matmul":
        a = torch.rand(shape["M"], shape["K"], device=dev, generator=g)
        b = torch.rand(shape["K"], shape["N"], device=dev, generator=g)
        c = torch.empty(shape["M"], shape["N"], device=dev)

        def call():
            torch.mm(a, b, out=c)
    else:
        x = torch.rand(shape["N"], shape["IC"], shape["H"], shape["W"], device=dev, generator=g)
        w = torch.rand(shape["OC"], shape["IC"], shape["K"], shape["K"], device=dev, generator=g)

        def call():
            torch.nn.functional.conv2d(x, w, stride=shape["stride"], padding=shape["pad"])

    with torch.no_grad():
        for _ in range(3):
            call()
        torch.cuda.synchronize()
        eager = _median_per_call(call, torch)
        # the same calls replayed from a CUDA graph: the GPU's time without Python's per-call launch overhead,
        # which exceeds the kernels' own time on small batch-1 layers
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                call()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(GRAPH_CALLS):
                call()
        replayed = _median_per_call(graph.replay, torch) / GRAPH_CALLS
    return eager, replayed


GRAPH_CALLS = 64


def _median_per_call(call, torch) -> float:
    """Seconds per ``call``: the median of REPEAT timings of enough back-to-back calls to last MIN_REPEAT_MS."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    count = 1
    while True:  # calibrate the number of calls per repeat
        start.record()
        for _ in range(count):
            call()
        stop.record()
        stop.synchronize()
        ms = start.elapsed_time(stop)
        if ms >= MIN_REPEAT_MS or count >= 1 << 16:
            break
        count = max(count * 2, int(count * MIN_REPEAT_MS / max(ms, 1e-3)) + 1)
    times = []
    for _ in range(REPEAT):
        start.record()
        for _ in range(count):
            call()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / count * 1e-3)
    return statistics.median(times)


def summary(rows: list[dict]) -> dict:
    out = {}
    mm = [r for r in rows if r["name"] == "matmul 4096" and "speedup" in r]
    if mm:
        out["matmul_4096_vs_cublas"] = mm[0]["speedup"]
    for batch in (1, 16):
        conv = [r["speedup"] for r in rows if r["name"].startswith("resnet18:") and r["name"].endswith(f"b{batch}")
                and "speedup" in r]
        if conv:
            out[f"resnet18_b{batch}_geomean_vs_cudnn"] = math.exp(sum(math.log(x) for x in conv) / len(conv))
            out[f"resnet18_b{batch}_tasks"] = len(conv)
    out["targets"] = {"matmul_4096 >= 0.8": out.get("matmul_4096_vs_cublas", 0) >= 0.8,
                      "resnet18_b1_geomean >= 0.8": out.get("resnet18_b1_geomean_vs_cudnn", 0) >= 0.8}
    return out


def table(out: dict) -> str:
    lines = [f"GPU: {out['gpu']} ({out['target']}); {out['protocol']}", "",
             "| workload | tensortune ms | PyTorch ms (graph) | PyTorch ms (eager) | tensortune TFLOP/s | PyTorch TFLOP/s "
             "| PyTorch graph time / ours | trials |",
             "|---|---|---|---|---|---|---|---|"]
    for r in out.get("results", []):
        if "speedup" not in r:
            lines.append(f"| {r['name']} | failed: {r.get('error', '')} | | | | | | {r['trials']} |")
            continue
        eager = f"{r['torch_eager_ms']:.4f}" if "torch_eager_ms" in r else ""  # rows of runs before the graph
        lines.append(f"| {r['name']} | {r['ours_ms']:.4f} | {r['torch_ms']:.4f} | {eager} | {r['ours_tflops']:.2f} | "
                     f"{r['torch_tflops']:.2f} | {r['speedup']:.2f} | {r['trials']} |")
    checks = out.get("correctness", [])
    if checks:
        bad = [c for c in checks if not c["ok"]]
        lines += ["", f"correctness: {len(checks) - len(bad)}/{len(checks)} GPU kernels equal numpy"]
        lines += [f"  FAILED {c['task']} {c['check']}: {c['problem']}" for c in bad]
    lines += ["", f"summary: {out.get('summary', {})}"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

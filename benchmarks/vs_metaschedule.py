"""The template-free search against TVM's MetaSchedule on the same computations: ResNet-18 C6 (NCHW, 128 -> 128
channels, 28x28, 3x3, pad 1) and a 1024^3 matmul, at equal numbers of trials.

MetaSchedule (apache-tvm's ``tvm.s_tir.meta_schedule.tune_tir``: sketches by its CPU rules, evolutionary search under
its XGBoost model, LLVM code for this CPU) runs in a Python environment of its own (``--tvm-python``; made with
``python -m venv tvmenv && tvmenv/bin/pip install apache-tvm "apache-tvm-ffi==0.1.14.post0" xgboost-cpu psutil
cloudpickle``: 0.27 crashes with the newest ffi). A child process tunes each workload for each budget from an empty
work directory and reports its best-so-far curve (from its database, in the order measured), its wall time, and its
best kernel timed with TVM's time evaluator on ``--threads`` threads. tensortune tunes the same computation (``tensortune
tune ... --search auto``) for the same budgets, each from an empty log: its curve from the log, its wall time, its
best kernel timed again (``fastest_of``). One JSON line per (workload, budget), a markdown table, both curves of
each workload in one PNG.

    python benchmarks/vs_metaschedule.py --tvm-python /tmp/tvmenv/bin/python --mcpu rocketlake \\
        --json results/vs_metaschedule.json --png docs/figures/vs_metaschedule.png
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import positive_int, pyplot, write_json
from template_free import run_curve
from vs_libraries import cpu_model

WORKLOADS = {
    "resnet18:C6": (["--workload", "resnet18:C6"], 2 * 128 * 128 * 28 * 28 * 9),
    "matmul:1024": (["matmul", "--shape", "M=1024", "N=1024", "K=1024"], 2 * 1024 ** 3),
}

#: the child: plain TVM, reads its spec on stdin, prints one JSON line
CHILD = r'''
import json, sys, time
import numpy as np
import tvm
from tvm import te
try:
    from tvm import tir
except ImportError:
    from tvm import tirx as tir
from tvm.s_tir import meta_schedule as ms

spec = json.loads(sys.stdin.read())
if spec["workload"] == "resnet18:C6":
    data = te.placeholder((1, 128, 28, 28), name="data")
    weight = te.placeholder((128, 128, 3, 3), name="weight")
    pad = te.compute((1, 128, 30, 30), lambda n, c, y, x: tir.if_then_else(
        tir.all(y >= 1, y < 29, x >= 1, x < 29), data[n, c, y - 1, x - 1], tir.const(0.0, "float32")), name="pad")
    rc, rh, rw = (te.reduce_axis((0, e), name=n) for e, n in ((128, "rc"), (3, "rh"), (3, "rw")))
    out = te.compute((1, 128, 28, 28), lambda n, o, y, x: te.sum(
        pad[n, rc, y + rh, x + rw] * weight[o, rc, rh, rw], axis=[rc, rh, rw]), name="conv")
    args = [data, weight, out]
else:
    A = te.placeholder((1024, 1024), name="A")
    B = te.placeholder((1024, 1024), name="B")
    k = te.reduce_axis((0, 1024), name="k")
    out = te.compute((1024, 1024), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    args = [A, B, out]
mod = te.create_prim_func(args)
target = tvm.target.Target({"kind": "llvm", "mcpu": spec["mcpu"], "mtriple": "x86_64-linux-gnu",
                            "num-cores": spec["threads"]})
start = time.time()
db = ms.tune_tir(mod, target, spec["work_dir"], max_trials_global=spec["trials"],
                 num_trials_per_iter=spec["per_iter"], seed=0)
wall = time.time() - start
curve = [float(np.mean([float(s) for s in r.run_secs])) for r in db.get_all_tuning_records()]
sch = ms.tir_integration.compile_tir(db, mod, target)
f = tvm.compile(sch.mod, target=target)
f = f.jit() if hasattr(f, "jit") else f  # 0.27 returns an Executable; its module times
dev = tvm.cpu()
arrays = [tvm.runtime.tensor(np.random.default_rng(0).uniform(-1, 1, [int(d) for d in t.shape]).astype("float32"),
                             dev) for t in args]
timer = f.time_evaluator("main", dev, number=10, repeat=15, min_repeat_ms=20)
median = float(np.median(timer(*arrays).results))
print(json.dumps({"wall_s": wall, "trial_s": curve, "median_s": median}))
'''


def metaschedule(python: str, key: str, trials: int, threads: int, mcpu: str, per_iter: int) -> dict:
    with tempfile.TemporaryDirectory() as work:
        env = dict(os.environ, TVM_NUM_THREADS=str(threads))
        spec = {"workload": key, "trials": trials, "threads": threads, "mcpu": mcpu, "work_dir": work,
                "per_iter": per_iter}
        proc = subprocess.run([python, "-c", CHILD], input=json.dumps(spec), capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"MetaSchedule failed on {key}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tensortune_run(key: str, trials: int, out: Path, threads: int) -> dict:
    from tensortune import cli
    from tensortune.autotvm.record import load_records, top_records
    from tensortune.benchmarking.compare import fastest_of

    log = out / f"{key.replace(':', '_')}_{trials}.json"
    if log.exists():
        log.unlink()  # each budget from an empty log: its wall time is its own
    start = time.perf_counter()
    if cli.main(["tune", *WORKLOADS[key][0], "--search", "auto", "--trials", str(trials), "--threads", str(threads),
                 "--seed", "0", "--log", str(log), "--quiet", "--json"]) != 0:
        raise SystemExit(f"tensortune failed on {key}")
    wall = time.perf_counter() - start
    records = load_records(log)
    task = records[0].task()
    entries = [e for e in fastest_of([(task, r.config_index) for r in top_records(records, task, 3)], threads,
                                     passes=3) if "median_s" in e]
    return {"wall_s": wall, "median_s": min(e["median_s"] for e in entries), "log": str(log)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tvm-python", required=True, help="the python of an environment with apache-tvm")
    p.add_argument("--mcpu", required=True, help="LLVM's name of this CPU (rocketlake, znver4, ...)")
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--budgets", nargs="+", type=positive_int, default=[64, 200])
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--per-iter", type=positive_int, default=16, help="MetaSchedule's trials per round (ours: 16)")
    p.add_argument("--out", type=Path, default=Path("results/vs_metaschedule"))
    p.add_argument("--json", type=Path)
    p.add_argument("--png", type=Path)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for key in args.workloads:
        flops = WORKLOADS[key][1]
        for trials in args.budgets:
            ms = metaschedule(args.tvm_python, key, trials, args.threads, args.mcpu, args.per_iter)
            tt = tensortune_run(key, trials, args.out, args.threads)
            row = {"workload": key, "trials": trials,
                   "metaschedule": {"wall_s": ms["wall_s"], "gflops": flops / ms["median_s"] / 1e9,
                                    "curve_gflops": [flops / s / 1e9 for s in ms["trial_s"]]},
                   "tensortune": {"wall_s": tt["wall_s"], "gflops": flops / tt["median_s"] / 1e9,
                                  "curve_gflops": run_curve(Path(tt["log"]), trials).tolist()}}
            row["speed_ratio"] = row["tensortune"]["gflops"] / row["metaschedule"]["gflops"]
            row["wall_ratio"] = row["tensortune"]["wall_s"] / row["metaschedule"]["wall_s"]
            rows.append(row)
            print(json.dumps({k: v for k, v in row.items() if k not in ("metaschedule", "tensortune")}
                             | {s: {"wall_s": round(row[s]["wall_s"], 1), "gflops": round(row[s]["gflops"], 1)}
                                for s in ("metaschedule", "tensortune")}), flush=True)
    lines = [f"{cpu_model()}, {args.threads} threads, {time.strftime('%Y-%m-%d')}: best kernel of each (GFLOP/s, "
             "timed again) and tuning wall time.", "",
             "| workload | trials | tensortune | MetaSchedule | speed ratio | tensortune s | MetaSchedule s |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        lines.append(f"| {r['workload']} | {r['trials']} | {r['tensortune']['gflops']:.0f} | "
                     f"{r['metaschedule']['gflops']:.0f} | {r['speed_ratio']:.2f} | {r['tensortune']['wall_s']:.0f} | "
                     f"{r['metaschedule']['wall_s']:.0f} |")
    text = "\n".join(lines + ["", "`python benchmarks/vs_metaschedule.py " + " ".join(sys.argv[1:]) + "`"])
    print(text)
    if args.json:
        write_json(args.json, {"machine": cpu_model(), "rows": rows, "markdown": text})
    if args.png:
        plot(rows, args.png)


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        print("matplotlib is missing: no plot")
        return
    keys = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.5), squeeze=False)
    for ax, key in zip(axes[0], keys):
        r = max((r for r in rows if r["workload"] == key), key=lambda r: r["trials"])
        for name in ("tensortune", "metaschedule"):
            import numpy as np

            curve = np.maximum.accumulate(r[name]["curve_gflops"]) if r[name]["curve_gflops"] else []
            ax.plot(range(1, len(curve) + 1), curve, label=f"{name} ({r[name]['wall_s']:.0f} s)")
        ax.set_title(key)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOP/s so far")
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()

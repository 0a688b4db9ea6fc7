"""The template-free search against the hand-written templates and the peers, at an equal number of trials.

For each workload (ResNet-18 C1-C12, matmul 512/1024/2048, and operators no template computes, in the shapes of
BERT-base, RegNetY and a DCGAN generator: ``NO_TEMPLATE``), two tuning runs of ``--trials`` each, logs under ``--out``
(running again resumes them; the operators without a template have the second only):

* *templates*: ``tensortune tune ... --search templates``, every template that computes the workload sharing the
  trials (the network tuner's scheduler; direct, spatial-pack, packed and Winograd convolutions);
* *auto*: ``tensortune tune ... --search auto``, the template-free search alone (sketches of the plain NCHW or
  row-major declaration, evolutionary search under the cost model).

Then, in the same run, for each workload: the ``--top`` fastest logged configs of each run timed again in turns
(``benchmarking.compare.fastest_of``), the faster of each kept; the ratio ``template time / auto time`` (above 1:
the template-free kernel is faster); and the template-free kernel against the peers (onnxruntime's Conv, numpy's
matmul) over ``--rounds`` interleaved rounds (``compare_kernels``; ratio: peer time / ours). It prints one JSON
line per workload and a markdown table, writes ``--json``, and draws both best-so-far curves of each workload in
one PNG (``--png``).

    python benchmarks/template_free.py --trials 300 --json results/template_free.json --png docs/figures/template_free.png
    python benchmarks/template_free.py --workloads resnet18:C2 resnet18:C6 matmul:1024 --trials 100
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from common import positive_int, pyplot, write_json
from vs_libraries import CONVS, MATMULS, cpu_model, geomean

SEARCHES = ("templates", "auto")


#: operators no template computes, in the shapes of the networks they come from
NO_TEMPLATE = {
    "bert:scores": ["batch_matmul", "--shape", "batch=12", "M=128", "N=128", "K=64"],  # Q K^T, K stored transposed
    "bert:context": ["batch_matmul", "--shape", "batch=12", "M=128", "N=64", "K=128"],  # softmax(...) V
    "bert:softmax": ["softmax", "--shape", "M=1536", "N=128"],  # 12 heads x 128 rows of 128
    "bert:layernorm": ["layer_norm", "--shape", "M=128", "N=768"],
    "regnety:group": ["conv2d", "--shape", "IC=208", "OC=208", "H=14", "W=14", "K=3", "pad=1", "groups=26"],
    "dcgan:up2": ["conv2d_transpose", "--shape", "IC=512", "OC=256", "H=4", "W=4", "K=4", "stride=2", "pad=1"],
}


def tune_args(key: str) -> list[str]:
    """The ``tensortune tune`` arguments naming a workload (``resnet18:C6``, ``matmul:1024``, ``bert:softmax``)."""
    if key.startswith("matmul:"):
        n = key.split(":")[1]
        return ["matmul", "--shape", f"M={n}", f"N={n}", f"K={n}"]
    return NO_TEMPLATE.get(key) or ["--workload", key]


def searches(key: str) -> tuple[str, ...]:
    """The searches of a workload: the template-free one alone where no template computes it (in its layout)."""
    return ("auto",) if key in NO_TEMPLATE else SEARCHES


def log_path(out: Path, key: str, search: str) -> Path:
    return out / f"{key.replace(':', '_')}_{search}.json"


def tune_all(keys, trials: int, out: Path, seed: int) -> None:
    from tensortune import cli

    out.mkdir(parents=True, exist_ok=True)
    for key in keys:
        for search in searches(key):
            t0 = time.time()
            code = cli.main(["tune", *tune_args(key), "--search", search, "--trials", str(trials), "--seed",
                             str(seed), "--log", str(log_path(out, key, search)), "--quiet", "--json"])
            if code != 0:
                raise SystemExit(f"tuning {key} ({search}) failed with exit code {code}")
            print(f"tuned {key} ({search}) in {time.time() - t0:.0f} s", flush=True)


def candidates(log: Path, top: int) -> list[tuple]:
    """(task, config index) of the ``top`` fastest records of each task in ``log``."""
    from tensortune.autotvm.record import load_records, top_records

    records = load_records(log)
    tasks = {r.workload: r.task() for r in records}
    return [(task, r.config_index) for task in tasks.values() for r in top_records(records, task, top)]


def time_workload(key: str, out: Path, threads: int, top: int, rounds: int, repeat: int) -> dict:
    from tensortune.benchmarking.compare import compare_kernels, fastest_of

    row: dict = {"workload": key, "threads": threads}
    best = {}
    for search in searches(key):
        entries = fastest_of(candidates(log_path(out, key, search), top), threads, passes=3)
        timed = [e for e in entries if "median_s" in e]
        if not timed:
            row[f"{search}_error"] = entries[0]["error"] if entries else "no record"
            continue
        best[search] = min(timed, key=lambda e: e["median_s"])
        task = best[search]["task"]
        row[search] = {"template": task.name, "config_index": best[search]["config_index"],
                       "gflops": task.flops / best[search]["median_s"] / 1e9}
    if len(best) == 2:
        row["auto_vs_templates"] = best["templates"]["median_s"] / best["auto"]["median_s"]
    if "auto" in best:
        kernels = compare_kernels(best["auto"]["task"], best["auto"]["config_index"], threads, repeat, 20.0, rounds)
        row["peers"] = {name: {"gflops": k.get("gflops"), "vs_auto": k.get("tuned_speedup")}
                        for name, k in kernels.items() if name != "tensortune" and "median_s" in k}
    return row


def markdown(rows: list[dict], trials: int, machine: str, command: str) -> str:
    lines = [f"{machine}, {rows[0]['threads']} threads, {time.strftime('%Y-%m-%d')}, {trials} trials per search. "
             "GFLOP/s of the best kernel of each search (retimed in turns); template-free / templates: speed ratio "
             "(above 1: the template-free kernel is faster); peers: their time over the template-free kernel's.",
             "", "| workload | templates (winner) | template-free | template-free / templates | onnxruntime | numpy |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        t, a, p = r.get("templates", {}), r.get("auto", {}), r.get("peers", {})

        def peer(name):
            return f"{p[name]['vs_auto']:.2f}" if name in p and p[name]["vs_auto"] else "-"

        templates = f"{t['gflops']:.0f} ({t['template']})" if t else "no template"
        ratio = f"{r['auto_vs_templates']:.2f}" if "auto_vs_templates" in r else "-"
        lines.append(f"| {r['workload']} | {templates} | {a.get('gflops', 0):.0f} | {ratio} | {peer('onnxruntime')} | "
                     f"{peer('numpy')} |")
    convs = [r.get("auto_vs_templates") for r in rows if r["workload"].startswith("resnet18:")]
    if convs:
        lines += ["", f"Geometric mean over the ResNet-18 layers, template-free / templates: {geomean(convs):.2f}."]
    return "\n".join(lines + ["", f"`{command}`"])


def run_curve(log: Path, trials: int):
    """Best GFLOP/s so far after each record of the log, in the order measured (over every task of the run)."""
    import numpy as np

    from tensortune.autotvm.record import load_records

    flops: dict[str, int] = {}
    g = []
    for r in load_records(log)[:trials]:
        f = flops.setdefault(r.workload, r.task().flops)
        g.append(f / r.cost / 1e9 if r.ok else 0.0)
    return np.maximum.accumulate(g) if g else np.zeros(0)


def plot(rows: list[dict], out: Path, trials: int, path: Path) -> None:
    plt = pyplot()
    if plt is None:
        print("matplotlib is missing: no plot")
        return
    n = len(rows)
    cols = min(4, n)
    fig, axes = plt.subplots(-(-n // cols), cols, figsize=(4 * cols, 3 * -(-n // cols)), squeeze=False)
    for ax, row in zip(axes.flat, rows):
        for search in searches(row["workload"]):
            curve = run_curve(log_path(out, row["workload"], search), trials)
            ax.plot(range(1, len(curve) + 1), curve, label=search)
        ax.set_title(row["workload"])
        ax.set_xlabel("trials")
        ax.set_ylabel("GFLOP/s")
        ax.legend()
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", default=[*CONVS, *MATMULS, *NO_TEMPLATE])
    p.add_argument("--trials", type=positive_int, default=300)
    p.add_argument("--out", type=Path, default=Path("results/template_free"))
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--top", type=positive_int, default=3)
    p.add_argument("--rounds", type=positive_int, default=3)
    p.add_argument("--repeat", type=positive_int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--skip-tune", action="store_true")
    p.add_argument("--json", type=Path)
    p.add_argument("--png", type=Path)
    args = p.parse_args()
    if not args.skip_tune:
        tune_all(args.workloads, args.trials, args.out, args.seed)
    rows = []
    for key in args.workloads:
        rows.append(time_workload(key, args.out, args.threads, args.top, args.rounds, args.repeat))
        print(json.dumps(rows[-1]), flush=True)
    import sys

    text = markdown(rows, args.trials, cpu_model(), "python benchmarks/template_free.py " + " ".join(sys.argv[1:]))
    print(text)
    if args.json:
        write_json(args.json, {"machine": cpu_model(), "trials": args.trials, "rows": rows, "markdown": text})
    if args.png:
        plot(rows, args.out, args.trials, args.png)


if __name__ == "__main__":
    main()

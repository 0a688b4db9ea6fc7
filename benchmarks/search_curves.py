"""The paper's central figure on this machine: best GFLOP/s against trials for each tuner.

On C1, C2, C5, C6 (ResNet-18 conv2d) and a 512^3 matmul, runs random and GA (2 runs of 1,000
trials) and the model-based ``xgb`` (rank) and ``xgb-reg`` (3 runs of 300 trials), each with its
own seed and log. Every run appends to its log under ``--out``, so the benchmark resumes where it
stopped (run it again with the same arguments). Then it prints a markdown table of the trials each
method needs to reach 90% / 95% of the best throughput any method found, writes ``--json``, and last
a PNG per workload (mean of runs, band = min..max; skipped with a note without matplotlib).

A run's logged best is the luckiest of its timings: among many near-equal configs, more trials draw
more upward noise. ``--retime`` therefore also builds the config each run would deploy (its logged
best after 300 trials, and after all of them) and times them all again, back to back in interleaved
rounds (15 timings of >= 20 ms each, median); the target is judged on those figures too.

    python benchmarks/search_curves.py                 # full run: many hours; resumable
    python benchmarks/search_curves.py --quick         # C6 and matmul, short runs: a few minutes
    nohup python benchmarks/search_curves.py > results/search_curves.txt 2>&1 &
"""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from common import best_curve, pyplot, trials_to_reach, write_json

WORKLOADS = ("resnet18:C6", "matmul:512", "resnet18:C2", "resnet18:C5", "resnet18:C1")


@dataclass(frozen=True)
class Method:
    name: str
    runs: int
    trials: int


FULL = (Method("random", 2, 1000), Method("ga", 2, 1000), Method("xgb", 3, 300), Method("xgb-reg", 3, 300))
QUICK = (Method("random", 1, 96), Method("ga", 1, 96), Method("xgb", 1, 96), Method("xgb-reg", 1, 96))


def make_task(key: str):
    from tensortune.autotvm.catalog import create_task, task_from_workload

    if key.startswith("matmul:"):
        n = int(key.split(":")[1])
        return create_task("matmul", {"M": n, "N": n, "K": n})
    return task_from_workload(key)


def run_all(workloads, methods, out: Path, batch_size: int) -> None:
    from tensortune.autotvm.measure.measure import Measurer
    from tensortune.autotvm.tune import tune

    with Measurer() as measurer:
        for key in workloads:
            task = make_task(key)
            for m in methods:
                for seed in range(m.runs):
                    log = out / key.replace(":", "_") / f"{m.name}_seed{seed}.json"
                    log.parent.mkdir(parents=True, exist_ok=True)
                    t0 = time.time()
                    r = tune(task, m.trials, tuner=m.name, batch_size=batch_size, measure=measurer.measure,
                             log_file=log, progress=False, seed=seed)
                    print(f"{key:14s} {m.name:8s} seed {seed}: best {r.best_gflops:7.1f} GFLOP/s after "
                          f"{len(r.history)} trials ({time.time() - t0:.0f} s this run)", flush=True)


def analyse(workloads, methods, out: Path, retime: bool = False) -> tuple[dict, dict]:
    """The summary of each workload's runs, and their curves ``{workload: {method: [curve per run]}}``."""
    summary: dict = {}
    all_curves: dict = {}
    for key in workloads:
        task = make_task(key)
        curves = {}
        for m in methods:
            logs = [out / key.replace(":", "_") / f"{m.name}_seed{s}.json" for s in range(m.runs)]
            cs = [best_curve(log, task, m.trials) for log in logs if log.exists()]
            cs = [c for c in cs if len(c)]
            if cs:
                curves[m.name] = cs
        if not curves:
            continue
        best = max(c[-1] for cs in curves.values() for c in cs)
        row: dict = {"best_gflops": round(float(best), 1), "methods": {}}
        for name, cs in curves.items():
            n = min(len(c) for c in cs)
            row["methods"][name] = {
                "runs": len(cs), "trials": n,
                "final_mean_gflops": round(float(np.mean([c[n - 1] for c in cs])), 1),
                "trials_to_90pct": [trials_to_reach(c, 0.9 * best) for c in cs],
                "trials_to_95pct": [trials_to_reach(c, 0.95 * best) for c in cs],
            }
        quality = model_quality(out / key.replace(":", "_") / "random_seed0.json", task)
        if quality:
            row["model_quality"] = quality
        if retime:
            row["retimed"] = retimed_bests(key, task, methods, out)
        if "random" in curves and "xgb" in curves:
            target = float(np.mean([c[-1] for c in curves["random"]]))
            hits = [trials_to_reach(c, target) for c in curves["xgb"]]
            row["xgb_trials_to_random_final"] = hits
        summary[key] = row
        all_curves[key] = curves
    return summary, all_curves


def retimed_bests(key: str, task, methods, out: Path, checkpoints=(300,), rounds: int = 5) -> dict:
    """GFLOP/s of each run's deployed config (its logged best after n trials), timed again.

    All the configs are timed in ``rounds`` interleaved rounds (3 timings of >= 20 ms each per round;
    the median of all is reported), so that a slow or fast spell of the shared machine affects them
    all alike instead of favouring whichever config was timed during it.
    """
    from tensortune.autotvm.record import load_records, task_records
    from tensortune.build import build
    from tensortune.ops.operator import check_output

    chosen: dict[str, list[int]] = {}
    for m in methods:
        for n in sorted({*checkpoints, m.trials}):
            if n > m.trials:
                continue
            for seed in range(m.runs):
                log = out / key.replace(":", "_") / f"{m.name}_seed{seed}.json"
                recs = [r for r in task_records(load_records(log), task)[:n] if r.ok] if log.exists() else []
                if recs:
                    chosen.setdefault(f"{m.name}@{n}", []).append(min(recs, key=lambda r: r.cost).config_index)
    canonical = task.make_inputs(seed=0)
    kernels = {}
    for idx in sorted({i for v in chosen.values() for i in v}):
        sch, op = task.instantiate(idx)
        module = build(sch, list(op.args), task.target)
        args, out_arr = task.kernel_inputs(idx, canonical), op.empty_output()
        module(*args, out_arr)
        if check_output(out_arr, np.asarray(task.reference(canonical, idx))) is None:
            kernels[idx] = (module, args, out_arr)
    runs: dict[int, list[float]] = {i: [] for i in kernels}
    for _ in range(rounds):
        for idx, (module, args, out_arr) in kernels.items():
            runs[idx] += module.time_evaluator(number=1, repeat=3, min_repeat_ms=20.0)(*args, out_arr).results
    gflops = {i: task.flops / float(np.median(r)) / 1e9 for i, r in runs.items()}
    return {label: [round(gflops.get(i, 0.0), 1) for i in idxs] for label, idxs in chosen.items()}


def model_quality(log: Path, task, train_frac: float = 0.5) -> dict | None:
    """Cost-model quality on held-out measurements: train on the first part of a random-search log,
    report pairwise ranking accuracy and the top-k peak score on the rest, for both losses."""
    from tensortune.autotvm.cost_model import XGBCostModel, pairwise_accuracy, topk_peak
    from tensortune.autotvm.features import FeatureExtractor
    from tensortune.autotvm.record import load_records, task_records

    if not log.exists():
        return None
    recs = task_records(load_records(log), task)
    if len(recs) < 64:
        return None
    X = FeatureExtractor(task)([r.config_index for r in recs])
    y = np.array([task.flops / r.cost if r.ok else 0.0 for r in recs])
    n = int(len(recs) * train_frac)
    out = {"train": n, "test": len(recs) - n}
    for loss in ("rank", "reg"):
        m = XGBCostModel(loss)
        m.fit(X[:n], y[:n] / y[:n].max())
        p = m.predict(X[n:])
        out[loss] = {"pairwise_accuracy": round(pairwise_accuracy(y[n:], p), 3),
                     "top8_peak": round(topk_peak(y[n:], p, 8), 3),
                     "top32_peak": round(topk_peak(y[n:], p, 32), 3)}
    return out


def plot(all_curves: dict, out: Path) -> None:
    """One PNG of tuning curves per workload under ``out`` (none, after a note, without matplotlib)."""
    plt = pyplot() if all_curves else None
    if plt is None:
        return
    for key, curves in all_curves.items():
        _plot(plt, key, curves, out / f"{key.replace(':', '_')}.png")


def _plot(plt, key: str, curves: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, cs in curves.items():
        n = min(len(c) for c in cs)
        arr = np.stack([c[:n] for c in cs])
        x = np.arange(1, n + 1)
        ax.plot(x, arr.mean(0), label=f"{name} ({len(cs)} runs)")
        ax.fill_between(x, arr.min(0), arr.max(0), alpha=0.2)
    ax.set_xlabel("trials")
    ax.set_ylabel("best GFLOP/s")
    ax.set_title(f"{key}: tuning curves")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(summary: dict) -> str:
    lines = ["| workload | best GFLOP/s | method | runs | trials | final GFLOP/s (mean) | trials to 90% | "
             "trials to 95% |", "|---|---|---|---|---|---|---|---|"]
    for key, row in summary.items():
        for name, m in row["methods"].items():
            lines.append(f"| {key} | {row['best_gflops']} | {name} | {m['runs']} | {m['trials']} | "
                         f"{m['final_mean_gflops']} | {m['trials_to_90pct']} | {m['trials_to_95pct']} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="C6 and matmul 512, one short run per method")
    p.add_argument("--out", default="results/search_curves", help="folder of logs and PNGs (resumable)")
    p.add_argument("--workloads", nargs="*", help=f"subset of {WORKLOADS}")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--analyse-only", action="store_true", help="only read the logs and write the report")
    p.add_argument("--retime", action="store_true", help="time each run's deployed config again (see above)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    methods = QUICK if args.quick else FULL
    workloads = args.workloads or (("resnet18:C6", "matmul:512") if args.quick else WORKLOADS)
    out = Path(args.out) / ("quick" if args.quick else "full")
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if not args.analyse_only:
        run_all(workloads, methods, out, args.batch_size)
    summary, curves = analyse(workloads, methods, out, retime=args.retime)
    print(markdown(summary))
    for key, row in summary.items():
        if "model_quality" in row:
            print(f"{key}: cost model on held-out random-search measurements: {row['model_quality']}")
        if "xgb_trials_to_random_final" in row:
            print(f"{key}: xgb runs reach random search's final best after {row['xgb_trials_to_random_final']} trials")
        if "retimed" in row:
            print(f"{key}: deployed configs timed again (GFLOP/s per run): {row['retimed']}")
    if args.json:
        write_json(args.json, summary)
    plot(curves, out)  # last: a missing plotting library must not lose the results


if __name__ == "__main__":
    main()

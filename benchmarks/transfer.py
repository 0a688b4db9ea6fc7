"""Transfer learning: does the history of earlier workloads make tuning a new one faster?

Tunes ResNet-18 C1..C12 in order with the ``xgb`` tuner twice: without history, and with the
records of all earlier workloads' transfer runs as ``history`` (a global model on
structure-invariant features seeds the cost model). For each workload it reports the trials each
run needs to reach 90% of the no-transfer run's final best, and the ratio. Logs live under
``--out``; running again resumes.

    python benchmarks/transfer.py [--trials 200] [--json PATH]
    python benchmarks/transfer.py --quick        # C1..C4, 64 trials each
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def best_curve(log: Path, task) -> np.ndarray:
    from tensortune.autotvm.record import load_records, task_records

    recs = task_records(load_records(log), task)
    g = np.array([task.flops / r.mean_cost / 1e9 if r.ok else 0.0 for r in recs])
    return np.maximum.accumulate(g) if len(g) else g


def first_reach(curve: np.ndarray, level: float) -> int | None:
    hit = np.nonzero(curve >= level)[0]
    return int(hit[0]) + 1 if len(hit) else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="results/transfer")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()

    from tensortune.autotvm.measure.measure import Measurer
    from tensortune.autotvm.record import load_records
    from tensortune.autotvm.tasks import task_from_workload
    from tensortune.autotvm.tune import tune

    names = [f"C{i}" for i in range(1, 5 if args.quick else 13)]
    trials = 64 if args.quick else args.trials
    out = Path(args.out) / ("quick" if args.quick else "full")
    (out / "plain").mkdir(parents=True, exist_ok=True)
    (out / "transfer").mkdir(parents=True, exist_ok=True)
    rows = []
    with Measurer() as m:
        for k, name in enumerate(names):
            task = task_from_workload(f"resnet18:{name}")
            plain = out / "plain" / f"{name}.json"
            tune(task, trials, tuner="xgb", batch_size=args.batch_size, measure=m.measure, log_file=plain,
                 progress=False, seed=0)
            history = [r for prev in names[:k] for r in load_records(out / "transfer" / f"{prev}.json")]
            transfer = out / "transfer" / f"{name}.json"
            tune(task, trials, tuner="xgb", batch_size=args.batch_size, measure=m.measure, log_file=transfer,
                 progress=False, seed=0, history=history or None)
            cp, ct = best_curve(plain, task), best_curve(transfer, task)
            level = 0.9 * cp[-1]
            row = {"workload": name, "history_records": len(history), "plain_best": round(float(cp[-1]), 1),
                   "transfer_best": round(float(ct[-1]), 1), "plain_trials_to_90": first_reach(cp, level),
                   "transfer_trials_to_90": first_reach(ct, level)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    ratios = [r["plain_trials_to_90"] / r["transfer_trials_to_90"] for r in rows[1:]
              if r["plain_trials_to_90"] and r["transfer_trials_to_90"]]
    print("| workload | history records | no transfer: best GFLOP/s | trials to 90% | transfer: best GFLOP/s | "
          "trials to 90% |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['history_records']} | {r['plain_best']} | {r['plain_trials_to_90']} | "
              f"{r['transfer_best']} | {r['transfer_trials_to_90']} |")
    if ratios:
        print(f"mean speedup in trials to 90% (workloads with history): {np.mean(ratios):.2f}x "
              f"(geometric {np.exp(np.mean(np.log(ratios))):.2f}x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "ratios": ratios}, f, indent=2)


if __name__ == "__main__":
    main()

"""Transfer learning: does the history of earlier workloads make tuning a new one faster?

Tunes ResNet-18 C1..C12 in order with the ``xgb`` tuner twice: without history, and with the
records of all earlier workloads' transfer runs as ``history`` (a global model on
structure-invariant features seeds the cost model). Both runs start without the cost model shipped
for the ISA (``pretrained=False``): the runs without history are a cold start, and the transfer runs
learn from this sequence's records alone (``pretrain.py --evaluate`` compares the shipped model on
held-out workloads). For each workload it reports the trials each run needs to reach 90% of the
no-transfer run's final best, and the ratio. Logs live under ``--out`` (one folder per seed); running
again resumes.

    python benchmarks/transfer.py [--trials 200] [--seeds 3] [--json PATH]
    python benchmarks/transfer.py --quick        # C1..C4, 64 trials each
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from common import best_curve, trials_to_reach, write_json


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=200)
    p.add_argument("--seeds", type=int, default=1, help="repeat both runs of every workload with seeds 0..N-1")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="results/transfer")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()

    from tensortune.autotvm.measure.measure import Measurer

    names = [f"C{i}" for i in range(1, 5 if args.quick else 13)]
    trials = 64 if args.quick else args.trials
    out = Path(args.out) / ("quick" if args.quick else "full")
    rows = []
    with Measurer() as m:
        for seed in range(args.seeds):
            rows += run_seed(names, trials, out / f"seed{seed}", seed, args.batch_size, m.measure)
    summary = summarise(rows)
    print(markdown(rows, summary))
    if args.json:
        write_json(args.json, {"trials": trials, "seeds": args.seeds, "rows": rows, **summary})


def run_seed(names, trials, out: Path, seed: int, batch_size: int, measure) -> list[dict]:
    """Both runs of every workload, in order, with one seed; the transfer runs' logs are the history."""
    from tensortune.autotvm.record import load_records
    from tensortune.autotvm.catalog import task_from_workload
    from tensortune.autotvm.tune import tune

    (out / "plain").mkdir(parents=True, exist_ok=True)
    (out / "transfer").mkdir(parents=True, exist_ok=True)
    rows = []
    for k, name in enumerate(names):
        task = task_from_workload(f"resnet18:{name}")
        plain = out / "plain" / f"{name}.json"
        tune(task, trials, tuner="xgb", batch_size=batch_size, measure=measure, log_file=plain,
             progress=False, seed=seed, pretrained=False)
        history = [r for prev in names[:k] for r in load_records(out / "transfer" / f"{prev}.json")]
        transfer = out / "transfer" / f"{name}.json"
        tune(task, trials, tuner="xgb", batch_size=batch_size, measure=measure, log_file=transfer,
             progress=False, seed=seed, history=history or None, pretrained=False)
        cp, ct = best_curve(plain, task), best_curve(transfer, task)
        level = 0.9 * cp[-1]
        row = {"workload": name, "seed": seed, "history_records": len(history),
               "plain_best": round(float(cp[-1]), 1), "transfer_best": round(float(ct[-1]), 1),
               "plain_trials_to_90": trials_to_reach(cp, level), "transfer_trials_to_90": trials_to_reach(ct, level)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def summarise(rows: list[dict]) -> dict:
    """Ratios of trials to 90% (no transfer / transfer) over the runs that had history."""
    pairs = [(r["plain_trials_to_90"], r["transfer_trials_to_90"]) for r in rows
             if r["history_records"] and r["plain_trials_to_90"] and r["transfer_trials_to_90"]]
    ratios = [a / b for a, b in pairs]
    if not ratios:
        return {"ratios": []}
    return {"ratios": [round(x, 3) for x in ratios], "mean_ratio": round(float(np.mean(ratios)), 2),
            "geomean_ratio": round(float(np.exp(np.mean(np.log(ratios)))), 2),
            "total_trials_plain": sum(a for a, _ in pairs), "total_trials_transfer": sum(b for _, b in pairs),
            "faster_with_transfer": sum(a > b for a, b in pairs), "slower_with_transfer": sum(a < b for a, b in pairs)}


def markdown(rows: list[dict], summary: dict) -> str:
    by_name: dict[str, list[dict]] = {}
    for r in rows:
        by_name.setdefault(r["workload"], []).append(r)
    lines = ["| workload | history records | no transfer: best GFLOP/s | trials to 90% | transfer: best GFLOP/s | "
             "trials to 90% |", "|---|---|---|---|---|---|"]
    for name, rs in by_name.items():
        def col(k):
            return ", ".join(str(r[k]) for r in rs)
        lines.append(f"| {name} | {rs[0]['history_records']} | {col('plain_best')} | {col('plain_trials_to_90')} | "
                     f"{col('transfer_best')} | {col('transfer_trials_to_90')} |")
    if summary.get("ratios"):
        lines.append(f"\nTrials to 90% over the {len(summary['ratios'])} runs with history: "
                     f"{summary['mean_ratio']:.2f}x fewer with transfer (arithmetic mean of the ratios), "
                     f"{summary['geomean_ratio']:.2f}x (geometric mean), "
                     f"{summary['total_trials_plain'] / summary['total_trials_transfer']:.2f}x in total "
                     f"({summary['total_trials_plain']} vs {summary['total_trials_transfer']} trials); "
                     f"faster with transfer in {summary['faster_with_transfer']}, slower in "
                     f"{summary['slower_with_transfer']}.")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

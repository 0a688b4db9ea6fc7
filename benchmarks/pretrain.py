"""Train the cost model shipped with the package, and measure what it saves on workloads it never saw.

Training: every record of the tuning logs under ``--data`` (``data/logs/<isa>/*.jsonl[.gz]``: the
project's own logs, kept in the repository as the data source) except those of the held-out workloads
goes into one ranking model on the structure-invariant relation features (as ``--history`` transfer
does), saved as ``tensortune/autotvm/pretrained/<isa>.json``.

Evaluation (``--evaluate``): each held-out workload is tuned from scratch with the ``xgb`` tuner, once
with the pretrained model and once without (``pretrained=False``), ``--seeds`` times each, for
``--trials`` trials; reported: the trials each run needs to reach 90% of the best GFLOP/s any run of that
workload found, and the final best.

    python benchmarks/pretrain.py                        # train on all logs of this machine's ISA
    python benchmarks/pretrain.py --holdout resnet18:C9 resnet18:C10 --evaluate --trials 150
"""
from __future__ import annotations

import argparse
import gzip
import statistics
import tempfile
import time
from pathlib import Path

from common import best_curve, trials_to_reach, write_json

ROOT = Path(__file__).resolve().parent.parent


def read_logs(folder: Path):
    """All records of the ``.jsonl`` and ``.jsonl.gz`` logs in ``folder``."""
    from tensortune.autotvm.record import load_records

    records = []
    for path in sorted(folder.glob("*.jsonl*")):
        if path.suffix == ".gz":
            with tempfile.NamedTemporaryFile("wb", suffix=".jsonl") as tmp:
                tmp.write(gzip.decompress(path.read_bytes()))
                tmp.flush()
                records += load_records(tmp.name)
        else:
            records += load_records(path)
    return records


def task_of(key: str, target):
    from tensortune.autotvm.catalog import create_task, task_from_workload

    if key.startswith("matmul:"):
        n = int(key.split(":")[1])
        return create_task("matmul", {"M": n, "N": n, "K": n}, target=target)
    if ":" in key and key.split(":")[0] in ("resnet18", "mobilenet"):
        return task_from_workload(key, template="conv2d_nchwc_packed" if key.startswith("resnet18") else None,
                                  target=target)
    raise SystemExit(f"unknown workload {key!r}: use resnet18:C1..C12, mobilenet:D1..D9 or matmul:N")


def train(records, holdout_keys: set[str], out: Path, seed: int) -> dict:
    from tensortune.autotvm.tuner.xgb import train_global_model

    kept = [r for r in records if r.workload not in holdout_keys]
    t0 = time.perf_counter()
    model = train_global_model(kept, seed=seed)
    if model is None:
        raise SystemExit("no successful record to train on")
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out)
    workloads = sorted({r.workload for r in kept})
    print(f"trained on {len(kept)} records of {len(workloads)} workloads in {time.perf_counter() - t0:.1f} s "
          f"-> {out} ({out.stat().st_size // 1024} KiB)")
    return {"records": len(kept), "workloads": workloads, "model": str(out)}


def evaluate(keys, target, trials: int, seeds: int, batch: int) -> list[dict]:
    from tensortune.autotvm.measure import Measurer
    from tensortune.autotvm.tune import tune
    from tensortune.autotvm.tuner import XGBTuner

    rows = []
    with Measurer() as measurer, tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            task = task_of(key, target)
            curves = {}
            for with_model in (True, False):
                for seed in range(seeds):
                    log = Path(tmp) / f"{key.replace(':', '_')}_{with_model}_{seed}.jsonl"
                    tuner = XGBTuner(task, seed=seed, pretrained=with_model)
                    tune(task, trials, tuner=tuner, batch_size=batch, measure=measurer.measure, log_file=log,
                         progress=False)
                    curves[(with_model, seed)] = best_curve(log, task, trials)
            best = max(float(c.max()) for c in curves.values() if len(c))
            row = {"workload": key, "best_gflops": best}
            for with_model, label in ((True, "pretrained"), (False, "scratch")):
                reach = [trials_to_reach(curves[(with_model, s)], 0.9 * best) for s in range(seeds)]
                row[label] = {"trials_to_90": reach, "final_gflops": [float(curves[(with_model, s)].max())
                                                                      for s in range(seeds)]}
            rows.append(row)
            print(row, flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="native")
    p.add_argument("--data", help="folder of training logs (default data/logs/<isa>)")
    p.add_argument("--holdout", nargs="*", default=[], help="workloads left out of training (evaluated on)")
    p.add_argument("--evaluate", action="store_true", help="tune the held-out workloads with and without the model")
    p.add_argument("--trials", type=int, default=150)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()

    from tensortune.autotvm.pretrained import model_file
    from tensortune.target import Target

    target = Target.parse(args.target)
    data = Path(args.data) if args.data else ROOT / "data" / "logs" / target.isa.value
    holdout = {task_of(k, target).workload_key for k in args.holdout}
    records = [r for r in read_logs(data) if Target.parse(r.target).isa is target.isa]
    out = ROOT / "tensortune" / "autotvm" / "pretrained" / model_file(target)
    result = {"target": str(target), "data": str(data), "holdout": args.holdout,
              "training": train(records, holdout, out, args.seed)}
    if args.evaluate:
        rows = evaluate(args.holdout, target, args.trials, args.seeds, args.batch_size)
        result["evaluation"] = rows
        ratios = []
        for r in rows:
            with_m = [t for t in r["pretrained"]["trials_to_90"] if t]
            without = [t for t in r["scratch"]["trials_to_90"] if t]
            if with_m and without:
                ratios.append(statistics.mean(without) / statistics.mean(with_m))
        if ratios:
            gm = statistics.geometric_mean(ratios)
            result["geomean_fewer_trials"] = gm
            print(f"trials to 90% of the best: {gm:.2f}x fewer with the pretrained model (geometric mean over "
                  f"{len(ratios)} held-out workloads)")
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()

"""Train the cost model shipped with the package, and measure what it saves on workloads it never saw.

Training: every record of the tuning logs under ``--data`` (``data/logs/<isa>/*.jsonl[.gz]``: the
project's own logs, kept in the repository as the data source) except those of the held-out workloads
goes into one ranking model on the structure-invariant relation features (as ``--history`` transfer
does), saved as ``tensortune/autotvm/pretrained/<isa>.json``.

Evaluation (``--evaluate``): each held-out workload is tuned from scratch with the ``xgb`` tuner, once
with the pretrained model and once without (``pretrained=False``), ``--seeds`` times each, for
``--trials`` trials; reported: the trials each run needs to reach 90% of the best GFLOP/s any run of that
workload found (medians over seeds), and the final best. A held-out workload is left out of training in
every template (``resnet18:C9`` leaves out both its packed and its NCHW logs), and the model trained
without it is written to ``results/pretrain/``, never over the shipped one.

    python benchmarks/pretrain.py                        # train the shipped model on all logs of this ISA
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


def read_log(path: Path):
    """The records of one ``.jsonl`` or ``.jsonl.gz`` log."""
    from tensortune.autotvm.record import load_records

    if path.suffix != ".gz":
        return load_records(path)
    with tempfile.NamedTemporaryFile("wb", suffix=".jsonl") as tmp:
        tmp.write(gzip.decompress(path.read_bytes()))
        tmp.flush()
        return load_records(tmp.name)


def read_logs(folder: Path):
    """All records of the ``.jsonl`` and ``.jsonl.gz`` logs in ``folder``."""
    return [r for path in sorted(folder.glob("*.jsonl*")) for r in read_log(path)]


def task_of(key: str, target):
    """The task tuned for a workload name: ``resnet18:C9`` and the few-divisor convolutions in the packed
    template, ``mobilenet:D5`` in the depthwise default, ``matmul:512`` and ``few:M1`` as matmul."""
    from tensortune.autotvm.catalog import create_task, task_from_workload
    from vs_libraries import FEW_DIVISORS

    if key.startswith("matmul:"):
        n = int(key.split(":")[1])
        return create_task("matmul", {"M": n, "N": n, "K": n}, target=target)
    if key in FEW_DIVISORS:
        op, shape = FEW_DIVISORS[key]
        return create_task(op, shape, template="conv2d_nchwc_packed" if op == "conv2d" else None, target=target)
    if ":" in key and key.split(":")[0] in ("resnet18", "mobilenet"):
        return task_from_workload(key, template="conv2d_nchwc_packed" if key.startswith("resnet18") else None,
                                  target=target)
    raise SystemExit(f"unknown workload {key!r}: use resnet18:C1..C12, mobilenet:D1..D9, few:P1..P4, few:M1, "
                     "few:M2 or matmul:N")


def shape_of(template: str, args) -> tuple:
    """A workload's operator and shape, the same for every template that computes it."""
    from tensortune.autotvm.catalog import operator_of

    return operator_of(template) or template, tuple(args)


def train(records, holdout: set[tuple], out: Path, target, seed: int, num_rounds: int, max_depth: int) -> dict:
    """Train on every record whose operator and shape is not held out (in any template), save to ``out``."""
    from tensortune.autotvm.pretrained import model_metadata
    from tensortune.autotvm.tuner.xgb import train_global_model

    kept = [r for r in records if shape_of(r.template, r.args) not in holdout]
    t0 = time.perf_counter()
    model = train_global_model(kept, seed=seed, num_rounds=num_rounds, max_depth=max_depth)
    if model is None:
        raise SystemExit("no successful record to train on")
    workloads = sorted({r.workload for r in kept})
    out.parent.mkdir(parents=True, exist_ok=True)
    model.save(out, model_metadata(target, records=len(kept), workloads=len(workloads), rounds=num_rounds,
                                   max_depth=max_depth))
    print(f"trained on {len(kept)} records of {len(workloads)} workloads ({len(records) - len(kept)} held out) "
          f"in {time.perf_counter() - t0:.1f} s -> {out} ({out.stat().st_size / 1024:.0f} KiB)")
    return {"records": len(kept), "workloads": workloads, "model": str(out), "bytes": out.stat().st_size}


def evaluate(keys, target, model_path: Path, trials: int, seeds: int, batch: int,
             half_weight: int | None = None) -> list[dict]:
    """Tune each workload with the model at ``model_path`` and without, ``seeds`` times each, in turns."""
    from tensortune.autotvm.measure import Measurer
    from tensortune.autotvm.pretrained import load_pretrained
    from tensortune.autotvm.tune import tune
    from tensortune.autotvm.tuner import XGBTuner

    model = load_pretrained(model_path)
    if model is None:
        raise SystemExit(f"{model_path} cannot be used (see the warning above)")
    rows = []
    with Measurer() as measurer, tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            task = task_of(key, target)
            curves = {}
            for seed in range(seeds):
                # alternate which goes first, so that a change of machine load favours neither
                for with_model in ((True, False) if seed % 2 == 0 else (False, True)):
                    log = Path(tmp) / f"{key.replace(':', '_')}_{with_model}_{seed}.jsonl"
                    tuner = XGBTuner(task, seed=seed, pretrained=False)
                    if half_weight is not None:
                        tuner.GLOBAL_HALF_WEIGHT = half_weight
                    if with_model:
                        tuner.global_model = model  # what pretrained=True does with the shipped file
                    tune(task, trials, tuner=tuner, batch_size=batch, measure=measurer.measure, log_file=log,
                         progress=False)
                    curves[(with_model, seed)] = best_curve(log, task, trials)
            best = max(float(c.max()) for c in curves.values() if len(c))
            row = {"workload": key, "task": str(task), "best_gflops": best}
            for with_model, label in ((True, "pretrained"), (False, "scratch")):
                reach = [trials_to_reach(curves[(with_model, s)], 0.9 * best) for s in range(seeds)]
                final = [float(curves[(with_model, s)].max()) for s in range(seeds)]
                # a run that never reached 90% counts as trials + 1 in the median
                row[label] = {"trials_to_90": reach, "final_gflops": final,
                              "median_trials_to_90": statistics.median(trials + 1 if t is None else t for t in reach),
                              "median_final_gflops": statistics.median(final),
                              "first_batch_best_gflops": [float(curves[(with_model, s)][:batch].max())
                                                          for s in range(seeds)]}
            rows.append(row)
            print(row, flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="native")
    p.add_argument("--data", help="folder of training logs (default data/logs/<isa>)")
    p.add_argument("--holdout", nargs="*", default=[], help="workloads left out of training (evaluated on); "
                   "their shapes are left out in every template")
    p.add_argument("--out", help="where the model goes (default: the package file without --holdout, "
                   "results/pretrain/<isa>_holdout.json with it)")
    p.add_argument("--evaluate", action="store_true", help="tune the held-out workloads with and without the model")
    p.add_argument("--trials", type=int, default=150)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=100, help="boosting rounds of the model (its size)")
    p.add_argument("--max-depth", type=int, default=4)
    p.add_argument("--half-weight", type=int, help="evaluate with the tuner's GLOBAL_HALF_WEIGHT set to this (own "
                   "measurements after which the task's model and the pretrained one weigh the same)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()
    if args.half_weight is not None and args.half_weight < 1:
        p.error(f"--half-weight must be a positive number of measurements, got {args.half_weight}")

    from tensortune.autotvm.pretrained import model_file
    from tensortune.target import Target

    target = Target.parse(args.target)
    data = Path(args.data) if args.data else ROOT / "data" / "logs" / target.isa.value
    holdout = {shape_of(t.name, t.args) for t in (task_of(k, target) for k in args.holdout)}
    records = [r for r in read_logs(data) if Target.parse(r.target).isa is target.isa]
    if args.out:
        out = Path(args.out)
    elif args.holdout:  # never ship a model that has not seen every workload
        out = ROOT / "results" / "pretrain" / f"{target.isa.value}_holdout.json"
    else:
        out = ROOT / "tensortune" / "autotvm" / "pretrained" / model_file(target)
    result = {"target": str(target), "data": str(data), "holdout": args.holdout,
              "training": train(records, holdout, out, target, args.seed, args.rounds, args.max_depth)}
    if args.evaluate:
        if not args.holdout:
            raise SystemExit("--evaluate needs --holdout: workloads the model was not trained on")
        rows = evaluate(args.holdout, target, out, args.trials, args.seeds, args.batch_size, args.half_weight)
        from tensortune.autotvm.tuner import XGBTuner

        result["half_weight"] = args.half_weight or XGBTuner.GLOBAL_HALF_WEIGHT
        result["evaluation"] = rows
        ratios = [r["scratch"]["median_trials_to_90"] / r["pretrained"]["median_trials_to_90"] for r in rows]
        result["geomean_fewer_trials"] = gm = statistics.geometric_mean(ratios)
        print(f"trials to 90% of the best (median over {args.seeds} seeds): {gm:.2f}x fewer with the pretrained "
              f"model (geometric mean over {len(rows)} held-out workloads)")
        for r in rows:
            print(f"{r['workload']:14s} best {r['best_gflops']:7.1f} GFLOP/s | trials to 90%: pretrained "
                  f"{r['pretrained']['trials_to_90']} (median {r['pretrained']['median_trials_to_90']}), scratch "
                  f"{r['scratch']['trials_to_90']} (median {r['scratch']['median_trials_to_90']}) | final median "
                  f"{r['pretrained']['median_final_gflops']:.1f} vs {r['scratch']['median_final_gflops']:.1f}")
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()

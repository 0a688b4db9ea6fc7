"""How well transfer models rank a network task's configs: the shipped model against one learned in the run.

No measuring: the tuning logs under ``--data`` (``data/logs/<isa>``) are the ground truth. For every task of the
whole-network log ``--log`` (a ``tune_network.py`` or ``tune-model`` run), a task whose first batch a transfer
model ranks, four rankers score the configs measured for that task in all the logs (each config's median
GFLOP/s over its records):

- ``shipped``: the shipped model as ``pretrain.py`` trains it, with the task's shape left out of its training (in
  every template), as for a network it never saw;
- ``in-run``: the model the scheduler used to give a new tuner (``train_global_model`` on the records the run's
  other tasks had gathered when the task's first round came; ``--all``: every other task's records of the run);
- ``both``: the in-run records boosted on top of ``shipped`` (30 rounds);
- ``random``: chance.

Reported per task and on average: pairwise accuracy (share of config pairs ordered right) and the best of the
ranker's top 16 over the best measured (what a first batch of 16 would find among these configs).

    python benchmarks/transfer_ranking.py --log data/logs/avx512/resnet18_network.jsonl.gz \\
        --json results/transfer_ranking_avx512.json
"""
from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

from common import write_json
from pretrain import ROOT, read_log, read_logs, shape_of

BATCH = 16


class FeatureCache:
    """Relation features of (task, config) pairs, each extracted once."""

    def __init__(self):
        self.rows: dict[str, dict[int, np.ndarray]] = defaultdict(dict)

    def __call__(self, task, indices) -> np.ndarray:
        from tensortune.autotvm.tuner.xgb import relation_features

        known = self.rows[task.workload_key]
        missing = sorted({i for i in indices if i not in known})
        if missing:
            known.update(zip(missing, relation_features(task, missing)))
        return np.stack([known[i] for i in indices])


def truth(records, task) -> tuple[list[int], np.ndarray]:
    """The configs measured for ``task`` and each one's median GFLOP/s (0 for a failed one)."""
    from tensortune.autotvm.record import task_records

    by_config: dict[int, list[float]] = defaultdict(list)
    for r in task_records(records, task):
        by_config[r.config_index].append(task.flops / r.cost / 1e9 if r.ok else 0.0)
    configs = sorted(by_config)
    return configs, np.array([statistics.median(by_config[i]) for i in configs])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--log", required=True, help="a whole-network tuning log (.jsonl or .jsonl.gz)")
    p.add_argument("--data", help="folder of the training logs (default data/logs/<isa of the log>)")
    p.add_argument("--all", action="store_true", help="in-run model: every other task's records of the run")
    p.add_argument("--rounds", type=int, default=100, help="boosting rounds of the shipped model (pretrain.py's)")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args()

    from tensortune.autotvm.cost_model import pairwise_accuracy, topk_peak
    from tensortune.autotvm.tuner.xgb import train_global_model
    from tensortune.autotvm.templates import default_template
    from tensortune.target import Target

    run = read_log(Path(args.log))
    if not run:
        raise SystemExit(f"{args.log} holds no record")
    isa = Target.parse(run[0].target).isa
    data = Path(args.data) if args.data else ROOT / "data" / "logs" / isa.value
    records = [r for r in read_logs(data) if Target.parse(r.target).isa is isa]
    tuned = [r for r in run if r.template != default_template.name]  # the untuned kernels (one config) rank nothing
    cache = FeatureCache()
    rows, scores = [], defaultdict(lambda: defaultdict(list))
    for key in dict.fromkeys(r.workload for r in tuned):
        first = next(i for i, r in enumerate(tuned) if r.workload == key)
        task = tuned[first].task()
        configs, gflops = truth(records, task)
        if len(configs) < 2 * BATCH or gflops.max() <= 0:
            continue
        X = cache(task, configs)
        shape = shape_of(task.name, task.args)
        shipped = train_global_model([r for r in records if shape_of(r.template, r.args) != shape],
                                     num_rounds=args.rounds, features=cache)
        before = tuned if args.all else tuned[:first]
        history = [r for r in before if r.workload != key]
        rankers = {"shipped": shipped.predict(X)}
        in_run = train_global_model(history, features=cache) if history else None
        if in_run is not None:
            rankers["in-run"] = in_run.predict(X)
            both = train_global_model(history, num_rounds=30, base=shipped, features=cache)
            rankers["both"] = both.predict(X, shipped.predict(X))
        rankers["random"] = np.random.default_rng(0).random(len(configs))
        row = {"task": str(task), "configs": len(configs), "history_records": len(history)}
        for name, pred in rankers.items():
            row[name] = {"pairwise": pairwise_accuracy(gflops, pred), "top16": topk_peak(gflops, pred, BATCH)}
            for metric, v in row[name].items():
                scores[name][metric].append(v)
        rows.append(row)
        print(f"{str(task)[:64]:64s} " + " | ".join(f"{n} {row[n]['pairwise']:.2f}/{row[n]['top16']:.2f}"
                                                   for n in rankers), flush=True)
    summary = {name: {metric: float(np.mean(v)) for metric, v in m.items()} | {"tasks": len(m["pairwise"])}
               for name, m in scores.items()}
    print("mean pairwise accuracy / best of top 16 over the best:")
    for name, s in summary.items():
        print(f"  {name:8s} {s['pairwise']:.3f} / {s['top16']:.3f}  ({s['tasks']} tasks)")
    if args.json:
        write_json(args.json, {"log": args.log, "data": str(data), "all": args.all, "rows": rows,
                               "summary": summary})


if __name__ == "__main__":
    main()

"""Tuning throughput: trials per minute on ResNet-18 C6, and where the wall time goes.

Tunes ``task_from_workload("resnet18:C6")`` for ``--trials`` trials (random tuner by default) with a
fresh, empty compile cache (``TENSORTUNE_CACHE_DIR`` points at a temporary directory for the run, so
every candidate is really compiled) and a temporary log. Reports trials per minute of wall time and
the shares of that time spent compiling (``Measurer.stats.build_s``), running candidates
(``stats.run_s``) and everything else: the tuner's own code, writing the log, the loop itself
(wall - build - run).

Then it times feature extraction of 1,000 random configs of the same task, serially and in the
tuner's worker processes (as simulated annealing scores them), against measuring one batch of this
run (wall time per batch): the extraction must take less.

Reference point: TVM MetaSchedule needs about 1.1 s per trial on this machine (about 55 trials/min).

    python benchmarks/tune_throughput.py [--trials 128] [--tuner random|ga] [--json PATH]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from common import write_json

METASCHEDULE_S_PER_TRIAL = 1.1  # TVM MetaSchedule on this machine, seconds per trial


def feature_speed(task, batch_s: float, n: int = 1000) -> dict:
    """Seconds to extract features of ``n`` random configs (fresh caches), serially and in parallel."""
    import random

    from tensortune.autotvm.features import FeatureExtractor
    from tensortune.autotvm.workers import spawn_pool
    from tensortune.env import usable_cores

    jobs = usable_cores()
    pool = spawn_pool(jobs)  # started (and warmed up) before timing, as a tuner's pool is during tuning
    try:
        FeatureExtractor(task, n_jobs=jobs, pool=pool)(task.space.sample(64, random.Random(1)))
        out = {"feature_configs": n, "feature_jobs": jobs, "batch_s": round(batch_s, 2)}
        for name, n_jobs, seed in (("serial", 1, 2), ("parallel", jobs, 3)):
            idx = task.space.sample(n, random.Random(seed))
            start = time.perf_counter()
            FeatureExtractor(task, n_jobs=n_jobs, pool=pool if n_jobs > 1 else None)(idx)
            out[f"features_{name}_s"] = round(time.perf_counter() - start, 2)
    finally:
        pool.shutdown()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=128)
    p.add_argument("--tuner", choices=["random", "ga", "xgb", "xgb-reg"], default="random")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="tensortune-throughput-") as tmp:
        # Set before anything compiles: the build pool and the runner worker are spawned with this environment.
        os.environ["TENSORTUNE_CACHE_DIR"] = os.path.join(tmp, "cache")
        from tensortune.autotvm.measure import Measurer
        from tensortune.autotvm.catalog import task_from_workload
        from tensortune.autotvm.tune import tune
        from tensortune.target import Target

        task = task_from_workload("resnet18:C6")
        log = os.path.join(tmp, "c6.json")
        measurer = Measurer()
        start = time.perf_counter()
        with measurer:
            result = tune(task, args.trials, tuner=args.tuner, batch_size=args.batch_size,
                          measure=measurer.measure, log_file=log, progress=False, seed=args.seed)
        wall = time.perf_counter() - start

    n = result.n_measured
    build, run = measurer.stats.build_s, measurer.stats.run_s
    other = wall - build - run
    per_min = 60.0 * n / wall
    ms_per_min = 60.0 / METASCHEDULE_S_PER_TRIAL
    failed = sum(t.gflops <= 0 for t in result.history)
    figures = {
        "task": str(task), "workload": "resnet18:C6", "tuner": args.tuner, "trials": n, "failed_trials": failed,
        "batch_size": args.batch_size, "target": str(Target.host()), "cores": os.cpu_count(),
        "wall_s": round(wall, 2), "s_per_trial": round(wall / n, 3), "trials_per_min": round(per_min, 1),
        "build_s": round(build, 2), "run_s": round(run, 2), "other_s": round(other, 2),
        "build_share": round(build / wall, 3), "run_share": round(run / wall, 3), "other_share": round(other / wall, 3),
        "best_gflops": round(result.best_gflops, 2),
        "metaschedule_s_per_trial": METASCHEDULE_S_PER_TRIAL, "metaschedule_trials_per_min": round(ms_per_min, 1),
        "ratio_to_metaschedule": round(per_min / ms_per_min, 2),
    }
    figures.update(feature_speed(task, batch_s=wall / n * args.batch_size))
    print(f"{task} (resnet18:C6), {args.tuner} tuner, {n} trials ({failed} failed), batch {args.batch_size}, "
          f"{os.cpu_count()} cores, fresh compile cache")
    print(f"  wall        {wall:8.1f} s   {wall / n:.3f} s/trial   {per_min:.1f} trials/min")
    print(f"  compiling   {build:8.1f} s   {100 * build / wall:5.1f} %")
    print(f"  running     {run:8.1f} s   {100 * run / wall:5.1f} %")
    print(f"  other       {other:8.1f} s   {100 * other / wall:5.1f} %   (tuner, log writes, the tuning loop)")
    print(f"  best        {result.best_gflops:8.2f} GFLOP/s")
    print(f"TVM MetaSchedule: ~{METASCHEDULE_S_PER_TRIAL} s/trial ({ms_per_min:.0f} trials/min); "
          f"tensortune: {per_min / ms_per_min:.2f}x its rate")
    print(f"features of 1,000 configs: {figures['features_serial_s']:.2f} s serially, "
          f"{figures['features_parallel_s']:.2f} s in {figures['feature_jobs']} worker processes; "
          f"measuring one batch of {args.batch_size}: {figures['batch_s']:.2f} s")
    if args.json:
        write_json(args.json, figures)


if __name__ == "__main__":
    sys.exit(main())

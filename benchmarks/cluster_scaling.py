"""Cluster throughput: trials per minute with 1, 2, 4 and 8 workers of a Dask cluster.

Two parts; the output says which is which.

* **Simulated devices** (the scaling figures). A 2-core machine cannot host 8 real measuring devices, so
  each worker of a ``LocalCluster(processes=True)`` (one thread per worker, as ``tensortune worker``) is a
  simulated machine: its device builds a candidate in ``--build-s`` seconds and measures it in ``--run-s``
  seconds, both sleeps. The defaults are the per-candidate figures of ``benchmarks/tune_throughput.py``
  for ResNet-18 C6 on this machine (BENCHMARKS.md, random tuner: 0.158 s per trial on 2 cores, 71.7 %
  compiling and 25 % running, i.e. 0.23 s to build a candidate on one core and 0.04 s to run it). Everything
  else is real: ``tune()`` with the random tuner and a log, the ``ClusterMeasurer``, Dask's scheduler and
  worker processes, the C6 task pickled to the workers. The target is this machine's (``-native``), so a
  candidate is one task that builds and measures on its device. Reported for ``tune()``'s default batch
  (``0`` in ``--batch-sizes``: 16, or 4 candidates per device when that is more), batches of 16 (2
  candidates per worker at 8 workers) and 32: trials/min, speedup and efficiency against 1
  worker (linear scaling: 1.0), and the overhead per candidate (worker time per candidate beyond the
  device's build + run: Dask's scheduling, the tuning loop between batches, idle workers at a batch's end).
  The scheduler, the client and the 8 workers share this machine's 2 cores, so the overhead is higher
  here than on a cluster whose scheduler and workers have machines of their own.
* **Real** (the real path, not a scaling figure): a ``LocalCluster`` with 2 real workers on this machine
  (guarded builds and runs, 1 kernel thread each, since the two "devices" share this machine's 2 cores),
  and the local ``Measurer`` (2 build processes, 2 kernel threads) on the same task and trials for reference.

    PYTHONPATH=. python benchmarks/cluster_scaling.py [--trials 96] [--batch-sizes 16 32] [--real-trials 32]
                                                      [--json PATH]

(``PYTHONPATH=.`` makes the workers, which are separate processes, import this checkout.)
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from common import write_json

WORKERS = (1, 2, 4, 8)
BUILD_S, RUN_S = 0.23, 0.04  # per candidate on one core: ResNet-18 C6, see the docstring


def simulated_device(build_s: float, run_s: float):
    """A ``DevicePlugin`` whose build and run are sleeps of fixed durations (made here: it needs Dask)."""
    from tensortune.autotvm.measure.cluster_worker import DevicePlugin
    from tensortune.autotvm.measure.result import BuildResult, ErrorKind, MeasureResult

    class SimulatedDevice(DevicePlugin):
        name = "tensortune-simulated-device"

        def __init__(self) -> None:
            self.build_s, self.run_s = build_s, run_s

        def setup(self, worker) -> None:  # no guarded processes to start
            pass

        def teardown(self, worker) -> None:
            pass

        def build(self, inp, options) -> BuildResult:
            time.sleep(self.build_s)
            return BuildResult(None, ErrorKind.NONE, "", self.build_s)

        def run(self, inp, build, options) -> MeasureResult:
            time.sleep(self.run_s)
            cost = 1e-3 * (1.0 + inp.config_index % 101 / 101)  # some landscape for the log
            return MeasureResult((cost,), ErrorKind.NONE, "", build.build_seconds + self.run_s)

    return SimulatedDevice()


def scaling_rows(walls: dict[int, float], trials: int, device_s: float) -> list[dict]:
    """Per worker count: trials/min, speedup and efficiency against the first row, overhead per candidate."""
    base = trials / walls[min(walls)] / min(walls)  # per-worker rate of the smallest cluster
    rows = []
    for n, wall in sorted(walls.items()):
        rate = trials / wall
        rows.append({"workers": n, "wall_s": round(wall, 2), "trials_per_min": round(60 * rate, 1),
                     "speedup": round(rate / (base * min(walls)), 2), "efficiency": round(rate / (base * n), 3),
                     "overhead_ms_per_candidate": round(1e3 * (wall * n / trials - device_s), 1)})
    return rows


def _warm_up(task) -> None:
    import tensortune.autotvm.measure.cluster_worker  # noqa: F401  (what the first task would import)

    len(task.space)


def run_simulated(n_workers: int, task, trials: int, batch_size: int, build_s: float, run_s: float,
                  log: str) -> tuple[float, dict]:
    from distributed import Client, LocalCluster

    from tensortune.autotvm.measure.cluster import ClusterMeasurer, device_resource
    from tensortune.autotvm.tune import tune

    with LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1, dashboard_address=":0",
                      resources={device_resource(task.target): 1}) as lc, Client(lc, set_as_default=False) as client:
        client.wait_for_workers(n_workers)
        with ClusterMeasurer(client, device=simulated_device(build_s, run_s)) as measurer:
            client.run(_warm_up, task)  # imports and the task's space on every worker, before the clock starts
            start = time.perf_counter()
            tune(task, trials, tuner="random", batch_size=batch_size or None, measure=measurer.measure, log_file=log,
                 progress=False, seed=0)
            wall = time.perf_counter() - start
    return wall, dict(measurer.stats.workers)


def run_real(task, trials: int, batch_size: int, tmp: str) -> dict:
    """2 real workers on this machine, then the local Measurer, on the same trials (same seed)."""
    import dask
    from distributed import Client, LocalCluster

    from tensortune.autotvm.measure import MeasureOptions, Measurer, RunOptions
    from tensortune.autotvm.measure.cluster import ClusterMeasurer, device_resource
    from tensortune.autotvm.tune import tune

    out = {}
    with dask.config.set({"distributed.worker.daemon": False}), \
            LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0",
                         resources={device_resource(task.target): 1}) as lc, \
            Client(lc, set_as_default=False) as client:
        client.wait_for_workers(2)
        with ClusterMeasurer(client, MeasureOptions(runner=RunOptions(num_threads=1))) as measurer:
            start = time.perf_counter()
            result = tune(task, trials, tuner="random", batch_size=batch_size, measure=measurer.measure,
                          log_file=os.path.join(tmp, "real-cluster.json"), progress=False, seed=1)
            wall = time.perf_counter() - start
        s = measurer.stats
        out["cluster_2_workers"] = {"wall_s": round(wall, 2), "trials_per_min": round(60 * trials / wall, 1),
                                    "build_s_per_candidate": round(s.build_s / s.n_measured, 3),
                                    "run_s_per_candidate": round(s.run_s / s.n_measured, 3),
                                    "workers": dict(s.workers), "best_gflops": round(result.best_gflops, 2)}
    with Measurer() as measurer:
        start = time.perf_counter()
        result = tune(task, trials, tuner="random", batch_size=batch_size, measure=measurer.measure,
                      log_file=os.path.join(tmp, "real-local.json"), progress=False, seed=1)
        wall = time.perf_counter() - start
    out["local_measurer"] = {"wall_s": round(wall, 2), "trials_per_min": round(60 * trials / wall, 1),
                             "best_gflops": round(result.best_gflops, 2)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=96, help="trials per simulated cluster size")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[0, 16, 32], metavar="N",
                   help="configs per batch; 0: tune()'s default (16, and 4 per device on a cluster)")
    p.add_argument("--build-s", type=float, default=BUILD_S, help="simulated build seconds per candidate")
    p.add_argument("--run-s", type=float, default=RUN_S, help="simulated run seconds per candidate")
    p.add_argument("--real-trials", type=int, default=32, help="trials of the real 2-worker run (0: skip it)")
    p.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="tensortune-cluster-") as tmp:
        # Before any worker starts: the real part compiles every candidate into an empty cache.
        os.environ["TENSORTUNE_CACHE_DIR"] = os.path.join(tmp, "cache")
        from tensortune.autotvm.catalog import task_from_workload

        task = task_from_workload("resnet18:C6")
        rows, used = {}, {}
        for batch in args.batch_sizes:
            walls = {}
            for n in WORKERS:
                walls[n], workers = run_simulated(n, task, args.trials, batch, args.build_s, args.run_s,
                                                  os.path.join(tmp, f"sim-{batch}-{n}.json"))
                used[f"batch {batch}, {n} workers"] = len(workers)
            rows[batch] = scaling_rows(walls, args.trials, args.build_s + args.run_s)
        real_batch = next((b for b in args.batch_sizes if b), 16)
        real = run_real(task, args.real_trials, real_batch, tmp) if args.real_trials else None

    print(f"SIMULATED devices: {task} (resnet18:C6), random tuner, {args.trials} trials per cluster; each device "
          f"builds in {args.build_s} s and runs in {args.run_s} s (sleeps)")
    print(f"  {'batch':>5} {'workers':>7} {'trials/min':>11} {'speedup':>8} {'efficiency':>11} {'overhead/candidate':>19}")
    for batch, batch_rows in rows.items():
        for r in batch_rows:
            print(f"  {batch or 'auto':>5} {r['workers']:>7} {r['trials_per_min']:>11.1f} {r['speedup']:>7.2f}x "
                  f"{r['efficiency']:>11.3f} {r['overhead_ms_per_candidate']:>16.1f} ms")
        worst = min(r["efficiency"] for r in batch_rows)
        print(f"  batch {batch or 'auto (16, or 4 per device)'}: lowest efficiency {worst:.3f} (target >= 0.8 of linear): "
              f"{'met' if worst >= 0.8 else 'NOT met'}")
    print(f"  workers that measured: {', '.join(f'{k}: {v}' for k, v in used.items())}")
    if real:
        c, loc = real["cluster_2_workers"], real["local_measurer"]
        print(f"REAL: {args.real_trials} trials of the same task on this {os.cpu_count()}-core machine, batch "
              f"{real_batch}, fresh compile cache")
        print(f"  2 workers (1 kernel thread each)  {c['trials_per_min']:>7.1f} trials/min   per candidate: build "
              f"{c['build_s_per_candidate']:.3f} s, run {c['run_s_per_candidate']:.3f} s (summed over workers)")
        print(f"  local Measurer (2 threads)        {loc['trials_per_min']:>7.1f} trials/min")
    if args.json:
        write_json(args.json, {"task": str(task), "workload": "resnet18:C6", "cores": os.cpu_count(),
                               "simulated": {"trials": args.trials, "build_s": args.build_s, "run_s": args.run_s,
                                             "rows_by_batch_size": {str(b): r for b, r in rows.items()},
                                             "workers_that_measured": used},
                               "real": real})


if __name__ == "__main__":
    sys.exit(main())

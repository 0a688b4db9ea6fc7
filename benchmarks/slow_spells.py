"""What the runner's slow-spell guard does to timings: the same configs timed again and again, guard off and on.

A set of valid configs of one workload is built once, then timed by the tuner's runner (``LocalRunner``) in
``--passes`` passes, each pass once with the guard off (``slow_spell_retries=0``) and once on (the default),
in turns. For each config, the spread of its timings over the passes (slowest over fastest) is the noise a
tuner sees when it measures that config once; reported: its median and 90th percentile over the configs, for
each setting, with the candidates the guard timed again and the seconds each pass took.

``--hog SECONDS PERIOD`` starts a process that keeps one core busy for SECONDS out of every PERIOD seconds:
a slow spell made on purpose (another tenant of a VM taking a core), to see the guard at work when the
machine's own spells are rare.

    python benchmarks/slow_spells.py --workload resnet18:C6 --configs 32 --passes 6
    python benchmarks/slow_spells.py --hog 1.5 4 --json results/slow_spells_hog.json
"""
from __future__ import annotations

import argparse
import multiprocessing
import random
import time

import numpy as np

from common import write_json


def hog(busy_s: float, period_s: float) -> None:
    """Keep one core busy ``busy_s`` seconds out of every ``period_s`` (until killed)."""
    while True:
        end = time.perf_counter() + busy_s
        while time.perf_counter() < end:
            pass
        time.sleep(max(0.0, period_s - busy_s))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="resnet18:C6")
    p.add_argument("--template", default="conv2d_nchwc_packed")
    p.add_argument("--configs", type=int, default=32)
    p.add_argument("--passes", type=int, default=6)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--hog", type=float, nargs=2, metavar=("SECONDS", "PERIOD"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json")
    args = p.parse_args()

    from tensortune.autotvm.catalog import task_from_workload
    from tensortune.autotvm.measure import BuildOptions, LocalBuilder, LocalRunner, MeasureInput, RunOptions
    from tensortune.target import Target

    task = task_from_workload(args.workload, template=args.template, target=Target.host())
    rng = random.Random(args.seed)
    indices = []
    while len(indices) < args.configs:
        i = rng.randrange(len(task.space))
        if task.space.is_valid(i) and i not in indices:
            indices.append(i)
    inputs = [MeasureInput(task, i) for i in indices]
    with LocalBuilder(BuildOptions()) as builder:
        builds = builder.build(inputs)
    keep = [k for k, b in enumerate(builds) if b.ok]
    inputs, builds = [inputs[k] for k in keep], [builds[k] for k in keep]

    settings = {"off": RunOptions(num_threads=args.threads, slow_spell_retries=0),
                "on": RunOptions(num_threads=args.threads)}
    costs = {name: [] for name in settings}  # per pass: each config's mean seconds (nan: failed)
    seconds = {name: [] for name in settings}
    never_steady = {name: 0 for name in settings}  # timings the guard noted as taken in a spell
    hogger = None
    if args.hog:
        hogger = multiprocessing.get_context("spawn").Process(target=hog, args=tuple(args.hog), daemon=True)
        hogger.start()
    try:
        with LocalRunner(settings["off"]) as off, LocalRunner(settings["on"]) as on:
            runners = {"off": off, "on": on}
            for k in range(args.passes):
                for name in (("off", "on") if k % 2 == 0 else ("on", "off")):
                    start = time.perf_counter()
                    results = runners[name].run(inputs, builds)
                    seconds[name].append(time.perf_counter() - start)
                    costs[name].append([r.mean_cost if r.ok else np.nan for r in results])
                    never_steady[name] += sum("slower than its fastest" in r.error_msg for r in results)
                print(f"pass {k + 1}/{args.passes}: " + ", ".join(
                    f"guard {n} {seconds[n][-1]:.1f} s" for n in settings), flush=True)
    finally:
        if hogger is not None:
            hogger.kill()

    report = {"workload": args.workload, "template": args.template, "configs": len(inputs), "passes": args.passes,
              "threads": args.threads, "hog": args.hog, "settings": {}}
    for name in settings:
        c = np.array(costs[name])
        spread = np.nanmax(c, axis=0) / np.nanmin(c, axis=0)
        report["settings"][name] = {
            "spread_median": float(np.nanmedian(spread)), "spread_p90": float(np.nanpercentile(spread, 90)),
            "pass_seconds_median": float(np.median(seconds[name])), "never_steady": never_steady[name],
            # per pass, the median over the configs of its timing over the config's fastest: a slow pass is one spell
            "pass_slowdowns": [round(float(x), 3) for x in np.nanmedian(c / np.nanmin(c, axis=0), axis=1)]}
        print(f"guard {name:3s}: spread of a config's timings over {args.passes} passes (slowest / fastest): median "
              f"{np.nanmedian(spread):.3f}, 90th percentile {np.nanpercentile(spread, 90):.3f}; "
              f"{np.median(seconds[name]):.1f} s per pass; {never_steady[name]} timings never steady; each pass's median "
              f"slowdown {report['settings'][name]['pass_slowdowns']}")
    if args.json:
        write_json(args.json, report)


if __name__ == "__main__":
    main()

"""Each layer's configs timed alone two ways: on an input it only reads, and on an input its threads rewrite first.

    python benchmarks/fresh_input.py --model mobilenet_v2 --log results/net.jsonl --json results/fresh_input.json

A kernel called again and again on one input it only reads finds a copy of the input in every core's cache.
Inside a network its input is what the previous layer's threads just wrote, split between the cores' caches, and
reading it costs more by an amount that depends on how the kernel splits its work. ``time_evaluator``'s
``fresh_input`` (``RunOptions.fresh_input``, the default of ``tune-model``) rewrites the input by the kernel's threads
before each call, untimed. For each tunable layer of the network this times, in turns, the fastest config of each
way of splitting the work among threads (``refine.config_kind``) found in ``--log``, both ways; it prints each
config's times and how the fastest of the layer's configs differs between the two.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import positive_int, save_zoo_model, write_json


def time_config(task, index: int, threads: int, rounds: int) -> tuple[float, float]:
    """Median seconds per call of one config: (input only read, input rewritten before each call), in turns, after
    checking its output against numpy's."""
    from tensortune.benchmarking.compare import BLAS_SETTLE_S, build_config
    from tensortune.ops.operator import check_output

    module, op, inputs, expected = build_config(task, index)
    out = op.empty_output()
    module(*inputs, out, num_threads=threads)
    problem = check_output(out, expected)
    if problem:
        raise RuntimeError(f"{task} config {index}: {problem}")
    time.sleep(BLAS_SETTLE_S)  # numpy's BLAS threads (the reference) spin for a while on the cores timed next
    warm, fresh = [], []
    for _ in range(rounds):
        for fresh_input, times in ((False, warm), (True, fresh)):
            times.append(module.time_evaluator(5, 1, 2.0, threads, fresh_input)(*inputs, out).median)
    return statistics.median(warm), statistics.median(fresh)


def main() -> int:
    from tensortune.autotvm.record import load_records
    from tensortune.network.refine import config_kind
    from tensortune.network.tuning import network_tasks
    from tensortune.target import Target

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("resnet18", "mobilenet_v2"), default="mobilenet_v2")
    p.add_argument("--log", required=True, help="a tuning log of the network (tune-model's)")
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--rounds", type=positive_int, default=5, help="timings of each config each way, in turns")
    p.add_argument("--per-layer", type=positive_int, default=3, help="configs per layer (one per split)")
    p.add_argument("--json")
    args = p.parse_args()

    target = Target.host()
    with tempfile.TemporaryDirectory() as tmp:
        tasks = network_tasks(str(save_zoo_model(Path(tmp), args.model)), target)
    records = [r for r in load_records(args.log) if r.ok and not r.network]
    rows, flips = [], 0
    print(f"{'layer':<58} {'x':>2} {'split':<14} {'warm us':>8} {'fresh us':>8} {'ratio':>6}")
    for t in tasks:
        if t.task is None:
            continue
        mine = sorted((r for r in records if r.workload == t.task.workload_key), key=lambda r: r.cost)
        kinds: dict = {}
        for r in mine:
            kinds.setdefault(config_kind(r.config), r)
        timed = []
        for kind, r in list(kinds.items())[:args.per_layer]:
            warm, fresh = time_config(t.task, r.config_index, args.threads, args.rounds)
            timed.append((warm, fresh))
            rows.append({"layer": t.workload, "occurrences": t.occurrences, "split": str(kind),
                         "config_index": r.config_index, "warm_s": warm, "fresh_s": fresh})
            print(f"{t.workload[:58]:<58} {t.occurrences:>2} {str(kind)[:14]:<14} {warm * 1e6:8.1f} "
                  f"{fresh * 1e6:8.1f} {fresh / warm:6.2f}", flush=True)
        if len(timed) > 1 and min(range(len(timed)), key=lambda i: timed[i][0]) != min(
                range(len(timed)), key=lambda i: timed[i][1]):
            flips += 1
    layers = len({r["layer"] for r in rows})
    ratios = [r["fresh_s"] / r["warm_s"] for r in rows]
    print(f"\n{len(rows)} configs of {layers} layers ({target}, {args.threads} threads): fresh / warm median "
          f"{statistics.median(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}; the fastest config "
          f"differs between the two ways on {flips} layers")
    if args.json:
        write_json(args.json, {"model": args.model, "log": args.log, "target": str(target), "threads": args.threads,
                               "rows": rows, "layers_whose_fastest_differs": flips})
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Refine finished tuning logs of one network again (each layer's candidates timed inside the network, as
``tune-model`` does at its end) and time the refined networks in turns with onnxruntime: how a change to
``refine`` moves the networks of logs already tuned, without tuning them again.

    python benchmarks/refine_compare.py --model resnet18 \\
        --logs gradient=results/tune_network_cmp/resnet18-gradient.jsonl \\
               round-robin=results/tune_network_cmp/resnet18-round-robin.jsonl --json results/refine_compare.json

Each log's network is timed both as it was (compiled with its latest refinement, if any: "NAME (as logged)") and
refined again. The logs are copied into a temporary folder first (the refinement's records go to the copies); ``--keep DIR``
keeps the refined copies there. ``--as-logged`` only times the networks as logged (to time finished runs again, e.g.
in ``--processes`` sets of fresh processes):

    python benchmarks/refine_compare.py --model resnet18 --as-logged --processes 5 \
        --logs gradient=results/tn_s1/resnet18-gradient.jsonl round-robin=results/tn_s1/resnet18-round-robin.jsonl
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from common import positive_int, write_json
from e2e import compile_network, machine
from tune_network import measure, prepare, print_process_medians


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("resnet18", "mobilenet_v2"), default="resnet18")
    p.add_argument("--logs", nargs="+", required=True, metavar="NAME=LOG")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeat", type=positive_int, default=15, help="rounds of the final timing")
    p.add_argument("--min-ms", type=float, default=50.0)
    p.add_argument("--processes", type=positive_int, default=1,
                   help="time in this many sets of fresh processes (median of their medians)")
    p.add_argument("--as-logged", action="store_true", help="only time the networks as logged; refine nothing")
    p.add_argument("--keep", help="folder for the refined copies of the logs")
    p.add_argument("--json")
    args = p.parse_args()
    logs = dict(item.split("=", 1) for item in args.logs)

    from tensortune import Target
    from tensortune.network import refine

    report = {"model": args.model, "threads": args.threads, "machine": machine(), "isa": Target.host().isa.value,
              "repeat": args.repeat, "processes": args.processes, "logs": logs, "refine_s": {}, "refined": {},
              "process_medians_s": {}}
    with tempfile.TemporaryDirectory(prefix="tt-refine-compare-") as tmp:
        work = Path(tmp)
        model = prepare(work, args.model)
        networks = {}
        for name, log in logs.items():  # as the logs were: their latest refinement, if any
            networks[f"{name} (as logged)"] = work / f"{name}-before.tt"
            compile_network(model, networks[f"{name} (as logged)"], work / "cache", str(log))
        for name, log in ({} if args.as_logged else logs).items():  # refined again
            copy = work / f"{name}.jsonl"
            shutil.copyfile(log, copy)
            start = time.perf_counter()
            result = refine(str(model), copy, num_threads=args.threads)
            report["refine_s"][name] = time.perf_counter() - start
            report["refined"][name] = {"layers": len(result.layers), "check": result.check}
            print(f"{name}: refined {len(result.layers)} layers in {report['refine_s'][name]:.0f} s; "
                  + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in result.check.items()), flush=True)
            networks[name] = work / f"{name}.tt"
            compile_network(model, networks[name], work / "cache", str(copy))
            if args.keep:
                Path(args.keep).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(copy, Path(args.keep) / f"{args.model}-{name}.jsonl")
        report["final"] = measure(model, networks, work, args.threads, args.repeat, args.min_ms, args.processes,
                                  report["process_medians_s"])
    ort_s = report["final"].get("onnxruntime")
    print("timed in turns: " + ", ".join(
        f"{k} {v * 1e3:.2f} ms" + (f" ({v / ort_s:.2f}x)" if isinstance(v, float) and isinstance(ort_s, float)
                                   else "") for k, v in report["final"].items()))
    print_process_medians(report["process_medians_s"], "  ")
    if args.json:
        write_json(args.json, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

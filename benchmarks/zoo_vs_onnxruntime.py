"""The networks people export, full size, batch 1: tensortune with default schedules (no tuning log) against
onnxruntime, on the same threads, in one run with ``e2e.py``'s protocol (a child process per peer, output checked
against onnxruntime's to 1e-3 of its largest magnitude, timings taken in turns, medians).

The networks are the PyTorch models of ``tests/model_zoo.py`` at their real sizes (random weights, exported with
``torch.onnx.export``); each is compiled once (build cache in ``--work``). A network tensortune cannot compile is a
row with the error.

    python benchmarks/zoo_vs_onnxruntime.py                       # every network, 2 threads
    python benchmarks/zoo_vs_onnxruntime.py --models resnet50 dcgan --repeat 15 --markdown BENCHMARKS.md
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from common import positive_int, write_json  # noqa: E402
from e2e import compile_network, machine, time_interleaved, write_section  # noqa: E402

SECTION = "## Model coverage: untuned against onnxruntime"


def prepare(name: str, work: Path) -> dict:
    """Export ``name`` at full size; its model, feeds and onnxruntime's first output under ``work``."""
    import onnx
    import onnxruntime as ort

    from model_zoo import export, static_shapes

    model, feeds = export(name, small=False)
    shapes = static_shapes(model, feeds)
    if shapes:  # fix the dynamic dims to the example's sizes: both peers run the same static model
        for inp in model.graph.input:
            if inp.name in shapes:
                for d, size in zip(inp.type.tensor_type.shape.dim, shapes[inp.name]):
                    d.Clear()
                    d.dim_value = size
    path = work / f"{name}.onnx"
    onnx.save(model, path)
    np.savez(work / f"{name}_feeds.npz", **feeds)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.save(work / f"{name}_expected.npy", sess.run(None, feeds)[0])
    return {"model": str(path), "input": str(work / f"{name}_feeds.npz"),
            "expected": str(work / f"{name}_expected.npy"), "nodes": len(model.graph.node)}


def run(models: list[str], threads: int, repeat: int, min_ms: float, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {"machine": machine(), "threads": threads, "repeat": repeat, "networks": {}}
    for name in models:
        row: dict = {}
        report["networks"][name] = row
        try:
            files = prepare(name, work)
        except Exception as e:  # noqa: BLE001 - a network that does not export is a row
            row["error"] = f"export failed: {type(e).__name__}: {e}"
            continue
        network = work / f"{name}.tt"
        t0 = time.perf_counter()
        compiled = compile_network(Path(files["model"]), network, work / "cache")
        row["compile_s"] = time.perf_counter() - t0
        if "error" in compiled:
            row["error"] = compiled["error"]
            continue
        base = {"model": files["model"], "input": files["input"], "expected": files["expected"],
                "threads": threads, "min_ms": min_ms, "tolerance": 1e-3}  # float32 over a whole network
        specs = {"tensortune": dict(base, peer="tensortune", network=str(network)),
                 "onnxruntime": dict(base, peer="onnxruntime")}
        row.update(time_interleaved(specs, repeat))
        print(f"{name}: {fmt_row(name, row)}", flush=True)
    return report


def fmt_row(name: str, row: dict) -> str:
    if "error" in row:
        return f"| {name} | {row['error'][:120]} | | |"
    t, o = row["tensortune"], row["onnxruntime"]
    if "median_s" not in t or "median_s" not in o:
        return f"| {name} | {t.get('error', '')} | {o.get('error', '')} | |"
    return (f"| {name} | {t['median_s'] * 1e3:.2f} | {o['median_s'] * 1e3:.2f} | "
            f"{t['median_s'] / o['median_s']:.2f}x |")


def table(report: dict) -> str:
    lines = [SECTION, "",
             f"{report['machine']}, {report['threads']} threads, batch 1, float32, random weights; medians of "
             f"{report['repeat']} timings taken in turns. tensortune with default schedules (no tuning log). "
             "Command: `python benchmarks/zoo_vs_onnxruntime.py --markdown BENCHMARKS.md`.", "",
             "| network | tensortune (ms) | onnxruntime (ms) | tensortune / onnxruntime |", "|---|---|---|---|"]
    lines += [fmt_row(name, row) for name, row in report["networks"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    from model_zoo import ZOO

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", choices=sorted(ZOO), default=list(ZOO))
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--repeat", type=positive_int, default=9)
    p.add_argument("--min-ms", type=float, default=200.0, help="the least duration of one timing")
    p.add_argument("--work", type=Path, default=Path("results/zoo"))
    p.add_argument("--json", help="write the report here")
    p.add_argument("--markdown", help="write the table as this file's section")
    args = p.parse_args()
    report = run(args.models, args.threads, args.repeat, args.min_ms, args.work)
    text = table(report)
    print(text)
    if args.json:
        write_json(args.json, report)
    if args.markdown:
        write_section(Path(args.markdown), text, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())

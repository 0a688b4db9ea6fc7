"""The networks people export, full size, batch 1: tensortune with default schedules (no tuning log) against
onnxruntime, and with ``--peers`` OpenVINO and PyTorch too, on the same threads, in one run with ``e2e.py``'s protocol
(a child process per peer, output checked against onnxruntime's to 1e-3 of its largest magnitude, timings taken in
turns, medians; each child's peak RSS).

The networks are the PyTorch models of ``tests/model_zoo.py`` at their real sizes (random weights, exported with
``torch.onnx.export``); each is compiled once (build cache in ``--work``). A network tensortune cannot compile is a
row with the error. OpenVINO compiles the same ONNX file for its CPU plugin (float32 inference precision, latency
hint); PyTorch eager and ``torch.compile`` run the zoo's PyTorch module itself, the one that was exported.

    python benchmarks/zoo_vs_onnxruntime.py                       # every network, 2 threads
    python benchmarks/zoo_vs_onnxruntime.py --models resnet50 dcgan --repeat 15 --markdown BENCHMARKS.md
    python benchmarks/zoo_vs_onnxruntime.py --models bert gpt2 --peers tensortune onnxruntime openvino torch
    python benchmarks/zoo_vs_onnxruntime.py --models gpt2 --small --repeat 2 --min-ms 20   # a check of the script
"""
from __future__ import annotations

import argparse
import shlex
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from common import positive_int, write_json  # noqa: E402
from e2e import compile_network, machine, time_interleaved, write_section  # noqa: E402

SECTION = "## Model coverage: untuned against onnxruntime"
PEERS = ("tensortune", "onnxruntime", "openvino", "torch", "torch_compile")
DEFAULT_PEERS = ("tensortune", "onnxruntime")
LABELS = {"tensortune": "tensortune", "onnxruntime": "onnxruntime", "openvino": "OpenVINO f32",
          "torch": "PyTorch eager", "torch_compile": "torch.compile"}
#: the table's ratios, where both peers were timed
RATIOS = (("tensortune", "onnxruntime"), ("tensortune", "openvino"))
#: the package each peer is (its version in the table)
PACKAGES = {"onnxruntime": "onnxruntime", "openvino": "openvino", "torch": "torch", "torch_compile": "torch"}


def prepare(name: str, work: Path, small: bool = False) -> dict:
    """Export ``name`` at full size (``small``: its test size); its model, feeds and onnxruntime's first output
    under ``work``."""
    import onnx
    import onnxruntime as ort

    from model_zoo import export, static_shapes

    model, feeds = export(name, small=small)
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


def run(models: list[str], threads: int, repeat: int, min_ms: float, work: Path,
        peers: tuple[str, ...] = DEFAULT_PEERS, small: bool = False) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {"machine": machine(), "threads": threads, "repeat": repeat, "peers": list(peers),
                    "versions": versions(peers), "networks": {}}
    for name in models:
        row: dict = {}
        report["networks"][name] = row
        try:
            files = prepare(name, work, small)
        except Exception as e:  # noqa: BLE001 - a network that does not export is a row
            row["error"] = f"export failed: {type(e).__name__}: {e}"
            continue
        network = work / f"{name}.tt"
        if "tensortune" in peers:
            t0 = time.perf_counter()
            compiled = compile_network(Path(files["model"]), network, work / "cache")
            row["compile_s"] = time.perf_counter() - t0
            if "error" in compiled:
                row["error"] = compiled["error"]
                continue
        base = {"model": files["model"], "input": files["input"], "expected": files["expected"],
                "threads": threads, "min_ms": min_ms, "tolerance": 1e-3}  # float32 over a whole network
        zoo = {"zoo": name, "small": small}  # PyTorch runs the zoo's module, not the graph of the ONNX file
        own = {"tensortune": {"network": str(network)}, "torch": zoo, "torch_compile": zoo}
        row.update(time_interleaved({p: dict(base, peer=p, **own.get(p, {})) for p in peers}, repeat))
        print(f"{name}: {fmt_row(name, row, peers)}", flush=True)
    return report


def versions(peers) -> dict[str, str]:
    """The version of each peer's package."""
    out = {}
    for package in dict.fromkeys(PACKAGES[p] for p in peers if p in PACKAGES):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "not installed"
    return out


def ratios(peers) -> list[tuple[str, str]]:
    return [r for r in RATIOS if set(r) <= set(peers)]


def section(peers) -> str:
    """The markdown section of a run of ``peers``: ``SECTION`` for the default ones, and for any other set a
    section named by its peers, so that a run overwrites only the table of the same peers."""
    against = [LABELS[p] for p in peers if p != "tensortune"]
    names = ", ".join(against[:-1]) + " and " + against[-1] if len(against) > 1 else "".join(against)
    return f"## Model coverage: untuned against {names}"


def _ms(r: dict) -> str:
    return f"{r['median_s'] * 1e3:.2f}" if "median_s" in r else r.get("unavailable") or r.get("error", "")


def _ratio(a: dict, b: dict) -> str:
    return f"{a['median_s'] / b['median_s']:.2f}x" if "median_s" in a and "median_s" in b else ""


def fmt_row(name: str, row: dict, peers) -> str:
    if "error" in row:  # the network did not export or compile
        cells = [row["error"][:120]] + [""] * (len(peers) + len(ratios(peers)))
    else:
        rss = " / ".join(f"{row[p]['peak_rss_mib']:.0f}" if "peak_rss_mib" in row[p] else "-" for p in peers)
        cells = [_ms(row[p]) for p in peers] + [_ratio(row[a], row[b]) for a, b in ratios(peers)] + [rss]
    return "| " + " | ".join([name, *cells]) + " |"


def table(report: dict, title: str) -> str:
    peers = report["peers"]
    head = ([f"{LABELS[p]} (ms)" for p in peers] + [f"{LABELS[a]} / {LABELS[b]}" for a, b in ratios(peers)]
            + ["peak RSS (MiB), same order"])
    packages = ", ".join(f"{k} {v}" for k, v in report["versions"].items())
    lines = [title, "",
             f"{report['machine']}, {report['threads']} threads, batch 1, float32, random weights; medians of "
             f"{report['repeat']} timings taken in turns, each peer in a child process of its own (its peak RSS: "
             "loading, checking, timing). tensortune with default schedules (no tuning log)"
             + (f"; {packages}" if packages else "") + f". Command: `{report['command']}`.", "",
             "| network | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
    lines += [fmt_row(name, row, peers) for name, row in report["networks"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    from model_zoo import ZOO

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", choices=sorted(ZOO), default=list(ZOO))
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--repeat", type=positive_int, default=9)
    p.add_argument("--min-ms", type=float, default=200.0, help="the least duration of one timing")
    p.add_argument("--peers", nargs="+", choices=PEERS, default=list(DEFAULT_PEERS), help="the peers to time")
    p.add_argument("--small", action="store_true",
                   help="the networks at their test sizes: a check of the script, not a benchmark")
    p.add_argument("--work", type=Path, default=Path("results/zoo"))
    p.add_argument("--json", help="write the report here")
    p.add_argument("--markdown", help="write the table as this file's section")
    p.add_argument("--section", help="the markdown section's title (default: from the peers)")
    args = p.parse_args()
    peers = tuple(q for q in PEERS if q in args.peers)
    report = run(args.models, args.threads, args.repeat, args.min_ms, args.work, peers, args.small)
    report["command"] = shlex.join(["python", "benchmarks/zoo_vs_onnxruntime.py", *sys.argv[1:]])
    title = args.section or section(peers)
    text = table(report, title)
    print(text)
    if args.json:
        write_json(args.json, report)
    if args.markdown:
        write_section(Path(args.markdown), text, title)
    return 0


if __name__ == "__main__":
    sys.exit(main())

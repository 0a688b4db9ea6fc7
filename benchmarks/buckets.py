"""Serving several sequence lengths with one module: BERT-base (random weights, exported with a dynamic sequence
axis) compiled by ``tensortune compile --buckets sequence=...`` against onnxruntime running each length as it is.

Reports the cold compile time of all sizes, the constants and the folder on disk (one weights file shared by the
sizes), and for each length: tensortune padding to the next size against onnxruntime on the exact length, in one
run with ``e2e.py``'s protocol (a child process per peer, output checked to 1e-3 of the largest magnitude, timings
in turns, medians), with each peer's peak RSS.

    python benchmarks/buckets.py                                   # sizes 32..512, lengths 20..384
    python benchmarks/buckets.py --sizes 32 64 128 --lengths 20 100 --repeat 5 --markdown BENCHMARKS.md
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from common import positive_int, write_json  # noqa: E402
from e2e import machine, time_interleaved, write_section  # noqa: E402

SECTION = "## Serving several sequence lengths: one bucketed module against onnxruntime"


def export_bert(path: Path, small: bool) -> None:
    """The zoo's BERT with its sequence axis dynamic (``sequence``) in the inputs and the output."""
    import onnx

    from model_zoo import ZOO, to_onnx

    z = ZOO["bert"]
    net, inputs = z.build(small)
    axes = {n: {1: "sequence"} for n in z.input_names} | {"output": {1: "sequence"}}
    onnx.save(to_onnx(net, inputs, z.opset, False, z.input_names, z.output_names, axes), path)


def disk_mib(folder: Path) -> float:
    """The folder's size on disk, each hard-linked file once."""
    seen, total = set(), 0
    for p in folder.rglob("*"):
        st = p.stat()
        if p.is_file() and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total / 2**20


def run(sizes: list[int], lengths: list[int], threads: int, repeat: int, min_ms: float, work: Path,
        small: bool) -> dict:
    import onnxruntime as ort

    work.mkdir(parents=True, exist_ok=True)
    model, network = work / "bert_dynamic.onnx", work / "bert_buckets.tt"
    export_bert(model, small)
    with tempfile.TemporaryDirectory() as cache:  # cold: nothing compiled before
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "tensortune", "compile", str(model), "-o", str(network),
                               "--buckets", "sequence=" + ",".join(map(str, sizes)), "--json"],
                              env=dict(os.environ, TENSORTUNE_CACHE_DIR=cache), capture_output=True, text=True)
        seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"compile failed: {done.stderr.strip()}")
    summary = json.loads(done.stdout)
    report: dict = {"machine": machine(), "threads": threads, "repeat": repeat, "sizes": sizes,
                    "compile_s": seconds, "constants_mib": summary["constants_bytes"] / 2**20,
                    "folder_mib": disk_mib(network), "model_mib": model.stat().st_size / 2**20, "lengths": {}}
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    vocab = 1000 if small else 30522
    for length in lengths:
        rng = np.random.default_rng(length)
        feeds = {"input_ids": rng.integers(1, vocab, (1, length)).astype(np.int64),
                 "attention_mask": np.ones((1, length), np.int64)}
        np.savez(work / f"feeds_{length}.npz", **feeds)
        np.save(work / f"expected_{length}.npy", sess.run(None, feeds)[0])
        base = {"model": str(model), "input": str(work / f"feeds_{length}.npz"),
                "expected": str(work / f"expected_{length}.npy"), "threads": threads, "min_ms": min_ms,
                "tolerance": 1e-3}
        row = time_interleaved({"tensortune": dict(base, peer="tensortune", network=str(network)),
                                "onnxruntime": dict(base, peer="onnxruntime")}, repeat)
        row["bucket"] = min(s for s in sizes if s >= length) if length <= max(sizes) else None
        report["lengths"][length] = row
        print(f"length {length}: {fmt_row(length, row)}", flush=True)
    return report


def fmt_row(length: int, row: dict) -> str:
    t, o = row["tensortune"], row["onnxruntime"]
    if "median_s" not in t or "median_s" not in o:
        return f"| {length} | {row['bucket']} | {t.get('error', '')} | {o.get('error', '')} | | |"
    return (f"| {length} | {row['bucket']} | {t['median_s'] * 1e3:.2f} | {o['median_s'] * 1e3:.2f} | "
            f"{t['median_s'] / o['median_s']:.2f}x | {t.get('peak_rss_mib', 0):.0f} / {o.get('peak_rss_mib', 0):.0f} |")


def table(report: dict, command: str) -> str:
    lines = [SECTION, "",
             f"{report['machine']}, {report['threads']} threads, batch 1, float32, BERT-base with random weights "
             f"(ONNX file {report['model_mib']:.0f} MiB), sizes {report['sizes']}: cold compile of all sizes "
             f"{report['compile_s']:.1f} s, constants {report['constants_mib']:.0f} MiB shared by the sizes, "
             f"exported folder {report['folder_mib']:.0f} MiB on disk. tensortune pads each input to its bucket; "
             f"onnxruntime runs the exact length. Medians of {report['repeat']} timings taken in turns. Command: "
             f"`{command}`.", "",
             "| length | bucket | tensortune (ms) | onnxruntime (ms) | tensortune / onnxruntime | peak RSS MiB "
             "(tensortune / onnxruntime) |", "|---|---|---|---|---|---|"]
    lines += [fmt_row(length, row) for length, row in report["lengths"].items()]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="+", type=positive_int, default=[32, 64, 128, 256, 512])
    p.add_argument("--lengths", nargs="+", type=positive_int, default=[20, 64, 100, 200, 384])
    p.add_argument("--threads", type=positive_int, default=2)
    p.add_argument("--repeat", type=positive_int, default=7)
    p.add_argument("--min-ms", type=float, default=200.0, help="the least duration of one timing")
    p.add_argument("--small", action="store_true", help="the test-size BERT (to check the script)")
    p.add_argument("--work", type=Path, default=Path("results/buckets"))
    p.add_argument("--json", help="write the report here")
    p.add_argument("--markdown", help="write the table as this file's section")
    args = p.parse_args()
    if max(args.lengths) > max(args.sizes):
        p.error(f"a length of {max(args.lengths)} needs a size at least as large (--sizes)")
    report = run(sorted(set(args.sizes)), args.lengths, args.threads, args.repeat, args.min_ms, args.work, args.small)
    text = table(report, "python " + " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]))
    print(text)
    if args.json:
        write_json(args.json, report)
    if args.markdown:
        write_section(Path(args.markdown), text, SECTION)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Snapshot of what the network compiler generates, to check that a refactoring changes no kernel.

For each model of the zoo, each target and each tuning log given, the optimized graph, every call (node, kernel
function, its slots), the C source of every kernel function, the entry point, the memory plan and a digest of the
constant arena are written to one JSON file. ``--compare OLD NEW`` lists every difference, kernel by kernel (the
kernels matched by the node they compute, so a renumbering alone is reported as such).

    python benchmarks/codegen_snapshot.py --out before.json
    ... change the compiler ...
    python benchmarks/codegen_snapshot.py --out after.json
    python benchmarks/codegen_snapshot.py --compare before.json after.json

Nothing is compiled by the C compiler: the program is built up to its source.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tensortune.network.compile_model import optimized_graph  # noqa: E402
from tensortune.network.program import build_program  # noqa: E402
from tensortune.network.zoo import MODELS  # noqa: E402
from tensortune.target import Target  # noqa: E402

TARGETS = {"avx512": "c -isa=avx512 -cores=2 -arch=x86_64 -native", "avx2": "c -isa=avx2 -cores=2 -arch=x86_64",
           "neon": "c -isa=neon -cores=2 -arch=aarch64"}
#: (model, target name) -> tuning log of that network (the avx512 logs, their target rewritten for avx2)
LOGS = {("resnet18", "avx512"): "data/logs/avx512/resnet18_network.jsonl.gz",
        ("mobilenet_v2", "avx512"): "data/logs/avx512/mobilenet_v2_network.jsonl.gz",
        ("resnet18", "avx2"): "data/logs/avx512/resnet18_network.jsonl.gz",
        ("mobilenet_v2", "avx2"): "data/logs/avx512/mobilenet_v2_network.jsonl.gz"}
_FUNC = re.compile(r"^static void (k\d+_\w+)\(", re.M)


def functions(source: str) -> dict[str, str]:
    """Kernel function name -> its C text (from its signature to the next function or the entry point)."""
    starts = [(m.start(), m.group(1)) for m in _FUNC.finditer(source)]
    end = source.find("int32_t network_run(")
    out = {}
    for k, (pos, name) in enumerate(starts):
        stop = starts[k + 1][0] if k + 1 < len(starts) else end
        out[name] = source[pos:stop].rstrip()
    return out


def plain_log(path: str, target: str, tmp: Path) -> str:
    """The log at ``path`` (gzip or not) as a plain file whose records name ``target``."""
    opener = gzip.open if path.endswith(".gz") else open
    out = tmp / (Path(path).name.replace(".gz", "") + f".{abs(hash(target))}.jsonl")
    with opener(ROOT / path, "rt") as f, open(out, "w") as g:
        for line in f:
            rec = json.loads(line)
            rec["target"] = target
            g.write(json.dumps(rec) + "\n")
    return str(out)


def snapshot(models: list[str], targets: list[str], with_logs: bool, log_dir: Path | None = None) -> dict:
    from tensortune.network.tuned import TunedKernels

    out = {}
    tmp = Path(tempfile.mkdtemp())
    try:
        for model in models:
            proto = _model(model)
            for tname in targets:
                target = Target.parse(TARGETS[tname])
                runs = [("default", None)]
                if with_logs and (model, tname) in LOGS:
                    runs.append(("tuned", plain_log(LOGS[(model, tname)], str(target), tmp)))
                if log_dir is not None and (log_dir / f"{model}_{tname}.jsonl").is_file():
                    runs.append(("logdir", str(log_dir / f"{model}_{tname}.jsonl")))
                for label, log in runs:
                    key = f"{model}/{tname}/{label}"
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        try:
                            choose = TunedKernels(log, target) if log else None
                            g = optimized_graph(proto, target, records=choose.records if choose else None)
                            p = build_program(g, target, choose, use_cache=False)
                        except Exception as e:  # noqa: BLE001 - a refused model is part of the snapshot
                            out[key] = {"error": f"{type(e).__name__}: {e}"}
                            print(f"{key}: {type(e).__name__}", file=sys.stderr)
                            continue
                    funcs = functions(p.source)
                    out[key] = {
                        "graph": str(g),
                        "calls": [[c.node, c.function, [[s.place.value, s.offset] for s in c.slots]] for c in p.calls],
                        "kernels": {k.function: {"kind": k.kind, "nodes": list(k.nodes), "flops": k.flops,
                                                 "template": k.template, "source": funcs.get(k.function, "")}
                                    for k in p.kernels},
                        "entry": p.source[p.source.find("int32_t network_run("):],
                        "prelude": p.source[:min([m.start() for m in _FUNC.finditer(p.source)] or [0])],
                        "workspace_bytes": p.workspace_bytes, "constants_bytes": p.constants_bytes,
                        "constants_sha256": hashlib.sha256(p.constant_arena().tobytes()).hexdigest(),
                    }
                    print(f"{key}: {len(p.calls)} calls, {len(p.kernels)} kernels", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _model(name: str):
    """A zoo model, or ``case:ID``: the model of a case of ``tests/onnx_cases.py``."""
    if not name.startswith("case:"):
        return MODELS[name]()
    sys.path.insert(0, str(ROOT / "tests"))
    from onnx_cases import CASES

    return next(c for c in CASES if c.id == name[5:]).build()[0]


def case_names() -> list[str]:
    sys.path.insert(0, str(ROOT / "tests"))
    from onnx_cases import CASES

    return [f"case:{c.id}" for c in CASES]


def compare(old: dict, new: dict) -> int:
    """Print every difference; the number of differences."""
    diffs = 0

    def say(*a):
        nonlocal diffs
        diffs += 1
        print(*a)

    for key in sorted(set(old) | set(new)):
        if key not in old or key not in new:
            say(f"{key}: only in {'new' if key in new else 'old'}")
            continue
        a, b = old[key], new[key]
        if "error" in a or "error" in b:
            if a.get("error") != b.get("error"):
                say(f"{key}: error {a.get('error')!r} -> {b.get('error')!r}")
            continue
        for field in ("graph", "entry", "prelude", "workspace_bytes", "constants_bytes", "constants_sha256"):
            if a[field] != b[field]:
                say(f"{key}: {field} differs")
        by_node_a = {n: f for f in a["kernels"] for n in a["kernels"][f]["nodes"]}
        by_node_b = {n: f for f in b["kernels"] for n in b["kernels"][f]["nodes"]}
        if set(by_node_a) != set(by_node_b):
            say(f"{key}: kernels for other nodes: {sorted(set(by_node_a) ^ set(by_node_b))[:6]}")
        for node in sorted(set(by_node_a) & set(by_node_b)):
            fa, fb = by_node_a[node], by_node_b[node]
            ka, kb = a["kernels"][fa], b["kernels"][fb]
            src_a = ka["source"].replace(fa, "FUNC")
            src_b = kb["source"].replace(fb, "FUNC")
            if src_a != src_b:
                say(f"{key}: node {node}: kernel {fa} -> {fb} source differs")
            elif fa != fb:
                say(f"{key}: node {node}: kernel renamed {fa} -> {fb}")
            for field in ("kind", "flops", "template"):
                if ka[field] != kb[field]:
                    say(f"{key}: node {node}: {field} {ka[field]!r} -> {kb[field]!r}")
    print(f"{diffs} difference(s)")
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the snapshot here")
    ap.add_argument("--models", nargs="+", default=sorted(MODELS))
    ap.add_argument("--targets", nargs="+", default=sorted(TARGETS), choices=sorted(TARGETS))
    ap.add_argument("--no-logs", action="store_true", help="default schedules only")
    ap.add_argument("--log-dir", type=Path, help="more logs: MODEL_TARGET.jsonl files of this folder")
    ap.add_argument("--onnx-cases", action="store_true", help="the models of tests/onnx_cases.py instead of the zoo")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    args = ap.parse_args()
    if args.compare:
        old, new = (json.loads(Path(p).read_text()) for p in args.compare)
        sys.exit(1 if compare(old, new) else 0)
    if not args.out:
        ap.error("give --out or --compare")
    models = case_names() if args.onnx_cases else args.models
    Path(args.out).write_text(json.dumps(snapshot(models, args.targets, not args.no_logs, args.log_dir), indent=0))


if __name__ == "__main__":
    main()

"""Two versions of tensortune compile the same networks; their modules are timed in turns in one process.

For refactorings that must not change speed: each version (a git revision, checked out into a temporary worktree,
and the working tree) compiles each zoo model, with and without a tuning log, in a process of its own, and exports
it; then one process loads every export and times the old and the new module of each network in interleaved
rounds (``network.refine.whole_network_seconds``: medians of rounds, each round in another order). It also says
whether the two versions generated the same C source.

    python benchmarks/versions_ab.py --old e756714 --models resnet18 mobilenet_v2 \\
        --log resnet18=data/logs/avx512/resnet18_network.jsonl.gz \\
        --log mobilenet_v2=data/logs/avx512/mobilenet_v2_network.jsonl.gz
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_EXPORT = """
import sys, json, onnx
import tensortune as tt
from tensortune.network import zoo
model, log, out = sys.argv[1], sys.argv[2] or None, sys.argv[3]
m = zoo.MODELS[model]()
tt.compile(m, log=log).export(out)
"""


def _plain(log: str, tmp: Path) -> str:
    """A gzip log as a plain file (older versions read plain JSON lines only)."""
    if not log.endswith(".gz"):
        return str(Path(log).resolve())
    out = tmp / Path(log).name[:-3]
    with gzip.open(log, "rt") as f:
        out.write_text(f.read())
    return str(out)


def export(version_root: Path, model: str, log: str | None, out: Path, cache: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(version_root), TENSORTUNE_CACHE_DIR=str(cache))
    subprocess.run([sys.executable, "-c", _EXPORT, model, log or "", str(out)], check=True, env=env,
                   cwd=version_root)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", required=True, help="the git revision to compare the working tree with")
    ap.add_argument("--models", nargs="+", default=["resnet18", "mobilenet_v2"])
    ap.add_argument("--log", action="append", default=[], metavar="MODEL=PATH", help="a tuning log of a model")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--runs", type=int, default=10, help="runs per timing")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    logs = dict(item.split("=", 1) for item in args.log)
    tmp = Path(tempfile.mkdtemp(prefix="tt-versions-"))
    try:
        old_root = tmp / "old"
        subprocess.run(["git", "worktree", "add", "--detach", str(old_root), args.old], check=True, cwd=ROOT,
                       capture_output=True)
        cases = [(m, None) for m in args.models] + [(m, logs[m]) for m in args.models if m in logs]
        exports = {}
        for model, log in cases:
            label = f"{model}{' tuned' if log else ''}"
            plain = _plain(log, tmp) if log else None
            for version, root in (("old", old_root), ("new", ROOT)):
                out = tmp / f"{version}-{label.replace(' ', '-')}"
                export(root, model, plain, out, tmp / f"cache-{version}")
                exports[(label, version)] = out
            same = (exports[(label, "old")] / "network.c").read_text().split("\n", 1)[1] == \
                (exports[(label, "new")] / "network.c").read_text().split("\n", 1)[1]
            print(f"{label}: the two versions generated {'the same' if same else 'different'} C", flush=True)

        import numpy as np

        import tensortune as tt
        from tensortune.network.module import random_inputs
        from tensortune.network.refine import whole_network_seconds
        from tensortune.target import Target

        print(f"timing on {Target.host()}, {args.rounds} rounds of {args.runs} runs, old and new in turns")
        results = {}
        for label in dict.fromkeys(k[0] for k in exports):
            modules = {v: tt.load(exports[(label, v)], args.threads) for v in ("old", "new")}
            inputs = random_inputs(modules["new"])
            np.testing.assert_array_equal(modules["old"](*inputs), modules["new"](*inputs))
            seconds = whole_network_seconds(modules, inputs, args.rounds, args.runs)
            results[label] = {"old_s": seconds["old"], "new_s": seconds["new"], "new_over_old": seconds["new"] /
                              seconds["old"]}
            print(f"{label}: old {seconds['old'] * 1e3:.3f} ms, new {seconds['new'] * 1e3:.3f} ms, "
                  f"new/old {seconds['new'] / seconds['old']:.3f} (outputs equal)", flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tmp / "old")], cwd=ROOT, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

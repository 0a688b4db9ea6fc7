"""Tuned kernels against the libraries users already have: ResNet-18 C1..C12 and matmul 512/1024/2048.

Each workload is tuned with the ``xgb`` tuner (logs under ``--out``; running again resumes them), then
timed in the same run, with one protocol for everyone (one warm-up call, ``--repeat`` timings of at
least ``--min-repeat-ms`` each, median), on 1 and on 2 threads, in ``--rounds`` rounds over all workloads
(medians over the rounds; each ratio the median of the ratios within a round, so that a slow spell of a
shared machine, which can halve any kernel for seconds, hits both sides of a ratio alike):

* tensortune's best config, checked against numpy first. Two views for conv2d:
  - *NCHW*: NCHW input and output, the layout transforms inside the timed kernel (the view's templates share
    its trials: ``conv2d_nchw_spatial_pack``, which reads the input in place, ``conv2d_nchwc``, which packs it
    into channel blocks first, and for 3x3, stride-1 layers ``conv2d_winograd_nchw``, which gathers its input
    tiles from NCHW and writes its output tiles to NCHW; the view times the one whose logged best is faster);
  - *packed*: NCHW[x]c input and output (blocks of one or two vectors of the target, a knob: 16c or 32c on
    AVX-512, 8c or 16c on AVX2), as the kernel runs inside a compiled network whose tensors stay blocked; the
    transforms are outside the timed region (``conv2d_nchwc_packed``; for 3x3, stride-1 layers it shares the
    trials with ``conv2d_winograd_nchwc_packed``, as a network's tuner offers both: the GFLOP/s are then those
    of the direct convolution's FLOPs over the time, "effective").
  Weights are packed once, outside the timed region, in both views (they are constants of a model).
* peers (``tensortune.benchmarking.peers``, in a child process): PyTorch ``conv2d`` in NCHW and channels-last,
  onnxruntime on a one-node ONNX model, ``numpy.matmul`` (OpenBLAS overrides unset) and ``torch.matmul``.
  With ``--target`` narrower than this machine (``avx2`` on an AVX-512 host), numpy and PyTorch run capped to
  that ISA (``OPENBLAS_CORETYPE=Haswell``, ``ATEN_CPU_CAPABILITY=avx2``, ``ONEDNN_MAX_CPU_ISA=AVX2``,
  ``MKL_ENABLE_INSTRUCTIONS=AVX2`` for the MKL behind ``torch.matmul``);
  onnxruntime has no such setting, so it is shown but left out of the best peer and the ratios.

Each view's kernel is chosen among each of its templates' ``--top`` fastest logged configs, timed again
first on each thread count (the tuner's best is the luckiest of many short measurements, and the fastest on
2 threads need not be the fastest on 1; ``row["retimed"]`` in the JSON).

It prints a markdown table (GFLOP/s, percent of the FMA peak, ratio tensortune / best peer) with the
geometric means, writes ``--json``, replaces the section between ``<!-- vs_libraries:<isa>:begin -->`` and
``<!-- vs_libraries:<isa>:end -->`` of the ``--benchmarks-md`` file, and last draws a bar chart (``--png``;
skipped with a note when matplotlib is missing).

    python benchmarks/vs_libraries.py                          # default trials: about an hour here
    python benchmarks/vs_libraries.py --trials 300 --history --json results/vs_libraries.json
    python benchmarks/vs_libraries.py --quick                  # C5, C6 and matmul 512: a few minutes
"""
from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path

import numpy as np

from common import pyplot, write_json

CONVS = tuple(f"resnet18:C{i}" for i in range(1, 13))
MATMULS = ("matmul:512", "matmul:1024", "matmul:2048")
QUICK = ("resnet18:C5", "resnet18:C6", "matmul:512")
#: Shapes with prime or few-divisor extents, unlike the shipped workloads: register tiles that divide them
#: are few or poor, so the tuner needs tiles that do not divide (padded or guarded).
FEW_DIVISORS = {
    "few:P1": ("conv2d", {"IC": 48, "OC": 80, "H": 17, "W": 17, "K": 3, "stride": 1, "pad": 1}),
    "few:P2": ("conv2d", {"IC": 96, "OC": 96, "H": 13, "W": 13, "K": 3, "stride": 1, "pad": 1}),
    "few:P3": ("conv2d", {"IC": 64, "OC": 112, "H": 23, "W": 23, "K": 1, "stride": 1, "pad": 0}),
    "few:P4": ("conv2d", {"IC": 72, "OC": 144, "H": 19, "W": 19, "K": 3, "stride": 2, "pad": 1}),
    "few:M1": ("matmul", {"M": 997, "N": 1000, "K": 512}),
    "few:M2": ("matmul", {"M": 257, "N": 384, "K": 769}),
}
#: view -> the templates that share its trials (the first one's log keeps the view's name, as before)
VIEWS = {"nchw": ("conv2d_nchw_spatial_pack", "conv2d_nchwc", "conv2d_winograd_nchw"),
         "packed": ("conv2d_nchwc_packed", "conv2d_winograd_nchwc_packed")}  # Winograd: 3x3, stride 1 only
PEERS = ("torch", "torch_channels_last", "onnxruntime", "numpy")
MARKER = "<!-- vs_libraries:{isa}:{end} -->"  # BENCHMARKS.md keeps one section per ISA


def tasks_of(key: str, target) -> dict:
    """The tasks tuned for one workload: {view: [task of each of the view's templates]}."""
    from tensortune.autotvm.catalog import create_task, task_from_workload
    def some(make, templates):  # the templates that compute this shape (Winograd: 3x3, stride 1)
        tasks = [make(t) for t in templates]
        return [t for t in tasks if "winograd" not in t.name or tuple(t.args[5:7]) == (3, 1)]

    if key.startswith("matmul:"):
        n = int(key.split(":")[1])
        return {"matmul": [create_task("matmul", {"M": n, "N": n, "K": n}, target=target)]}
    if key in FEW_DIVISORS:
        operator, shape = FEW_DIVISORS[key]
        if operator == "matmul":
            return {"matmul": [create_task("matmul", shape, target=target)]}
        return {view: some(lambda t: create_task(operator, shape, template=t, target=target), ts)
                for view, ts in VIEWS.items()}
    return {view: some(lambda t: task_from_workload(key, template=t, target=target), ts) for view, ts in VIEWS.items()}


def log_path(out: Path, key: str, view: str, k: int = 0) -> Path:
    """The log of the view's ``k``-th template."""
    return out / f"{key.replace(':', '_')}_{view}{'' if k == 0 else f'_{k}'}.json"


def tune_all(keys, trials: int, out: Path, history: bool, batch_size: int, target) -> None:
    from tensortune.autotvm.measure.measure import Measurer
    from tensortune.autotvm.record import load_records
    from tensortune.autotvm.tune import tune

    with Measurer() as measurer:
        for key in keys:
            for view, tasks in tasks_of(key, target).items():
                for k, task in enumerate(tasks):  # the view's templates share its trials
                    log = log_path(out, key, view, k)
                    past = None
                    if history:  # every other log of this benchmark: the transfer model skips this workload's own
                        past = [r for p in sorted(out.glob("*.json")) if p != log for r in load_records(p)] or None
                    t0 = time.time()
                    r = tune(task, max(1, trials // len(tasks)), tuner="xgb", batch_size=batch_size,
                             measure=measurer.measure, log_file=log, progress=False, seed=0, history=past)
                    print(f"tuned {key:18s} {view:7s} {task.name:26s} best {r.best_gflops:7.1f} GFLOP/s after "
                          f"{len(r.history)} trials ({time.time() - t0:.0f} s)", flush=True)


def time_all(keys, out: Path, threads_list, repeat: int, min_repeat_ms: float, target, rounds: int = 1,
             top: int = 1) -> list[dict]:
    """One row per (workload, threads): GFLOP/s of each tensortune view and each peer.

    Everything is timed ``rounds`` times, round after round over all workloads (tuned kernels first in even
    rounds, peers first in odd ones), so that a slow spell of a shared machine hits every kernel alike. A
    row's GFLOP/s are medians over the rounds (each round's figure a median of ``repeat`` timings), its
    ratios medians over the rounds of the ratio within each round (against the peer of highest median),
    and ``row["rounds"]`` keeps every round's GFLOP/s. With ``top`` > 1, each view's kernel is chosen first
    among each template's ``top`` fastest logged configs, timed again on the row's threads (``row["retimed"]``, see
    ``_build_views``).
    """
    from tensortune.benchmarking import compare, peers as peer_lib

    built = {key: _build_views(key, out, target, top, threads_list) for key in keys}
    per_round: dict[tuple, dict[str, list]] = {}  # (key, threads) -> kernel -> GFLOP/s of each round
    rows = {}
    for rnd in range(rounds):
        for key in keys:
            for threads in threads_list:
                by_threads, peer_task, retimed_by_threads = built[key]
                views, retimed = by_threads[threads], retimed_by_threads[threads]
                row = rows.setdefault((key, threads), {"workload": key, "threads": threads, "flops": peer_task.flops,
                                                       "gflops": {}, "errors": {}}
                                       | ({"retimed": retimed} if retimed else {}))
                seen = per_round.setdefault((key, threads), {})

                def ours():
                    for view, (task, op, module, inputs, expected, idx) in views.items():
                        row.setdefault("configs", {})[view] = idx
                        row.setdefault("templates", {})[view] = task.name
                        if f"tensortune_{view}" in row["errors"]:
                            continue  # wrong once: never timed
                        t = compare.time_module(module, inputs, op, expected, threads, repeat, min_repeat_ms)
                        if "error" in t:  # never report a wrong kernel's speed
                            row["errors"][f"tensortune_{view}"] = t["error"]
                            seen.pop(f"tensortune_{view}", None)
                        else:
                            seen.setdefault(f"tensortune_{view}", []).append(task.flops / t["median_s"] / 1e9)

                def theirs():
                    for name, p in peer_lib.time_peers(peer_task, threads, repeat, min_repeat_ms).items():
                        if "median_s" in p:
                            seen.setdefault(name, []).append(peer_task.flops / p["median_s"] / 1e9)
                            if "capped" in p:
                                row.setdefault("capped", {})[name] = p["capped"]
                            if "uncapped" in p:  # shown, but not compared: it ran with a wider ISA
                                row.setdefault("uncapped", {})[name] = p["uncapped"]
                        else:
                            row["errors"][name] = p.get("unavailable") or p.get("error")

                for part in ((ours, theirs) if rnd % 2 == 0 else (theirs, ours)):
                    part()
                print(f"round {rnd + 1}/{rounds} {key} {threads} thread(s): " + ", ".join(
                    f"{k.replace('tensortune_', 'tt ')} {v[-1]:.0f}" for k, v in seen.items()), flush=True)
                if rnd == rounds - 1:
                    _summarise_row(row, seen, rounds)
                    print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()
                                      if k not in ("gflops", "gflops_best", "rounds", "retimed")}
                                     | {"gflops": {k: round(v, 1) for k, v in row["gflops"].items()}}), flush=True)
    return list(rows.values())


def _build_views(key: str, out: Path, target, top: int = 1, threads_list=(1,)) -> tuple[dict, object, dict]:
    """For each thread count, each view's kernel, built, with its checked inputs; the task the peers compute;
    and, when ``top`` > 1, per thread count the candidates re-timed to choose each view's kernel.

    A view's kernel is its templates' fastest logged record, or with ``top`` > 1 the fastest, timed again on
    the row's threads, of each template's ``top`` fastest records (``compare.fastest_of``): the tuner's best
    is the luckiest of many short measurements, and the fastest on 2 threads need not be on 1. The logs are
    read once and each chosen config is built once, whichever thread counts chose it.
    """
    from tensortune.autotvm.record import load_records, top_records
    from tensortune.benchmarking.compare import build_config, fastest_of

    tasks = tasks_of(key, target)
    built: dict[int, dict] = {threads: {} for threads in threads_list}
    retimed: dict[int, dict] = {threads: {} for threads in threads_list}
    modules: dict[tuple[str, int], tuple] = {}  # (template, config) -> its module, op, inputs, expected
    for view, view_tasks in tasks.items():
        logs = [(task, log_path(out, key, view, k)) for k, task in enumerate(view_tasks)]
        missing = [task.name for task, log in logs if not log.exists()]
        if missing and len(missing) < len(logs):
            print(f"{key} {view}: no log of {', '.join(missing)} in {out}; timing the view's other templates")
        found = [(rec, task) for task, log in logs if log.exists() for rec in top_records(load_records(log), task, top)]
        if not found:
            print(f"{key} {view}: no successful record in the log; tune it first")
            continue
        logged_best, logged_task = min(found, key=lambda f: f[0].cost)  # the view's template of fastest logged best
        for threads in threads_list:
            task, index = logged_task, logged_best.config_index
            if top > 1 and len(found) > 1:
                entries = fastest_of([(t, r.config_index) for r, t in found], threads)
                retimed[threads][view] = [
                    {"template": e["task"].name, "config": e["config_index"],
                     "logged_gflops": e["task"].flops / r.cost / 1e9,
                     **({"gflops": e["task"].flops / e["median_s"] / 1e9} if "median_s" in e else {"error": e["error"]})}
                    for e, (r, _) in zip(entries, found)]
                timed = [e for e in entries if "median_s" in e]
                if timed:
                    best = min(timed, key=lambda e: e["median_s"])
                    task, index = best["task"], best["config_index"]
            if (task.name, index) not in modules:
                modules[task.name, index] = build_config(task, index)
            module, op, inputs, expected = modules[task.name, index]
            built[threads][view] = (task, op, module, inputs, expected, index)
    return built, next(iter(tasks.values()))[0], retimed


def _summarise_row(row: dict, seen: dict[str, list], rounds: int) -> None:
    """Medians over the rounds (GFLOP/s; ratios paired within each round) into ``row``; and, as
    ``gflops_best`` / ``best_ratio_<view>``, each kernel's fastest round (the least disturbed: a busy machine
    only ever slows a kernel down) and the ratios of those."""
    full = {k: v for k, v in seen.items() if len(v) == rounds}  # a kernel that failed in some round is not compared
    row["gflops"] = {k: float(np.median(v)) for k, v in full.items()}
    row["gflops_best"] = {k: float(max(v)) for k, v in full.items()}
    row["rounds"] = {k: [round(x, 2) for x in v] for k, v in seen.items()}
    peers = {k: v for k, v in row["gflops"].items() if k in PEERS and k not in row.get("uncapped", {})}
    if not peers:
        return
    best = row["best_peer"] = max(peers, key=peers.get)
    best_of_rounds = max(row["gflops_best"][k] for k in peers)
    for k in row["gflops"]:
        if k.startswith("tensortune_"):
            view = k[len("tensortune_"):]
            row[f"ratio_{view}"] = float(np.median(np.divide(full[k], full[best])))
            row[f"best_ratio_{view}"] = row["gflops_best"][k] / best_of_rounds
    if "numpy" in peers and "tensortune_matmul" in full:
        row["ratio_vs_numpy"] = float(np.median(np.divide(full["tensortune_matmul"], full["numpy"])))


def cpu_model() -> str:
    """The CPU's model name (Linux), for the record of where the figures were measured."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return "unknown CPU"


def geomean(xs) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return float(np.exp(np.mean(np.log(xs)))) if xs else None


def summarise(rows: list[dict], threads_list) -> dict:
    out = {}
    for t in threads_list:
        conv = [r for r in rows if r["threads"] == t and r["workload"].startswith("resnet18:")]
        mm = [r for r in rows if r["threads"] == t and r["workload"].startswith("matmul:")]
        few = [r for r in rows if r["threads"] == t and r["workload"].startswith("few:")]
        out[t] = {"geomean_nchw": geomean(r.get("ratio_nchw") for r in conv),
                  "geomean_packed": geomean(r.get("ratio_packed") for r in conv),
                  # each kernel's fastest round against the fastest round of any peer (rows timed in rounds)
                  "best_of_rounds_geomean_nchw": geomean(r.get("best_ratio_nchw") for r in conv),
                  "best_of_rounds_geomean_packed": geomean(r.get("best_ratio_packed") for r in conv),
                  "min_nchw": min((r["ratio_nchw"] for r in conv if "ratio_nchw" in r), default=None),
                  "min_packed": min((r["ratio_packed"] for r in conv if "ratio_packed" in r), default=None),
                  "matmul_vs_numpy": {r["workload"]: r.get("ratio_vs_numpy") for r in mm},
                  # the better tensortune view of each few-divisor shape, against the best peer
                  "few_divisors_best_view": {r["workload"]: max(r.get(f"ratio_{v}") or 0.0 for v in
                                                                ("nchw", "packed", "matmul")) for r in few}}
    return out


def _fmt(v, spec=".0f") -> str:
    return "-" if v is None else format(v, spec)


def markdown(rows: list[dict], summary: dict, peaks: dict, command: str, machine: str, rounds: int = 1,
             top: int = 1) -> str:
    cols = ["tensortune_nchw", "tensortune_packed", "tensortune_matmul", *PEERS]
    head = {"tensortune_nchw": "tt NCHW", "tensortune_packed": "tt packed", "tensortune_matmul": "tt",
            "torch": "torch NCHW", "torch_channels_last": "torch CL", "onnxruntime": "onnxruntime", "numpy": "numpy"}
    lines = [f"Command: `{command}`", "", f"Machine: {machine}", ""]
    if rounds > 1:
        lines += [f"Timed in {rounds} rounds over all workloads, tuned kernels and peers alternating first: GFLOP/s "
                  "are medians over the rounds, ratios the medians of the ratios within each round.", ""]
    capped = sorted({name for r in rows for name in r.get("capped", {})})
    uncapped = sorted({name for r in rows for name in r.get("uncapped", {})})
    if capped:
        setting = next(r["capped"][capped[0]] for r in rows if capped[0] in r.get("capped", {}))
        lines += [f"Peers capped to the target's ISA ({setting}): {', '.join(capped)}."
                  + (f" Not capped, no such setting, so shown but left out of the best peer: {', '.join(uncapped)}."
                     if uncapped else ""), ""]
    if top > 1:
        lines += [f"Each view's kernel: the fastest, timed again on its row's threads, of each of its templates' {top} "
                  "fastest logged configs.", ""]
    for t in sorted({r["threads"] for r in rows}, reverse=True):
        peak = peaks[t]
        lines += [f"**{t} thread{'s' if t > 1 else ''}** (GFLOP/s, median; FMA peak of the target's vectors "
                  f"measured on this machine: {peak:.0f})", "",
                  "| workload | " + " | ".join(head[c] for c in cols) + " | best peer | tt NCHW / best | "
                  "tt packed / best | tt % of peak |",
                  "|---" * (len(cols) + 5) + "|"]
        for r in (r for r in rows if r["threads"] == t):
            g = r["gflops"]
            tt = max((v for k, v in g.items() if k.startswith("tensortune_")), default=None)
            ratio_n = r.get("ratio_nchw", r.get("ratio_matmul"))
            lines.append(f"| {r['workload']} | " + " | ".join(_fmt(g.get(c)) for c in cols) +
                         f" | {r.get('best_peer', '-')} | {_fmt(ratio_n, '.2f')} | {_fmt(r.get('ratio_packed'), '.2f')}"
                         f" | {_fmt(tt and 100 * tt / peak)}% |")
        s = summary[t]
        lines += ["", f"Geometric mean over C1-C12 of tensortune / best peer: NCHW view "
                      f"{_fmt(s['geomean_nchw'], '.2f')} (lowest {_fmt(s['min_nchw'], '.2f')}), packed view "
                      f"{_fmt(s['geomean_packed'], '.2f')} (lowest {_fmt(s['min_packed'], '.2f')}). Matmul / numpy: "
                      + ", ".join(f"{k.split(':')[1]}^3 {_fmt(v, '.2f')}" for k, v in s["matmul_vs_numpy"].items())
                      + ("; few-divisor shapes, best view / best peer: " + ", ".join(
                          f"{k.split(':')[1]} {_fmt(v, '.2f')}" for k, v in s["few_divisors_best_view"].items())
                         if s["few_divisors_best_view"] else ""),
                  ""]
        if s["best_of_rounds_geomean_packed"] is not None:
            lines += ["Each kernel's fastest round against the fastest round of any peer (the least disturbed "
                      f"timings), geometric mean over C1-C12: NCHW view {_fmt(s['best_of_rounds_geomean_nchw'], '.2f')}"
                      f", packed view {_fmt(s['best_of_rounds_geomean_packed'], '.2f')}.", ""]
    for view in VIEWS:
        chosen = {r["workload"]: r["templates"][view] for r in rows if view in r.get("templates", {})}
        if chosen:
            lines += [f"{view} view, the template of the faster logged best: " + ", ".join(
                f"{k.split(':')[1]} {v.replace('conv2d_', '')}" for k, v in chosen.items()), ""]
    return "\n".join(lines)


def plot(rows: list[dict], threads: int, path: Path) -> None:
    """A bar chart of the GFLOP/s of every kernel on ``threads`` threads (none, after a note, without matplotlib)."""
    plt = pyplot()
    if plt is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [r for r in rows if r["threads"] == threads]
    series = ["tensortune_nchw", "tensortune_packed", "tensortune_matmul", *PEERS]
    series = [s for s in series if any(s in r["gflops"] for r in rows)]
    labels = [r["workload"].replace("resnet18:", "") for r in rows]
    x = np.arange(len(rows))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(8, 0.8 * len(rows)), 4.5))
    uncapped = {name for r in rows for name in r.get("uncapped", {})}  # wider ISA than the target: not compared
    for i, s in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, [r["gflops"].get(s, 0) for r in rows], width,
               label=s.replace("tensortune_", "tensortune ").replace("_", "-")
               + (" (not capped: wider ISA)" if s in uncapped else ""), hatch="//" if s in uncapped else None)
    ax.set_xticks(x, labels, rotation=30)
    ax.set_ylabel("GFLOP/s")
    ax.set_title(f"Tuned tensortune kernels vs libraries, batch 1 float32, {threads} thread(s)")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def update_section(path: Path, text: str, isa: str) -> None:
    """Replace the section of ``path`` marked for ``isa`` with ``text`` (append the section if it is not there)."""
    old = path.read_text() if path.exists() else ""
    begin, end = MARKER.format(isa=isa, end="begin"), MARKER.format(isa=isa, end="end")
    block = f"{begin}\n{text}\n{end}"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    new = pattern.sub(lambda _: block, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + block + "\n"
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(new)
    os.replace(tmp, path)


def main() -> None:
    import sys

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=300, help="xgb trials per tuned task (default 300)")
    p.add_argument("--workloads", nargs="*", help=f"subset of {CONVS + MATMULS + tuple(FEW_DIVISORS)}")
    p.add_argument("--few-divisors", action="store_true", help=f"also {', '.join(FEW_DIVISORS)} (prime extents)")
    p.add_argument("--target", default="native", help="target to compile for, e.g. avx2 (default: this machine)")
    p.add_argument("--quick", action="store_true", help=f"{', '.join(QUICK)} with 64 trials")
    p.add_argument("--history", action="store_true", help="transfer from the logs of the other workloads")
    p.add_argument("--out", default="results/vs_libraries", help="folder of tuning logs (resumable)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--min-repeat-ms", type=float, default=20.0)
    p.add_argument("--top", type=int, default=3, help="choose each view's kernel among each template's TOP "
                   "fastest logged configs, timed again (default 3; 1: the logged best)")
    p.add_argument("--rounds", type=int, default=3, help="time everything this many times, round after round "
                   "(medians over rounds; default 3)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--skip-tune", action="store_true", help="only time what the logs hold")
    p.add_argument("--png", help="bar chart (default docs/figures/vs_libraries_<isa>.png)")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--benchmarks-md", metavar="PATH", help="replace the marked section of this file (BENCHMARKS.md)")
    args = p.parse_args()
    from tensortune.benchmarking.peak import fma_peak_gflops
    from tensortune.target import Target

    if args.rounds < 1 or args.top < 1:
        p.error("--rounds and --top must be at least 1")
    target = Target.parse(args.target)
    keys = tuple(args.workloads or (QUICK if args.quick else CONVS + MATMULS))
    if args.few_divisors:
        keys += tuple(k for k in FEW_DIVISORS if k not in keys)
    trials = 64 if args.quick else args.trials
    out = Path(args.out) / target.isa.value / ("quick" if args.quick else "full")
    out.mkdir(parents=True, exist_ok=True)
    if not args.skip_tune:
        tune_all(keys, trials, out, args.history, args.batch_size, target)
    rows = time_all(keys, out, args.threads, args.repeat, args.min_repeat_ms, target, args.rounds, args.top)
    peaks = {t: fma_peak_gflops(target, t) for t in args.threads}
    summary = summarise(rows, args.threads)
    command = "python benchmarks/" + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
    machine = f"{cpu_model()}; target `{target}` ({target.isa.value}); {os.cpu_count()} cores"
    text = markdown(rows, summary, peaks, command, machine, args.rounds, args.top)
    print(text)
    if args.json:
        write_json(args.json, {"rows": rows, "summary": {str(k): v for k, v in summary.items()}, "trials": trials,
                               "rounds": args.rounds, "top": args.top,
                               "target": str(target), "machine": machine,
                               "fma_peak_gflops": {str(k): v for k, v in peaks.items()}})
    if args.benchmarks_md:
        update_section(Path(args.benchmarks_md), text, target.isa.value)
    # last: a missing plotting library must not lose the results
    plot(rows, max(args.threads), Path(args.png or f"docs/figures/vs_libraries_{target.isa.value}.png"))
    if any(r["errors"].get(f"tensortune_{v}") for r in rows for v in ("nchw", "packed", "matmul")):
        raise SystemExit("some tuned kernel gave a wrong answer (see the errors above)")


if __name__ == "__main__":
    main()

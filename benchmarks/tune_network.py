"""Whole-network tuning: the network's latency as its tasks are tuned, and the task scheduler against an equal split.

For each ``--strategies`` entry (``gradient``: the task scheduler, after Ansor; ``round-robin``: every task in
turn, the same budget split equally), the network (ResNet-18 or MobileNetV2, batch 1, 224x224, float32, random
weights, built here) is tuned from an empty log with ``tune_model`` up to each of ``--checkpoints`` trials in
total (the log resumes from one checkpoint to the next, as a user's interrupted run would). At every checkpoint
the network is compiled with the log and its real latency is measured in a child process, in turns with
onnxruntime (the e2e protocol of ``e2e.py``: warm-up, timings of at least ``--min-ms``, median), on ``--threads``
threads, after refining the log as ``tune-model`` does at its end (each layer's best configs timed inside the
network; its minutes are counted as tuning; ``--no-refine`` leaves it out). Reported per strategy: the estimated latency after each round (sum over tasks of occurrences x best
kernel latency, from the tuning run) and the measured latency at each checkpoint, against trials and against
tuning minutes (compile and timing at the checkpoints not counted); the minutes until the measured latency is
within 5% of the run's best; and, last, the strategies' final modules timed in turns with onnxruntime, in
``--final-processes`` sets of fresh timing processes (each peer's figure the median of its processes' medians:
one network timed in separate processes differs by 4-10% on the hosts we use, more than the strategies do).
With ``--in-turns`` the strategies are tuned side by side instead, to ``--trials`` only, taking turns round by
round, each turn to the run that has had the least time so far (``run_in_turns``): on a host whose speed changes
in spells (BENCHMARKS.md, Zen 4), two runs tuned one after the other meet different spells, and that decides a
single comparison more than the strategies do.

    python benchmarks/tune_network.py --model resnet18 --trials 500 --strategies gradient round-robin \\
        --json results/tune_network_resnet18.json --png docs/figures/tune_network_resnet18.png

The logs stay in ``--out`` (default ``results/tune_network``) for ``e2e.py --log`` and ``tensortune compile``.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import positive_int, pyplot, save_zoo_model, write_json
from e2e import compile_network, machine, refine_log as refine_network, time_interleaved

WARM = "-warm"  # a strategy's suffix: kernels timed on an input they only read (tune_model's fresh_input=False)
STRATEGIES = ("gradient", "gradient" + WARM, "round-robin", "round-robin" + WARM)

ROOT = Path(__file__).resolve().parent.parent


def timing_spec(model: Path, network: Path | None, work: Path, threads: int, min_ms: float) -> dict:
    peer = "onnxruntime" if network is None else "tensortune"
    return {"peer": peer, "threads": threads, "model": str(model), "network": str(network or ""),
            "input": str(work / "input.npy"), "expected": str(work / "expected.npy"), "min_ms": min_ms}


def prepare(work: Path, name: str) -> Path:
    """The zoo network ``name`` (batch 1, 224x224) saved as ONNX in ``work``, with the input and onnxruntime's
    output that the timing children check against (``timing_spec``); returns the model's path."""
    import onnxruntime as ort

    model = save_zoo_model(work, name)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)
    np.save(work / "input.npy", x)
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    np.save(work / "expected.npy", sess.run(None, {"input": x})[0])
    return model


def measure(model: Path, networks: dict[str, Path], work: Path, threads: int, repeat: int, min_ms: float,
            processes: int = 1, details: dict | None = None) -> dict:
    """Median seconds per run of each compiled network and of onnxruntime, timed in turns (in ``processes`` sets
    of fresh processes: ``e2e.time_interleaved``); ``details`` receives each peer's per-process medians."""
    specs = {name: timing_spec(model, path, work, threads, min_ms) for name, path in networks.items()}
    specs["onnxruntime"] = timing_spec(model, None, work, threads, min_ms)
    timed = time_interleaved(specs, repeat, processes)
    if details is not None:
        details.update({name: r["process_medians_s"] for name, r in timed.items() if "process_medians_s" in r})
    return {name: r.get("median_s", r.get("error") or r.get("unavailable")) for name, r in timed.items()}


def print_process_medians(medians: dict[str, list[float]], prefix: str = "") -> None:
    """Each peer's medians of its sets of processes (``measure``'s ``details``), one line per peer."""
    for name, values in medians.items():
        print(f"{prefix}{name}, each set of processes: " + ", ".join(f"{m * 1e3:.2f}" for m in values) + " ms")


def label(strategy: str, args) -> str:
    """A strategy's name in the report and its log's: ``-cold`` when kernels were timed with cold caches,
    ``-scratch`` when the tuners started without the shipped cost model."""
    return strategy + ("-cold" if args.cold else "") + ("-scratch" if args.no_pretrained else "")


def cold_measurer(stack: contextlib.ExitStack):
    """Each kernel timed alone after the caches are flushed (5 single calls), as a layer's weights come in a network
    too large for the caches."""
    from tensortune.autotvm.measure import MeasureOptions, Measurer, RunOptions

    return stack.enter_context(Measurer(MeasureOptions(runner=RunOptions(number=1, repeat=5, flush_cache=True))))


def tune_strategy(strategy: str, args, model: Path, work: Path, out: Path) -> dict:
    """Tune with ``strategy`` from an empty log up to each checkpoint, compiling and timing the network at each."""
    log = start_log(strategy, args, out)
    curve, points, tuned_s = [], [], 0.0
    with contextlib.ExitStack() as stack:
        timed_alone = cold_measurer(stack) if args.cold else None
        for checkpoint in sorted(c for c in set(args.checkpoints) | {args.trials} if c <= args.trials):
            start = time.perf_counter()
            result = tune_to(strategy, checkpoint, args, model, log, timed_alone)
            curve += [(trials, (tuned_s + seconds) / 60, est) for trials, seconds, est in result.curve]
            tuned_s += refine_log(args, model, log) + time.perf_counter() - start
            points.append(checkpoint_point(strategy, checkpoint, args, model, work, log, result, tuned_s))
    return strategy_report(log, curve, points)


def tune_in_turns(args, model: Path, work: Path, out: Path) -> dict[str, dict]:
    """Tune every strategy to ``--trials`` side by side, the runs taking turns round by round, each turn to the one
    that has had the least time (``run_in_turns``), so that a host's slow spells fall on all of them alike; then
    refine, compile and time each. A run's minutes are its own turns' (its curve's times scaled to them)."""
    from tensortune.autotvm.turns import run_in_turns

    logs = {s: start_log(s, args, out) for s in args.strategies}
    with contextlib.ExitStack() as stack:
        timed_alone = cold_measurer(stack) if args.cold else None
        start = time.perf_counter()
        results, turns = run_in_turns({
            s: (lambda turn, s=s: tune_to(s, args.trials, args, model, logs[s], timed_alone, turn=turn))
            for s in args.strategies})
        wall = time.perf_counter() - start
    reports = {}
    for s in args.strategies:
        scale = turns.seconds[s] / wall if wall > 0 else 1.0
        curve = [(trials, seconds * scale / 60, est) for trials, seconds, est in results[s].curve]
        tuned_s = turns.seconds[s] + refine_log(args, model, logs[s])
        point = checkpoint_point(s, args.trials, args, model, work, logs[s], results[s], tuned_s)
        reports[label(s, args)] = strategy_report(logs[s], curve, [point])
    return reports


def start_log(strategy: str, args, out: Path) -> Path:
    """The strategy's log in ``out``, emptied unless ``--resume``."""
    log = out / f"{args.model}-{label(strategy, args)}.jsonl"
    if log.exists() and not args.resume:
        log.unlink()
    return log


def tune_to(strategy: str, trials: int, args, model: Path, log: Path, measure=None, turn=None):
    from tensortune.network.tuning import tune_model

    return tune_model(str(model), trials, log, strategy=strategy.removesuffix(WARM), tuner=args.tuner,
                      fresh_input=not strategy.endswith(WARM), seed=args.seed, progress=not args.quiet and turn is None,
                      measure=measure, pretrained=not args.no_pretrained, turn=turn)


def refine_log(args, model: Path, log: Path) -> float:
    """Refine the log as tune-model does at its end (unless ``--no-refine``); its seconds (counted as tuning)."""
    return 0.0 if args.no_refine else refine_network(model, log, quiet=True)["minutes"] * 60


def checkpoint_point(strategy: str, checkpoint: int, args, model: Path, work: Path, log: Path, result,
                     tuned_s: float) -> dict:
    """Compile the network with the log and time it with onnxruntime; the checkpoint's row."""
    name = label(strategy, args)
    network = work / f"{args.model}-{name}-{checkpoint}.tt"
    built = compile_network(model, network, work / "cache", str(log))
    lat = measure(model, {"tensortune": network}, work, args.threads, args.checkpoint_repeat, args.min_ms)
    point = {"trials": checkpoint, "minutes": tuned_s / 60, "estimated_s": result.estimated_latency,
             "measured_s": lat["tensortune"], "onnxruntime_s": lat["onnxruntime"],
             "tuned_calls": built.get("tuned_calls"), "calls": built.get("calls")}
    print(f"{name}: {checkpoint} trials, {point['minutes']:.1f} min tuning: estimated "
          f"{_ms(point['estimated_s'])}, measured {_ms(point['measured_s'])}, onnxruntime "
          f"{_ms(point['onnxruntime_s'])}", flush=True)
    return point


def strategy_report(log: Path, curve: list, points: list[dict]) -> dict:
    measured = [p for p in points if isinstance(p["measured_s"], float)]
    within = None
    if measured:
        best = min(p["measured_s"] for p in measured)
        within = next(p for p in measured if p["measured_s"] <= 1.05 * best)
    return {"log": str(log), "curve": curve, "checkpoints": points,
            "within_5pct_of_best": None if within is None else {"trials": within["trials"],
                                                                  "minutes": within["minutes"]}}


def _ms(v) -> str:
    return f"{v * 1e3:.2f} ms" if isinstance(v, float) and np.isfinite(v) else str(v)


def table(report: dict) -> str:
    lines = [f"`python benchmarks/tune_network.py --model {report['model']} --trials {report['trials']}` on "
             f"{report['machine']}; {report['tuner']} tuner, {report['threads']} threads.", "",
             "| strategy | trials | tuning minutes | estimated | measured | onnxruntime | measured / onnxruntime |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for strategy, r in report["strategies"].items():
        for p in r["checkpoints"]:
            ratio = (f"{p['measured_s'] / p['onnxruntime_s']:.2f}x"
                     if isinstance(p["measured_s"], float) and isinstance(p["onnxruntime_s"], float) else "-")
            lines.append(f"| {strategy} | {p['trials']} | {p['minutes']:.1f} | {_ms(p['estimated_s'])} | "
                         f"{_ms(p['measured_s'])} | {_ms(p['onnxruntime_s'])} | {ratio} |")
    final = report.get("final")
    if final:
        ort = final.get("onnxruntime")
        cells = ", ".join(f"{name} {_ms(v)}" + (f" ({v / ort:.2f}x)" if isinstance(v, float) and
                                                  isinstance(ort, float) else "")
                          for name, v in final.items())
        procs = report.get("final_processes", 1)
        how = f"{report['final_repeat']} rounds" + (f" in each of {procs} sets of processes, median of their medians"
                                                    if procs > 1 else "")
        lines += ["", f"Final modules timed in turns ({how}): {cells}."]
        lines += paired_ratios(report.get("final_process_medians_s", {}))
    for strategy, r in report["strategies"].items():
        w = r["within_5pct_of_best"]
        if w:
            lines.append(f"{strategy}: measured latency within 5% of its best after {w['trials']} trials, "
                         f"{w['minutes']:.1f} min of tuning.")
    return "\n".join(lines)


def paired_ratios(medians: dict[str, list[float]]) -> list[str]:
    """The first strategy's final latency over each other's, set of processes by set (timed side by side, so the
    ratio of a set cancels what the host's state did to both): the ratios, their geometric mean, and in how many
    sets the first was ahead."""
    names = [n for n in medians if n != "onnxruntime"]
    lines = []
    for other in names[1:]:
        pairs = [(a, b) for a, b in zip(medians[names[0]], medians[other]) if a > 0 and b > 0]
        if not pairs:
            continue
        ratios = [a / b for a, b in pairs]
        geo = float(np.exp(np.mean(np.log(ratios))))
        lines.append(f"{names[0]} / {other}, each set of processes: " + ", ".join(f"{r:.3f}" for r in ratios)
                     + f" (geometric mean {geo:.3f}; ahead in {sum(r < 1 for r in ratios)} of {len(ratios)})")
    return lines


def plot(report: dict, png: str) -> None:
    """Estimated and measured latency against trials and minutes, and the measured latency over onnxruntime's of
    the same checkpoint (the machine's load moves both: the ratio is the figure to read)."""
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for strategy, r in report["strategies"].items():
        curve = [c for c in r["curve"] if np.isfinite(c[2])]
        pts = [p for p in r["checkpoints"] if isinstance(p["measured_s"], float)]
        for ax, x in ((axes[0], 0), (axes[1], 1)):
            line, = ax.plot([c[x] for c in curve], [c[2] * 1e3 for c in curve], label=f"{strategy}, estimated")
            ax.plot([p["trials" if x == 0 else "minutes"] for p in pts], [p["measured_s"] * 1e3 for p in pts], "o--",
                    color=line.get_color(), label=f"{strategy}, measured")
        ratios = [p for p in pts if isinstance(p["onnxruntime_s"], float)]
        axes[2].plot([p["trials"] for p in ratios], [p["measured_s"] / p["onnxruntime_s"] for p in ratios], "o-",
                     label=strategy)
    ort = [p["onnxruntime_s"] for r in report["strategies"].values() for p in r["checkpoints"]
           if isinstance(p["onnxruntime_s"], float)]
    for ax, xlabel in zip(axes, ("trials", "tuning minutes", "trials")):
        if ort and ax is not axes[2]:
            ax.axhline(float(np.median(ort)) * 1e3, color="gray", ls=":", label="onnxruntime (median)")
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("network latency (ms)")
    axes[0].legend(fontsize=8)
    axes[2].axhline(1.0, color="gray", ls=":")
    axes[2].axhline(0.85, color="green", ls="--", lw=0.8, label="target 0.85x")
    axes[2].set_ylabel("measured / onnxruntime (same checkpoint)")
    axes[2].legend(fontsize=8)
    fig.suptitle(f"{report['model']}: whole-network tuning ({report['machine'].split(',')[0]}, "
                 f"{report['isa']}, {report['threads']} threads)")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    print(f"wrote {png}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=("resnet18", "mobilenet_v2"), default="resnet18")
    p.add_argument("--trials", type=int, default=500, help="total trials of each strategy")
    p.add_argument("--checkpoints", type=int, nargs="*", default=[100, 200, 300, 400],
                   help="trial counts at which the network is compiled and timed (the total always is)")
    p.add_argument("--strategies", nargs="+", choices=STRATEGIES, default=["gradient"],
                   help="how the trials are shared: the scheduler (gradient) or an equal split (round-robin); "
                   f"{WARM}: kernels timed on an input they only read, not rewritten before each call")
    p.add_argument("--tuner", default="xgb")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--checkpoint-repeat", type=int, default=7)
    p.add_argument("--repeat", type=positive_int, default=15, help="rounds of the final timing")
    p.add_argument("--final-processes", type=positive_int, default=5,
                   help="the final timing is done in this many sets of fresh processes (median of their medians)")
    p.add_argument("--min-ms", type=float, default=50.0)
    p.add_argument("--out", default=str(ROOT / "results" / "tune_network"), help="folder of the tuning logs")
    p.add_argument("--resume", action="store_true", help="continue the logs in --out instead of starting afresh")
    p.add_argument("--json")
    p.add_argument("--png")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--cold", action="store_true", help="time each kernel with cold caches (flushed before each call)")
    p.add_argument("--no-pretrained", action="store_true",
                   help="the tuners start without the cost model shipped for this ISA (they learn from the run's "
                        "records)")
    p.add_argument("--no-refine", action="store_true",
                   help="compile each checkpoint's log as tuned, without timing the layers' best configs in the network")
    p.add_argument("--in-turns", action="store_true",
                   help="tune the strategies side by side, round by round in turns, to --trials (no other "
                        "checkpoints), so that the host's slow spells fall on each alike")
    args = p.parse_args()
    if args.in_turns and len(args.strategies) < 2:
        p.error("--in-turns compares strategies: give at least two")

    from tensortune import Target

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = {"model": args.model, "trials": args.trials, "tuner": args.tuner, "threads": args.threads,
              "machine": machine(), "isa": Target.host().isa.value, "strategies": {}, "final_repeat": args.repeat,
              "final_processes": args.final_processes, "pretrained": not args.no_pretrained}
    with tempfile.TemporaryDirectory(prefix="tt-tune-network-") as tmp:
        work = Path(tmp)
        model = prepare(work, args.model)
        if args.in_turns:
            report["in_turns"] = True
            report["strategies"] = tune_in_turns(args, model, work, out)
        else:
            for strategy in args.strategies:
                report["strategies"][label(strategy, args)] = tune_strategy(strategy, args, model, work, out)
                if args.json:
                    write_json(args.json, report)
        finals = {label(s, args): work / f"{args.model}-{label(s, args)}-{args.trials}.tt" for s in args.strategies}
        report["final_process_medians_s"] = {}
        report["final"] = measure(model, finals, work, args.threads, args.repeat, args.min_ms, args.final_processes,
                                  report["final_process_medians_s"])
    print_process_medians(report["final_process_medians_s"], "final, ")
    text = table(report)
    print()
    print(text)
    if args.json:
        write_json(args.json, report)
    if args.png:
        plot(report, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``tensortune`` command: tune an operator, read the best configs of a log, show their code, benchmark them.

    tensortune tune conv2d --shape H=28 W=28 IC=128 OC=128 K=3 stride=1 pad=1 --trials 64 --log c6.json
    tensortune tune --workload resnet18:C6 --trials 64 --log c6.json
    tensortune best c6.json            # best record per workload: GFLOP/s, time per call, config
    tensortune show c6.json            # loop IR and C source of the best config
    tensortune bench c6.json           # tuned kernel vs the default schedule and numpy / PyTorch / onnxruntime
    tensortune worker tcp://HOST:8786  # serve this machine as a measuring device of a Dask cluster
    tensortune compile model.onnx -o model.tt [--log tuned.jsonl] [--shape input=1,3,224,224]
    tensortune run model.tt --input x.npy [--output y.npy]
    tensortune tasks model.onnx        # the network's tuning tasks, with FLOPs and share of the network's FLOPs
    tensortune tune-model model.onnx --trials 2000 --log net.jsonl   # every task within one budget (resumable)
    tensortune refine model.onnx --log net.jsonl   # re-rank each layer's best configs timed inside the network

A user mistake (unknown operator, malformed shape, missing log...) prints one line on stderr and exits
with status 2; ``--json`` prints one JSON object on stdout instead of the text summary.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .version import __version__
from .errors import TensortuneError

if TYPE_CHECKING:
    from .autotvm.catalog import WorkloadCatalog
    from .autotvm.record import BestRecord
    from .autotvm.task import Task

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
MIN_REPEAT_MS = 20.0  # each timed repeat of ``bench`` lasts at least this long


class CLIError(TensortuneError, ValueError):
    """A command-line argument cannot be used (the message says what to write instead)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line on stderr (raised, so ``main`` returns 2 instead of exiting)."""

    def error(self, message: str):
        raise CLIError(f"{message} (see '{self.prog} --help')")


# ------------------------------------------------------------------------------------------- arguments

def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1 (also used by the benchmark scripts)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def parse_shape(items: Sequence[str]) -> dict[str, int]:
    """``["H=28", "W=28"]`` -> ``{"H": 28, "W": 28}``; raises ``CLIError`` for a malformed item."""
    shape: dict[str, int] = {}
    for item in items:
        name, eq, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not eq or not name or not value:
            raise CLIError(f"malformed shape parameter '{item}': write NAME=VALUE, e.g. H=28")
        try:
            number = int(value)
        except ValueError:
            raise CLIError(f"shape parameter {name} must be an integer, got '{value}'") from None
        if name in shape:
            raise CLIError(f"shape parameter {name} is given twice")
        shape[name] = number
    return shape


def _network_options(p: argparse.ArgumentParser, target_example: str = "") -> None:
    """The options every command on an ONNX model shares: --target, --shape and --json."""
    p.add_argument("--target", help=f"target string (default: this machine){',' if target_example else ''}{target_example}")
    p.add_argument("--shape", nargs="+", metavar="NAME=DIMS",
                   help="static shape of an input, e.g. input=1,3,224,224, or the size of a symbolic dimension, e.g. "
                        "batch=1 sequence=128 (needed for dynamic dimensions)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _tuner_options(p: argparse.ArgumentParser, help: str) -> None:
    """--tuner and --no-pretrained, shared by tune and tune-model."""
    from .autotvm.tune import TUNERS

    p.add_argument("--tuner", choices=list(TUNERS), help=help)
    p.add_argument("--no-pretrained", action="store_true",
                   help="the xgb tuners start without the cost model shipped for the target's ISA and learn from "
                        "measurements alone: to compare, or when the shipped model misleads")


def _refine_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top", type=positive_int, default=3, metavar="K",
                   help="configs per layer timed inside the network: its K fastest alone, the fastest of each "
                        "other template and kind of config (thread split, Winograd tile size), its untuned kernel "
                        "(default 3)")
    p.add_argument("--rounds", type=positive_int, default=15, metavar="N",
                   help="profiles of each candidate network, in turn; each layer keeps its median (default 15)")


def build_parser() -> argparse.ArgumentParser:
    from .autotvm.catalog import OPERATORS, options

    p = _Parser(prog="tensortune", description="Tune tensor operators and use the tuning logs.",
                epilog="Run 'tensortune COMMAND --help' for the options of a command.")
    p.add_argument("--version", action="version", version=f"tensortune {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)

    ops = ", ".join(f"{op} ({' '.join([*names, *(f'[{o}]' for o in options(op))])})"
                    for op, (names, _) in OPERATORS.items())
    t = sub.add_parser("tune", help="search the schedule space of an operator, logging every trial",
                       description="Tune one operator. Rerunning the same command with the same --log resumes: "
                                   "the log's trials count toward --trials and are not measured again.",
                       epilog=f"operators and their shape parameters: {ops}; N=1, stride=1, pad=0, groups=1 by "
                              "default.")
    t.add_argument("operator", nargs="?", help=f"one of {', '.join(OPERATORS)} (or use --workload)")
    t.add_argument("--shape", nargs="+", metavar="NAME=VALUE", help="shape parameters, e.g. M=512 N=512 K=512")
    t.add_argument("--workload", metavar="TABLE:NAME", help="a shipped workload, e.g. resnet18:C6 or mobilenet:D3")
    t.add_argument("--template", help="schedule template (default: every template that computes the workload and "
                                      "the template-free search share the trials; the fastest wins)")
    t.add_argument("--search", choices=["all", "templates", "auto"],
                   help="with no --template: 'auto' tunes without a template (sketches derived from the computation, "
                        "evolutionary search); 'templates' shares the trials among the templates; 'all' (default) "
                        "among the templates and the template-free search")
    t.add_argument("--target", metavar="TARGET",
                   help="the CPU to tune for, e.g. 'c -isa=neon -cores=2 -arch=aarch64' (default: this machine); "
                        "another architecture is cross-compiled and run under an emulator (qemu): results are "
                        "checked, timings mean nothing")
    _tuner_options(t, "search strategy (default: xgb, the learned cost model steering simulated annealing, and for "
                      "the template-free search evolution, the same model steering evolutionary search; random: "
                      "the model-free baseline)")
    t.add_argument("--trials", type=positive_int, default=64, help="trials in total, the log's included (default 64)")
    t.add_argument("--log", required=True, metavar="FILE", help="tuning log (JSON lines); appended to, resumed from")
    t.add_argument("--threads", type=positive_int, help="threads of each measured kernel (default: all usable cores)")
    t.add_argument("--batch-size", type=positive_int,
                   help="configs measured per batch (default 16; on a cluster at least 4 per device)")
    t.add_argument("--early-stopping", type=positive_int, metavar="N", help="stop after N trials without improvement")
    t.add_argument("--seed", type=int, help="seed of the tuner's random choices")
    t.add_argument("--history", metavar="FILE", help="log of other workloads for the xgb tuners to transfer from")
    t.add_argument("--cluster", metavar="tcp://HOST:PORT",
                   help="build and measure on the workers of this Dask scheduler (see 'tensortune worker')")
    t.add_argument("--quiet", action="store_true", help="no progress display")
    t.add_argument("--json", action="store_true", help="print the summary as one JSON object")

    b = sub.add_parser("best", help="the best record of each workload in a log",
                       description="The fastest successful record of each workload in a tuning log.")
    b.add_argument("log", metavar="FILE")
    b.add_argument("--workload", metavar="KEY", help="only this workload (resnet18:C6, a task or a workload key)")
    b.add_argument("--json", action="store_true", help="print one JSON object")

    s = sub.add_parser("show", help="the loop IR and C source of the best config(s) of a log",
                       description="Print the loop IR and the generated C of the best config of each workload.")
    s.add_argument("log", metavar="FILE")
    s.add_argument("--workload", metavar="KEY", help="only this workload (resnet18:C6, a task or a workload key)")

    n = sub.add_parser("bench", help="time the best kernels of a log against the default schedule and peers",
                       description="Build the best config of each workload (the fastest of its --top fastest configs in "
                                   "the log, timed again), check it against the numpy reference, "
                                   "and time it against the operator's default tensortune schedule and peer "
                                   "libraries (numpy.matmul; PyTorch and onnxruntime convolutions when installed). "
                                   "Same protocol for all: one warm-up call, then --repeat timings of at least "
                                   f"{MIN_REPEAT_MS:g} ms each, in --rounds rounds that take ours and the peers in "
                                   "turns, so that a slow spell of a shared machine falls on all alike.")
    n.add_argument("log", metavar="FILE")
    n.add_argument("--workload", metavar="KEY", help="only this workload (resnet18:C6, a task or a workload key)")
    n.add_argument("--threads", type=positive_int, help="threads for every kernel (default: all usable cores)")
    n.add_argument("--repeat", type=positive_int, default=5, help="timed repeats per round (default 5)")
    n.add_argument("--rounds", type=positive_int, default=3,
                   help="rounds, ours and the peers timed in turns; medians over the rounds are reported, each "
                        "speedup the median of the speedups within a round (default 3)")
    n.add_argument("--top", type=positive_int, default=3, metavar="K",
                   help="time the K fastest configs of each workload in the log again and bench the fastest of them "
                        "(the tuner's best is the luckiest of many short measurements; default 3; 1: the logged "
                        "best)")
    n.add_argument("--json", action="store_true", help="print one JSON object")

    w = sub.add_parser("worker", help="serve this machine as a measuring device of a Dask cluster",
                       description="Start a Dask worker that measures candidates for this machine's target (one at a "
                                   "time) and builds candidates for any target, until stopped (Ctrl-C, SIGTERM). "
                                   "Needs Dask: pip install \"tensortune[cluster]\".")
    w.add_argument("scheduler", metavar="tcp://HOST:PORT", help="the address 'dask scheduler' prints")
    w.add_argument("--target", help="the target this machine measures (default: this machine's own target, the one "
                                    "'tensortune tune' tunes for)")
    w.add_argument("--build-threads", type=_non_negative, default=0, metavar="N",
                   help="threads that build while this machine measures (default 0: builds and measurements take "
                        "turns, so builds never disturb timings)")
    w.add_argument("--name", help="the worker's name in the cluster (default: its address)")
    c = sub.add_parser("compile", help="compile a whole ONNX network into one module",
                       description="Import an ONNX model, optimize its graph (constant folding, BatchNorm folding, "
                                   "fused epilogues, NCHW[x]c layout) and compile every kernel and the network's "
                                   "entry point into one shared library, written with the packed constants as a "
                                   "folder that 'tensortune run' and tensortune.load() read.")
    c.add_argument("model", metavar="MODEL.onnx")
    c.add_argument("-o", "--output", required=True, metavar="PATH", help="folder to write the compiled network to")
    c.add_argument("--log", metavar="FILE", help="tuning log: its best configs schedule their tasks' kernels")
    c.add_argument("--buckets", metavar="SYMBOL=SIZES",
                   help="compile for several sizes of one symbolic dimension of the inputs, e.g. "
                        "sequence=32,64,128,256,512: a run pads its inputs to the smallest size that holds them and "
                        "crops the outputs back (for models that mask the padding: attention masks, causal masks)")
    c.add_argument("--pad", nargs="+", metavar="NAME=VALUE",
                   help="with --buckets, the value an input is padded with (default 0), e.g. attention_mask=0")
    _network_options(c, " e.g. 'c -isa=avx2 -cores=2 -arch=x86_64'")

    r = sub.add_parser("run", help="run a compiled network on inputs stored as .npy files",
                       description="Run a network compiled by 'tensortune compile' on numpy arrays. A 1000-class "
                                   "output prints its top-5 classes.")
    r.add_argument("network", metavar="PATH", help="folder written by 'tensortune compile'")
    r.add_argument("--input", nargs="+", required=True, metavar="[NAME=]FILE.npy",
                   help="input arrays (.npy); NAME= is needed only for networks of several inputs")
    r.add_argument("--output", metavar="FILE", help="write the output (.npy; .npz for several outputs)")
    r.add_argument("--threads", type=positive_int, help="threads (default: all usable cores)")
    r.add_argument("--json", action="store_true", help="print one JSON object")

    tm = sub.add_parser("tune-model", help="tune every task of an ONNX network within one trial budget",
                        description="Share --trials trials among the network's tuning tasks by expected gain (each "
                                    "round to the task whose next trials should lower the network's latency most, "
                                    "after Ansor's task scheduler), logging every trial to one file. Rerunning the "
                                    "same command resumes. At the end, each layer's fastest configs are timed inside "
                                    "the compiled network ('tensortune refine'), and 'tensortune compile MODEL --log "
                                    "LOG' runs each layer's fastest there.")
    tm.add_argument("model", metavar="MODEL.onnx")
    tm.add_argument("--trials", type=positive_int, required=True, help="trials in total, the log's included")
    tm.add_argument("--log", required=True, metavar="FILE", help="the network's tuning log (appended to, resumed from)")
    _network_options(tm)
    _tuner_options(tm, "search strategy of each task (default: xgb for a template's task, evolution for the "
                       "template-free search's)")
    _network_search_option(tm)
    tm.add_argument("--strategy", choices=["gradient", "round-robin"], default="gradient",
                    help="how rounds are shared among tasks (default: by expected gain)")
    tm.add_argument("--round-size", type=positive_int, default=16,
                    help="trials per round (default 16); with 'gradient' a layer's first round is smaller in "
                         "proportion to its share of the untuned network's latency, at least half a round")
    tm.add_argument("--threads", type=positive_int, help="threads of each measured kernel (default: all usable cores)")
    tm.add_argument("--warm-input", action="store_true",
                    help="time each kernel on an input it only reads (default: the kernel's threads rewrite its "
                         "input before each call, as the previous layer leaves it inside the network)")
    tm.add_argument("--seed", type=int, help="seed of the tuners' random choices")
    tm.add_argument("--curve", metavar="FILE.json", help="write the estimated latency after each round")
    tm.add_argument("--quiet", action="store_true", help="no progress display")
    tm.add_argument("--no-refine", action="store_true",
                    help="skip timing the layers' best configs inside the network at the end (then compile "
                         "chooses by the kernels' timings alone)")
    _refine_options(tm)

    rf = sub.add_parser("refine", help="time each layer's best configs of a log inside the compiled network",
                        description="Kernels timed alone do not rank as inside a network (the weights of the whole "
                                    "model pass through the cache on every run; each input was written by other "
                                    "threads). For each layer, compile the network with each of its --top fastest "
                                    "configs of the log and its untuned kernel, time every layer among the others "
                                    "(its cost: its calls plus the calls that read its output, since how a kernel "
                                    "splits its output among threads decides what its reader finds in its own "
                                    "core's cache), and append these costs to the log: 'tensortune compile MODEL "
                                    "--log LOG' then runs each layer's cheapest in the network. Run it on the "
                                    "machine that will run the network (a log tuned elsewhere, or by 'tune-model "
                                    "--no-refine').")
    rf.add_argument("model", metavar="MODEL.onnx")
    rf.add_argument("--log", required=True, metavar="FILE", help="the network's tuning log (appended to)")
    _network_options(rf)
    rf.add_argument("--threads", type=positive_int, help="threads of the network (default: all usable cores)")
    _refine_options(rf)

    pf = sub.add_parser("profile", help="time each kernel call of a compiled network, beside its time alone",
                        description="Compile the network (with --log, as 'tensortune compile' does) and time each of "
                                    "its kernel calls inside the network on random inputs: the median of --rounds "
                                    "profiles of --repeat runs, its share and GFLOP/s, and, with a log, the config "
                                    "that runs it and that config's time alone in the log. A call much slower inside "
                                    "the network than alone is one that 'tensortune refine' may improve; the calls "
                                    "of largest share are where more trials pay.")
    pf.add_argument("model", metavar="MODEL.onnx")
    pf.add_argument("--log", metavar="FILE", help="tuning log the network is compiled with (default: untuned)")
    _network_options(pf)
    pf.add_argument("--threads", type=positive_int, help="threads of the network (default: all usable cores)")
    pf.add_argument("--rounds", type=positive_int, default=5, help="profiles; each call keeps its median (default 5)")
    pf.add_argument("--repeat", type=positive_int, default=10, help="runs per profile (default 10)")
    pf.add_argument("--top", type=positive_int, metavar="N", help="list only the N slowest calls")

    k = sub.add_parser("tasks", help="the tuning tasks of a network, with FLOPs and share",
                       description="List the tunable workloads of an ONNX network after graph optimization: one "
                                   "tuning task per distinct workload (a template's convolution or dense layer, or "
                                   "the template-free search of a node's kernel), how many nodes share it, its "
                                   "FLOPs and its share of the network's FLOPs, and its alternatives (the Winograd "
                                   "task of a 3x3, stride-1 convolution, the template-free search beside a "
                                   "template), which tune-model tunes too.")
    k.add_argument("model", metavar="MODEL.onnx")
    _network_options(k)
    _network_search_option(k)
    return p


def _network_search_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--search", choices=["all", "templates", "auto"], default="all",
                   help="which tasks each node has: 'templates', the templates' (convolutions and dense layers); "
                        "'auto', the template-free search of every node that reduces (softmax, LayerNorm, matmuls, "
                        "pooling, convolutions with their epilogues), beside its default kernel; 'all' (default), "
                        "both")


# ------------------------------------------------------------------------------------------- entry point

def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        try:
            try:
                args = build_parser().parse_args(argv)
            except SystemExit as e:  # --help and --version
                return int(e.code or 0)
            return COMMANDS[args.command](args)
        except TensortuneError as e:
            _error(str(e))
            return EXIT_USAGE
        except BrokenPipeError:  # stdout closed early (``tensortune show LOG | head``): not an error to report
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_FAILED
        except OSError as e:  # a log that cannot be read or written
            _error(f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
            return EXIT_USAGE
        except KeyboardInterrupt:
            _error("interrupted")
            return EXIT_INTERRUPTED


def _error(message: str) -> None:
    print(f"tensortune: error: {message}", file=sys.stderr, flush=True)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"tensortune: warning: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------- tune

def cmd_tune(args: argparse.Namespace) -> int:
    from .autotvm.catalog import WorkloadCatalog
    from .autotvm.measure import MeasureOptions, Measurer, RunOptions
    from .autotvm.tune import tune
    from .build import check_toolchain

    tasks = _tasks_from_args(args)
    task = tasks[0]
    check_toolchain(task.target)  # a missing cross compiler or emulator is one line now, not a failed trial each
    _check_log_writable(args.log)
    if args.history is not None and not os.path.isfile(args.history):
        raise CLIError(f"no such history log: {args.history}")
    options = MeasureOptions(runner=RunOptions(num_threads=args.threads))
    if args.cluster is not None:
        from .autotvm.measure.cluster import ClusterMeasurer

        measurer = ClusterMeasurer(args.cluster, options)
    else:
        measurer = Measurer(options)
    start = time.perf_counter()
    try:
        with measurer:
            if len(tasks) > 1:
                return _tune_alternatives(args, tasks, measurer, start)
            result = tune(task, args.trials, tuner=_tuner_of(args, task), batch_size=args.batch_size,
                          measure=measurer.measure, log_file=args.log, early_stopping=args.early_stopping,
                          progress=not args.quiet, seed=args.seed, history=args.history,
                          pretrained=not args.no_pretrained)
    except ModuleNotFoundError as e:
        if e.name is None or e.name.startswith("tensortune"):
            raise
        raise CLIError(f"the {_tuner_of(args, task)} tuner needs the package '{e.name}' (pip install {e.name})") from e
    except KeyboardInterrupt:
        _error(f"interrupted; the measured trials are in {args.log}: rerun the same command to resume")
        return EXIT_INTERRUPTED
    wall = time.perf_counter() - start

    failures = Counter(t.error_kind.name for t in result.history if t.gflops <= 0)
    cfg = result.best_config
    summary = {
        "task": str(task), "workload": WorkloadCatalog().name_of(task), "workload_key": task.workload_key,
        "template": task.name, "target": str(task.target), "tuner": _tuner_of(args, task),
        "best_gflops": result.best_gflops, "best_time_s": task.flops / (result.best_gflops * 1e9) if cfg else None,
        "best_config_index": result.best_index, "best_config": cfg.to_json() if cfg else None,
        "trials": len(result.history), "new_trials": result.n_measured,
        "resumed_trials": len(result.history) - result.n_measured, "failures": dict(failures),
        "stop_reason": result.stop_reason, "log": str(args.log), "wall_s": wall,
        "build_s": measurer.stats.build_s, "run_s": measurer.stats.run_s, "emulated": result.emulated,
        "workers": dict(getattr(measurer.stats, "workers", {})),  # on a cluster: candidates measured by each
    }
    if args.json:
        print(json.dumps(summary))
    else:
        _print_tune_summary(summary)
    if cfg is None and summary["trials"]:
        _error(f"no config ran successfully in {summary['trials']} trials; the error of each is in {args.log}")
        return EXIT_FAILED
    return EXIT_OK


def _tuner_of(args: argparse.Namespace, task: Task) -> str:
    """The tuner named, or by default the one for the task's kind of space (evolution for a template-free one)."""
    from .autotvm.templates import AUTO_TEMPLATES

    return args.tuner or ("evolution" if task.name in AUTO_TEMPLATES.values() else "xgb")


def _tasks_from_args(args: argparse.Namespace) -> list[Task]:
    """The task named (``--template``; ``--search auto``: the template-free one), else the tasks that share the
    trials (every template for the target that computes the workload, and the template-free one)."""
    from .autotvm.catalog import alternatives
    from .autotvm.task import TEMPLATES, Task
    from .autotvm.templates import AUTO_TEMPLATES

    if args.template is not None and args.search is not None:
        raise CLIError("give either --template or --search, not both")
    task = _task_from_args(args)
    if args.template is not None:
        return [task]
    if args.search == "auto":
        auto = TEMPLATES.get(AUTO_TEMPLATES.get(task.template.operator, ""))
        if auto is None or task.target.kind not in auto.targets:
            raise CLIError(f"the template-free search schedules {', '.join(AUTO_TEMPLATES)} for CPUs, not "
                           f"{task.template.operator or task.name} on '{task.target}'")
        return [Task(auto, task.workload, task.target)]
    tasks = alternatives(task)
    if args.search == "templates":
        tasks = [t for t in tasks if t.name not in AUTO_TEMPLATES.values()]
        if not tasks:
            raise CLIError(f"no template computes {task.workload}: tune it without one (--search auto)")
    return tasks


def _tune_alternatives(args: argparse.Namespace, tasks: list[Task], measurer, start: float) -> int:
    """Share ``args.trials`` among tasks computing one workload (the network tuner's scheduler, the tasks as one
    layer's alternatives) and report each one's best and which won."""
    from .autotvm.catalog import WorkloadCatalog
    from .autotvm.record import load_records
    from .autotvm.scheduler import TaskScheduler, WeightedTask

    before = _records_of(args.log, tasks)
    history = load_records(args.history) if args.history else ()
    scheduler = TaskScheduler([WeightedTask(t, 1, group="workload") for t in tasks], args.trials,
                              tuner=lambda task: _tuner_of(args, task), round_size=args.batch_size or 16,
                              log_file=args.log, measure=measurer.measure, early_stopping=args.early_stopping,
                              seed=args.seed, history=history, progress=not args.quiet,
                              pretrained=not args.no_pretrained, label=tasks[0].template.operator or "workload")
    result = scheduler.run()
    wall = time.perf_counter() - start
    records = _records_of(args.log, tasks)
    k = min(range(len(tasks)), key=lambda i: result.best_latency[i])
    winner, found = tasks[k], result.best_latency[k] < math.inf
    cfg = winner.config(result.best_index[k]) if found else None
    rows = [{"template": t.name, "tuner": _tuner_of(args, t), "trials": n,
             "best_gflops": t.flops / lat / 1e9 if lat < math.inf else 0.0}
            for t, n, lat in zip(tasks, result.trials, result.best_latency)]
    summary = {
        "task": str(winner), "workload": WorkloadCatalog().name_of(winner), "workload_key": winner.workload_key,
        "template": winner.name if found else None, "target": str(winner.target), "tuner": _tuner_of(args, winner),
        "best_gflops": rows[k]["best_gflops"], "best_time_s": result.best_latency[k] if found else None,
        "best_config_index": result.best_index[k], "best_config": cfg.to_json() if cfg else None,
        "templates": rows, "trials": len(records), "new_trials": len(records) - len(before),
        "resumed_trials": len(before), "failures": dict(Counter(r.error_kind.name for r in records if not r.ok)),
        "stop_reason": result.stop_reason, "log": str(args.log), "wall_s": wall, "build_s": measurer.stats.build_s,
        "run_s": measurer.stats.run_s, "emulated": any(r.emulated for r in records),
        "workers": dict(getattr(measurer.stats, "workers", {})),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        _print_tune_summary(summary)
    if cfg is None and summary["trials"]:
        _error(f"no config ran successfully in {summary['trials']} trials; the error of each is in {args.log}")
        return EXIT_FAILED
    return EXIT_OK


def _records_of(log: str, tasks: list[Task]) -> list:
    from .autotvm.record import load_records

    if not os.path.exists(log):
        return []
    return [r for r in load_records(log) if any(r.matches(t) for t in tasks)]


def _task_from_args(args: argparse.Namespace) -> Task:
    from .autotvm.catalog import OPERATORS, create_task, task_from_workload
    from .target import Target

    target = Target.parse(args.target) if args.target is not None else None
    if args.workload is not None:
        if args.operator is not None or args.shape is not None:
            raise CLIError("give either --workload or an operator with --shape, not both")
        return task_from_workload(args.workload, args.template, target)
    if args.operator is None:
        _operator_after_shape(args)
        raise CLIError(f"name an operator ({', '.join(OPERATORS)}) with --shape, or give --workload "
                       "(e.g. --workload resnet18:C6)")
    if args.operator not in OPERATORS:
        raise CLIError(f"unknown operator '{args.operator}'; choose one of {', '.join(OPERATORS)}")
    if args.shape is None:
        names = " ".join(f"{n}=..." for n in OPERATORS[args.operator][0])
        raise CLIError(f"{args.operator} needs --shape {names}")
    return create_task(args.operator, parse_shape(args.shape), args.template, target)


def _operator_after_shape(args: argparse.Namespace) -> None:
    """``tune --shape M=8 N=8 K=8 matmul``: argparse reads ``matmul`` as a shape item; say where it goes."""
    from .autotvm.catalog import OPERATORS

    for item in args.shape or ():
        if item in OPERATORS:
            raise CLIError(f"name the operator before --shape: tensortune tune {item} --shape ...")


def _check_log_writable(path: str) -> None:
    """Fail before tuning, not after the first batch, when the log cannot be appended to."""
    if os.path.isdir(path):
        raise CLIError(f"--log {path} is a directory; give a file name such as {os.path.join(path, 'tune.json')}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CLIError(f"cannot write the log {path}: the directory {parent} does not exist")
    if not os.access(path if os.path.exists(path) else parent, os.W_OK):
        raise CLIError(f"cannot write the log {path}: permission denied")


def _print_tune_summary(s: dict) -> None:
    from .autotvm.tune import EMULATED_NOTE

    name = f"  [{s['workload']}]" if s["workload"] else ""
    print(f"task      {s['task']}{name}")
    if s["best_config"] is not None:
        print(f"best      {s['best_gflops']:.2f} GFLOP/s  ({_fmt_seconds(s['best_time_s'])} per call)")
        print(f"config    #{s['best_config_index']}: {_fmt_config(s['best_config'])}")
    else:
        print("best      none (no trial succeeded)")
    for row in s.get("templates", ()):
        best = f"{row['best_gflops']:.2f} GFLOP/s" if row["best_gflops"] > 0 else "none succeeded"
        won = "  <- fastest" if row["template"] == s["template"] else ""
        print(f"  {row['template']:<30} {row['trials']:>5} trials  {best}{won}")
    print(f"trials    {s['trials']} ({s['new_trials']} measured now, {s['resumed_trials']} resumed from the log)"
          f"; {s['stop_reason']}")
    if s["failures"]:
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(s["failures"].items()))
        print(f"failed    {sum(s['failures'].values())} ({kinds})")
    if s["workers"]:
        print(f"time      {s['wall_s']:.1f} s (compiling {s['build_s']:.1f} s, running {s['run_s']:.1f} s, summed "
              f"over workers)")
        print(f"workers   {len(s['workers'])}: " + ", ".join(f"{w} ({n})" for w, n in sorted(s["workers"].items())))
    else:
        print(f"time      {s['wall_s']:.1f} s (compiling {s['build_s']:.1f} s, running {s['run_s']:.1f} s)")
    print(f"log       {s['log']}")
    if s["emulated"]:
        print(f"note      {EMULATED_NOTE}")


# ------------------------------------------------------------------------------------------- reading logs

def _best_records(path: str, select: str | None, catalog: WorkloadCatalog) -> list[BestRecord]:
    """The best record of each workload (and target) in the log at ``path``, those ``select`` names if given."""
    from .autotvm.record import SkippedLineWarning, best_records

    if not os.path.exists(path):
        raise CLIError(f"no such log file: {path}")
    if os.path.isdir(path):
        raise CLIError(f"{path} is a directory, not a tuning log")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", SkippedLineWarning)
        try:
            bests = best_records(path)
        finally:
            _report_warnings(path, caught)
    if select is not None:
        chosen = [b for b in bests if catalog.matches(b.task, select)]
        if not chosen:
            have = "; ".join(catalog.label(b.task) for b in bests)
            raise CLIError(f"{path} has no workload '{select}'; it has: {have}")
        bests = chosen
    return bests


def _report_warnings(path: str, caught: list[warnings.WarningMessage]) -> None:
    """The warnings of reading a log, but at most three skipped lines, then a count (a wrong file would
    otherwise print one per line)."""
    from .autotvm.record import SkippedLineWarning

    lines = [w for w in caught if issubclass(w.category, SkippedLineWarning)]
    for w in lines[:3]:
        _show_warning(w.message, w.category, w.filename, w.lineno)
    if len(lines) > 3:
        _show_warning(f"{path}: {len(lines) - 3} more lines skipped", UserWarning, "", 0)
    for w in caught:
        if not issubclass(w.category, SkippedLineWarning):
            _show_warning(w.message, w.category, w.filename, w.lineno)


# ------------------------------------------------------------------------------------------- best, show

def cmd_best(args: argparse.Namespace) -> int:
    from .autotvm.catalog import WorkloadCatalog
    from .autotvm.tune import EMULATED_NOTE

    catalog = WorkloadCatalog()
    rows = [{
        "workload": catalog.name_of(b.task), "task": str(b.task), "workload_key": b.record.workload,
        "template": b.record.template, "args": list(b.record.args), "target": b.record.target,
        "gflops": b.gflops, "time_s": b.record.cost, "costs": list(b.record.costs),
        "config_index": b.record.config_index, "config": b.record.config,
        "records": b.n_records, "ok_records": b.n_ok, "version": b.record.version, "emulated": b.record.emulated,
    } for b in _best_records(args.log, args.workload, catalog)]
    if args.json:
        print(json.dumps({"log": args.log, "best": rows}))
        return EXIT_OK
    for i, r in enumerate(rows):
        if i:
            print()
        print(f"{r['workload'] + '  ' if r['workload'] else ''}{r['task']}")
        print(f"  best      {r['gflops']:.2f} GFLOP/s  ({_fmt_seconds(r['time_s'])} per call)")
        print(f"  config    #{r['config_index']}: {_fmt_config(r['config'])}")
        print(f"  template  {r['template']}")
        print(f"  target    {r['target']}")
        print(f"  records   {r['records']} ({r['ok_records']} successful)")
        if r["emulated"]:
            print(f"  note      {EMULATED_NOTE}")
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    from .arith import Analyzer
    from .autotvm.catalog import WorkloadCatalog
    from .build import generate_source
    from .lower import lower

    catalog = WorkloadCatalog()
    for i, b in enumerate(_best_records(args.log, args.workload, catalog)):
        sch, op = b.task.instantiate(b.record.config_index)
        analyzer = Analyzer()
        func = lower(sch, list(op.args), analyzer=analyzer)
        if i:
            print()
        print(f"// {catalog.label(b.task)}: config #{b.record.config_index}, {b.gflops:.2f} GFLOP/s on "
              f"{b.record.target}")
        print(f"// {_fmt_config(b.record.config)}")
        print("// ---- loop IR ----")
        print(str(func))
        print("// ---- C source ----")
        print(generate_source(func, b.task.target, analyzer))
    return EXIT_OK


# ------------------------------------------------------------------------------------------- bench

def cmd_bench(args: argparse.Namespace) -> int:
    from .autotvm.catalog import WorkloadCatalog
    from .benchmarking.compare import compare_kernels
    from .env import settings
    from .runtime.cross import is_foreign

    threads = args.threads or settings().num_threads
    catalog = WorkloadCatalog()
    report: dict[str, Any] = {"log": args.log, "threads": threads, "repeat": args.repeat, "rounds": args.rounds,
                              "min_repeat_ms": MIN_REPEAT_MS, "workloads": []}
    status = EXIT_OK
    for b in _best_records(args.log, args.workload, catalog):
        if is_foreign(b.task.target):
            _show_warning(f"skipping {catalog.label(b.task)}: tuned for {b.task.target.arch}, which this machine can "
                          "only emulate (its timings would mean nothing); run bench on a machine of that "
                          "architecture", UserWarning, "", 0)
            continue
        index, retimed = b.record.config_index, None
        if args.top > 1:
            index, retimed = _retime_top(args.log, b.task, args.top, threads)
        kernels = compare_kernels(b.task, index, threads, args.repeat, MIN_REPEAT_MS, args.rounds)
        report["workloads"].append({"workload": catalog.name_of(b.task), "task": str(b.task),
                                    "config_index": index, "flops": b.task.flops, "kernels": kernels}
                                   | ({"retimed": retimed} if retimed else {}))
        if "error" in kernels["tensortune"]:
            status = EXIT_FAILED
    if not report["workloads"]:
        raise CLIError(f"nothing to benchmark in {args.log}: its workloads were tuned for another architecture")
    if args.json:
        print(json.dumps(report))
    else:
        _print_bench(report)
    return status


def _retime_top(log: str, task, k: int, threads: int) -> tuple[int, list[dict]]:
    """The fastest, timed again, of the ``k`` fastest configs of ``task`` in ``log``; and each one's figures."""
    from .autotvm.record import load_records, top_records
    from .benchmarking.compare import fastest_of

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # reading the log already reported its warnings
        records = top_records(load_records(log), task, k)
    entries = fastest_of([(task, r.config_index) for r in records], threads)
    retimed = [{"config_index": r.config_index, "logged_gflops": task.flops / r.cost / 1e9}
               | ({"gflops": task.flops / e["median_s"] / 1e9} if "median_s" in e else {"error": e["error"]})
               for r, e in zip(records, entries)]
    timed = [e for e in entries if "median_s" in e]
    index = min(timed, key=lambda e: e["median_s"])["config_index"] if timed else records[0].config_index
    return index, retimed


_KERNEL_LABELS = {"tensortune": "tensortune, tuned", "tensortune_default": "tensortune, default schedule",
                  "numpy": "numpy.matmul", "torch": "torch (NCHW)", "torch_channels_last": "torch (channels-last)",
                  "onnxruntime": "onnxruntime (one node)"}


def _print_bench(report: dict) -> None:
    print(f"{report['threads']} thread(s); {report['rounds']} round(s), ours and the peers in turns, of "
          f"{report['repeat']} timings of >= {MIN_REPEAT_MS:g} ms after a warm-up (medians; each speedup the median "
          "of a round's); peers run in a child process")
    for w in report["workloads"]:
        print()
        name = f"{w['workload']}  " if w["workload"] else ""
        print(f"{name}{w['task']}  (config #{w['config_index']}, {w['flops'] / 1e6:.1f} MFLOP)")
        if "retimed" in w:
            print(f"  chosen among the log's {len(w['retimed'])} fastest configs, timed again (GFLOP/s logged -> now): "
                  + ", ".join(f"#{r['config_index']} {r['logged_gflops']:.1f} -> "
                              + (f"{r['gflops']:.1f}" if "gflops" in r else "failed") for r in w["retimed"]))
        print(f"  {'kernel':<30} {'GFLOP/s':>9} {'time/call':>11} {'tuned speedup':>14}")
        for key, k in w["kernels"].items():
            label = _KERNEL_LABELS.get(key, key)
            if "median_s" in k:
                speed = "" if key == "tensortune" else f"{k['tuned_speedup']:.2f}x"
                print(f"  {label:<30} {k['gflops']:>9.2f} {_fmt_seconds(k['median_s']):>11} {speed:>14}".rstrip())
            else:
                print(f"  {label:<30} {k.get('unavailable') or k.get('error')}")


# ------------------------------------------------------------------------------------------- worker

def cmd_worker(args: argparse.Namespace) -> int:
    from .autotvm.measure.cluster import device_resource, require_distributed
    from .target import Target

    target = Target.parse(args.target) if args.target else Target.host()
    require_distributed()
    from .autotvm.measure.cluster_worker import run_worker

    def started(worker) -> None:
        print(f"tensortune worker {worker.address}: measures target '{target}' (resource {device_resource(target)}) "
              f"for {args.scheduler}; Ctrl-C stops it", file=sys.stderr, flush=True)

    run_worker(args.scheduler, target, name=args.name, build_threads=args.build_threads, on_start=started)
    return EXIT_OK


# ------------------------------------------------------------------------------------------- formatting

def _fmt_seconds(s: float | None) -> str:
    if s is None or not math.isfinite(s):
        return "-"
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def _fmt_config(config: dict) -> str:
    return " ".join(f"{k}={json.dumps(v, separators=(',', ':'))}" for k, v in config.items())


# ------------------------------------------------------------------------------------------- networks

def parse_input_shapes(items: Sequence[str] | None) -> dict[str, tuple[int, ...]]:
    """``["input=1,3,224,224"]`` -> ``{"input": (1, 3, 224, 224)}``; raises ``CLIError`` for a malformed item."""
    shapes: dict[str, tuple[int, ...]] = {}
    for item in items or ():
        name, eq, dims = item.partition("=")
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not eq or not name or not shape or any(d < 1 for d in shape):
            raise CLIError(f"malformed --shape '{item}': write NAME=DIMS with positive dimensions, e.g. "
                           "input=1,3,224,224")
        if name in shapes:
            raise CLIError(f"--shape gives input '{name}' twice")
        shapes[name] = shape
    return shapes


def _target(text: str | None):
    from .build import resolve_target

    return resolve_target(text)


def cmd_compile(args: argparse.Namespace) -> int:
    from .network import compile as compile_network
    from .operators import expansion
    from .network.module import spec_json

    shapes = parse_input_shapes(args.shape)
    target = _target(args.target)
    _check_output_dir(args.output)
    if args.buckets is not None:
        return _compile_buckets(args, shapes, target)
    if args.pad is not None:
        raise CLIError("--pad gives the values inputs are padded with to a bucket's size: use it with --buckets")
    start = time.perf_counter()
    module = compile_network(args.model, target=target, log=args.log, shapes=shapes)
    seconds = time.perf_counter() - start
    path = module.export(args.output)
    m = module.manifest
    tuned = [k for k in m.kernels if k.template]
    summary = {"model": args.model, "output": str(path), "name": m.name, "target": m.target,
               "inputs": [spec_json(s) for s in m.inputs], "outputs": [spec_json(s) for s in m.outputs],
               "kernels": len(m.kernels), "calls": m.calls, "tuned_kernels": len(tuned),
               "tuned_calls": sum(len(k.nodes) for k in tuned),
               "fused_calls": sum(len(k.nodes) for k in m.kernels if k.kind == expansion.KIND),
               "constants_bytes": m.constants_bytes,
               "workspace_bytes": m.workspace_bytes, "unshared_workspace_bytes": m.buffers_bytes,
               "compile_s": seconds}
    if args.json:
        print(json.dumps(summary))
        return EXIT_OK
    ins = ", ".join(f"{s.name} {s.dtype}{list(s.shape)}" for s in m.inputs)
    outs = ", ".join(f"{s.name} {s.dtype}{list(s.shape)}" for s in m.outputs)
    print(f"compiled  {m.name} ({ins}) -> ({outs}) in {seconds:.1f} s")
    print(f"kernels   {len(m.kernels)} in one library, {m.calls} call{'s' if m.calls != 1 else ''} per run"
          + (f"; {summary['tuned_calls']} calls tuned from {args.log}" if args.log else "; default schedules"))
    if summary["fused_calls"]:
        print(f"fused     {summary['fused_calls']} call(s) compute a 1x1 expansion and the depthwise convolution "
              "reading it (no expanded tensor in memory; a tiling rule, not tuned)")
    print(f"memory    constants {m.constants_bytes / 2**20:.1f} MiB, workspace {m.workspace_bytes / 2**20:.1f} MiB "
          f"(buffers sharing memory; {m.buffers_bytes / 2**20:.1f} MiB unshared)")
    print(f"target    {m.target}")
    print(f"written   {path}")
    return EXIT_OK


def _compile_buckets(args: argparse.Namespace, shapes: dict, target) -> int:
    from .network import compile_buckets

    symbol, eq, sizes = args.buckets.partition("=")
    try:
        values = [int(v) for v in sizes.split(",")]
    except ValueError:
        values = []
    if not eq or not symbol or not values or min(values) < 1:
        raise CLIError(f"malformed --buckets '{args.buckets}': write SYMBOL=SIZES with positive sizes, e.g. "
                       "sequence=32,64,128")
    pads = {}
    for item in args.pad or ():
        name, eq, value = item.partition("=")
        try:
            pads[name] = float(value)
        except ValueError:
            eq = ""
        if not eq or not name:
            raise CLIError(f"malformed --pad '{item}': write NAME=VALUE, e.g. attention_mask=0")
    start = time.perf_counter()
    module = compile_buckets(args.model, {symbol: values}, target=target, log=args.log, shapes=shapes,
                             pad_values=pads)
    seconds = time.perf_counter() - start
    path = module.export(args.output)
    first = module.modules[module.sizes[0]].manifest
    summary = {"model": args.model, "output": str(path), "name": first.name, "target": first.target,
               "symbol": symbol, "sizes": list(module.sizes),
               "inputs": {k: list(v) for k, v in module.layout.input_axes.items()},
               "outputs": {k: list(v) for k, v in module.layout.output_axes.items()},
               "constants_bytes": first.constants_bytes,
               "workspace_bytes": max(m.manifest.workspace_bytes for m in module.modules.values()),
               "compile_s": seconds}
    if args.json:
        print(json.dumps(summary))
        return EXIT_OK
    axes = "; ".join(f"{k} axis {','.join(map(str, v))}" for k, v in module.layout.input_axes.items())
    print(f"compiled  {first.name} for {symbol} in {list(module.sizes)} in {seconds:.1f} s")
    print(f"padded    {axes} (to the smallest size that holds a run's inputs); outputs cropped: "
          + ("; ".join(f"{k} axis {','.join(map(str, v))}" for k, v in module.layout.output_axes.items()) or "none"))
    print(f"memory    constants {first.constants_bytes / 2**20:.1f} MiB shared by every size, workspace "
          f"{summary['workspace_bytes'] / 2**20:.1f} MiB (the largest size's)")
    print(f"target    {first.target}")
    print(f"written   {path}")
    return EXIT_OK


def _check_output_dir(path: str) -> None:
    """Fail before compiling, not after, when the compiled network cannot be written at ``path``."""
    from .network.module import MANIFEST

    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise CLIError(f"cannot write {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise CLIError(f"cannot write {path}: permission denied in {parent}")
    if os.path.exists(path) and not any(os.path.isfile(os.path.join(path, f)) for f in (MANIFEST, "buckets.json")):
        raise CLIError(f"cannot write {path}: it exists and is not a compiled network; choose another path")


def _load_inputs(items: Sequence[str], names: Sequence[str]) -> dict:
    import numpy as np

    feeds = {}
    for k, item in enumerate(items):
        name, eq, path = item.rpartition("=")
        if not eq:
            if len(items) != len(names):
                raise CLIError(f"the network takes inputs {list(names)}; give NAME=FILE.npy for each")
            name = names[k]
        if not os.path.isfile(path):
            raise CLIError(f"no such input file: {path}")
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise CLIError(f"{path} is not a .npy array file ({e})") from None
    return feeds


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from .network import load

    module = load(args.network, num_threads=args.threads)
    feeds = _load_inputs(args.input, [s.name for s in module.inputs])
    start = time.perf_counter()
    outputs = module.run(feeds)
    seconds = time.perf_counter() - start
    if args.output is not None:
        _save_outputs(args.output, outputs)
    report: dict[str, Any] = {"network": args.network, "seconds": seconds, "outputs": {}}
    for name, y in outputs.items():
        entry: dict[str, Any] = {"shape": list(y.shape), "dtype": str(y.dtype)}
        if y.ndim == 2 and y.shape[1] == 1000:
            entry["top5"] = [np.argsort(-row)[:5].tolist() for row in y]
        report["outputs"][name] = entry
    if args.json:
        print(json.dumps(report))
        return EXIT_OK
    print(f"ran       {args.network} in {_fmt_seconds(seconds)}")
    for name, entry in report["outputs"].items():
        print(f"output    {name}: {entry['dtype']}{entry['shape']}")
        for b, top in enumerate(entry.get("top5", ())):
            print(f"  top-5 classes{f' (batch {b})' if len(entry['top5']) > 1 else ''}: {' '.join(map(str, top))}")
    if args.output is not None:
        print(f"written   {args.output}")
    return EXIT_OK


def _save_outputs(path: str, outputs: dict) -> None:
    import numpy as np

    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path) or not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise CLIError(f"cannot write the output {path}: " + ("it is a directory" if os.path.isdir(path) else
                                                               f"the directory {parent} is missing or read-only"))
    try:
        if len(outputs) == 1:
            np.save(path if path.endswith(".npy") else path + ".npy" if "." not in os.path.basename(path) else path,
                    next(iter(outputs.values())))
        else:
            np.savez(path, **outputs)
    except OSError as e:
        raise CLIError(f"cannot write the output {path}: {e.strerror or e}") from None


def cmd_tune_model(args: argparse.Namespace) -> int:
    from .network.tasks import Search
    from .network.tuning import tune_model

    target = _target(args.target)
    _check_log_writable(args.log)
    start = time.perf_counter()
    try:
        result = tune_model(args.model, args.trials, args.log, target, parse_input_shapes(args.shape),
                            search=Search(args.search), num_threads=args.threads, fresh_input=not args.warm_input,
                            tuner=args.tuner or (lambda task: _tuner_of(args, task)),
                            round_size=args.round_size, strategy=args.strategy, seed=args.seed,
                            progress=not args.quiet, pretrained=not args.no_pretrained)
    except KeyboardInterrupt:
        _error(f"interrupted; the measured trials are in {args.log}: rerun the same command to resume")
        return EXIT_INTERRUPTED
    refined = None
    if not args.no_refine:
        try:
            refined = _refine(args, target, force=False)
        except KeyboardInterrupt:
            _error(f"interrupted while refining; the trials are in {args.log}: rerun the same command to refine")
            return EXIT_INTERRUPTED
    rows = [{"task": str(w.task), "occurrences": w.weight, "group": w.group, "trials": n, "best_latency_s": lat,
             "best_config_index": i} for w, n, lat, i in zip(result.tasks, result.trials, result.best_latency,
                                                               result.best_index)]
    summary = {"model": args.model, "target": str(target), "log": args.log, "trials": sum(result.trials),
               "stop_reason": result.stop_reason, "estimated_latency_s": result.estimated_latency,
               "wall_s": time.perf_counter() - start, "tasks": rows,
               "refine": None if refined is None else _refine_summary(refined)}
    if args.curve:
        with open(args.curve, "w") as f:
            json.dump([{"trials": t, "seconds": sec, "estimated_latency_s": lat} for t, sec, lat in result.curve], f)
    if args.json:
        print(json.dumps(summary))
        return EXIT_OK
    est = result.estimated_latency
    print(f"network   {args.model}: {len(result.tasks)} tasks, {summary['trials']} trials; {result.stop_reason}")
    print(f"latency   {_fmt_seconds(est) if est != float('inf') else 'unknown (a task has no successful kernel)'} "
          "estimated (sum over layers of occurrences x best latency of their alternatives; compile to measure it)")
    print(f"  {'task':<62} {'x':>3} {'trials':>6} {'best':>10}")
    for k, (r, w) in enumerate(zip(rows, result.tasks)):
        alternative = k > 0 and r["group"] is not None and r["group"] == rows[k - 1]["group"]
        print(f"  {('or ' if alternative else '') + _task_label(w.task):<62} {r['occurrences']:>3} {r['trials']:>6} "
              f"{_fmt_seconds(r['best_latency_s']):>10}")
    if refined is not None:
        _print_refine(refined, layers=False)
    print(f"log       {args.log} (compile with: tensortune compile {args.model} -o OUT --log {args.log})")
    return EXIT_OK


def _task_label(task) -> str:
    """A task as the tables show it: its template and arguments, or for an expression (whose arguments are the text
    of a DAG) its template, kernel kind and digest."""
    from .autotvm.workload import Expression

    return f"{task.name}({_task_args_text(task)})" if isinstance(task.workload, Expression) else str(task)


def _refine(args: argparse.Namespace, target, force: bool):
    from .network.refine import refine

    def say(line: str) -> None:
        if not args.json and not getattr(args, "quiet", False):
            print(line, file=sys.stderr, flush=True)

    return refine(args.model, args.log, target, top_k=args.top, rounds=args.rounds,
                  shapes=parse_input_shapes(args.shape), num_threads=args.threads, force=force, progress=say)


def _refine_summary(result) -> dict:
    return {"network": result.fingerprint, "skipped": result.skipped, "records": result.records,
            "wall_s": result.wall_s, "whole_network_s": result.check, "layers": result.rows()}


def _print_refine(result, layers: bool = True) -> None:
    if result.skipped:
        print("refined   already (the log's latest refinement of this network is newer than its last trial)")
        return
    if not result.layers:
        print("refined   nothing: no layer has a tuned config to compare with its untuned kernel")
        return
    moved = sum(1 for l in result.layers if l.chosen != 0)
    print(f"refined   {len(result.layers)} layers timed inside the network in {result.wall_s:.0f} s; {moved} run "
          "another kernel than the fastest alone")
    if result.check:
        c = result.check
        print(f"network   untuned {_fmt_seconds(c['untuned'])}, fastest kernels alone {_fmt_seconds(c['fastest_alone'])}"
              f", chosen {_fmt_seconds(c['chosen'])} (median whole runs, in turn)")
    if layers:
        print(f"  {'layer (workload)':<58} {'x':>3} {'chosen':<36} {'in network':>10} {'alone':>10}")
        for l in result.layers:
            c = l.candidates[l.chosen]
            alone = _fmt_seconds(c.alone) if c.alone is not None else "-"
            print(f"  {l.workload[:58]:<58} {len(l.nodes):>3} {c.label[:36]:<36} "
                  f"{_fmt_seconds(l.median(l.chosen)):>10} {alone:>10}")
        print("  (in network: the layer's calls plus the calls reading its output, median; alone: its kernel alone)")


def cmd_refine(args: argparse.Namespace) -> int:
    target = _target(args.target)
    _check_log_writable(args.log)
    if not os.path.isfile(args.log):
        raise CLIError(f"no such tuning log: {args.log}; tune the network first "
                       f"('tensortune tune-model {args.model} --trials N --log {args.log}')")
    try:
        result = _refine(args, target, force=True)
    except KeyboardInterrupt:
        _error(f"interrupted; nothing was added to {args.log}")
        return EXIT_INTERRUPTED
    if args.json:
        print(json.dumps({"model": args.model, "target": str(target), "log": args.log, **_refine_summary(result)}))
        return EXIT_OK
    _print_refine(result)
    print(f"log       {args.log} (compile with: tensortune compile {args.model} -o OUT --log {args.log})")
    return EXIT_OK


def cmd_profile(args: argparse.Namespace) -> int:
    from .network.profiling import profile_network

    target = _target(args.target)
    if args.log is not None and not os.path.isfile(args.log):
        raise CLIError(f"no such tuning log: {args.log}")
    result = profile_network(args.model, args.log, target, parse_input_shapes(args.shape), args.threads,
                             args.rounds, args.repeat)
    if args.json:
        print(json.dumps({"model": args.model, **result.to_json()}))
        return EXIT_OK
    total = result.calls_s
    print(f"network   {result.name} on '{result.target}', {result.threads} thread(s): {_fmt_seconds(result.whole_s)} "
          f"per run; {len(result.calls)} calls, {_fmt_seconds(total)} in sum when each is timed")
    calls = list(enumerate(result.calls, 1))
    if args.top is not None:
        calls = sorted(calls, key=lambda c: -c[1].seconds)[:args.top]
    print(f"  {'#':>3} {'node':<24} {'kind':<16} {'kernel':<44} {'time':>10} {'share':>6} {'GFLOP/s':>8} "
          f"{'alone':>10} {'x alone':>7}")
    for i, c in calls:
        kernel = c.kernel + (" (refined)" if c.refined else "")
        ratio = f"{c.seconds / c.alone:.2f}" if c.alone else "-"
        print(f"  {i:>3} {c.node[:24]:<24} {c.kind[:16]:<16} {kernel[:44]:<44} {_fmt_seconds(c.seconds):>10} "
              f"{c.seconds / total:>6.1%} {c.gflops:>8.1f} {_fmt_seconds(c.alone):>10} {ratio:>7}")
    by_kind: dict[str, float] = {}
    for c in result.calls:
        by_kind[c.kind] = by_kind.get(c.kind, 0.0) + c.seconds
    print("by kind   " + ", ".join(f"{k} {_fmt_seconds(v)} ({v / total:.0%})"
                                   for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])))
    return EXIT_OK


def cmd_tasks(args: argparse.Namespace) -> int:
    from .network import optimized_graph
    from .network.tasks import Search, extract_tasks
    from .operators import ExpandDepthwise
    from .operators.conv_tasks import is_default, is_flat

    target = _target(args.target)
    graph = optimized_graph(args.model, target, parse_input_shapes(args.shape))
    tasks = extract_tasks(graph, target, Search(args.search))
    fused = [n for n in graph.nodes if isinstance(n.op, ExpandDepthwise)]
    by_name = {n.name: n for n in graph.nodes}
    total = sum(t.total_flops for t in tasks)
    rows = [{"index": k + 1, "kind": t.kind, "template": t.task.name if t.task else None, "workload": t.workload,
             "args": list(t.task.args) if t.task else None, "nodes": list(t.nodes), "occurrences": t.occurrences,
             "flops": t.flops, "total_flops": t.total_flops, "share": t.total_flops / total if total else 0.0,
             "alternatives": [{"template": a.name, "workload": a.workload_key, "args": list(a.args),
                               "default": is_default(a), "one_row": any(is_flat(graph, by_name[n], a) for n in t.nodes)}
                              for a in t.alternatives]}
            for k, t in enumerate(tasks)]
    tunable = sum(r["total_flops"] for r in rows if r["template"])
    if args.json:
        print(json.dumps({"model": args.model, "name": graph.name, "target": str(target), "total_flops": total,
                          "tunable_flops": tunable, "tasks": rows,
                          "fused": [{"expansion": n.op.expand_node, "depthwise": n.name} for n in fused]}))
        return EXIT_OK
    tuned_tasks, nodes = sum(1 for r in rows if r["template"]), sum(r["occurrences"] for r in rows)
    defaults = {a["template"] for r in rows for a in r["alternatives"] if a["default"]}
    for r in rows:  # the default kernel of every layer is said once, below, rather than on each row
        r["alternatives"] = [a for a in r["alternatives"] if not a["default"]]
    alternatives = sum(len(r["alternatives"]) for r in rows)
    print(f"{graph.name}: {tuned_tasks} tuning tasks (and {alternatives} alternatives) for {nodes} "
          f"nodes, {total / 1e9:.3f} GFLOP ({tunable / max(total, 1):.1%} in tunable tasks)")
    if defaults:
        print(f"  each task also measures its layer's untuned kernel ({', '.join(sorted(defaults))}), so that tuning "
              "never makes a layer slower")
    if fused:
        flops = sum(n.op.flops(graph, n) for n in fused)
        pairs = ", ".join(f"{n.op.expand_node} -> {n.name}" for n in fused)
        print(f"  not tuned: {len(fused)} 1x1 expansion(s) computed by the depthwise kernel that reads them, one "
              f"kernel per pair, {flops / 1e9:.3f} GFLOP more ({pairs})")
    print(f"  {'#':>3}  {'kind':<16} {'template':<28} {'arguments':<34} {'nodes':>5} {'MFLOP':>9} {'share':>6}")
    labels = {a.workload_key: _task_args_text(a) for t in tasks for a in t.tasks}
    for r in rows:
        what = labels[json.dumps([r["template"], r["args"]], separators=(",", ":"))] if r["args"] else r["workload"]
        print(f"  {r['index']:>3}  {r['kind']:<16} {r['template'] or '(default schedule)':<28} {what:<34} "
              f"{r['occurrences']:>5} {r['total_flops'] / 1e6:>9.1f} {r['share']:>6.1%}")
        for alt in r["alternatives"]:
            what = labels[alt["workload"]]
            view = ", pixels as one row" if alt["one_row"] else ""
            print(f"  {'':>3}  {'  alternative':<16} {alt['template']:<28} {what:<34} (the same nodes{view})")
    return EXIT_OK


def _task_args_text(task) -> str:
    """A task's arguments as the tasks table shows them: JSON, or for an expression its kernel kind and digest."""
    from .autotvm.workload import Expression

    if isinstance(task.workload, Expression):
        return f"{task.workload.name} #{task.workload.digest}"
    return json.dumps(list(task.args), separators=(",", ":"))


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "tune": cmd_tune, "best": cmd_best, "show": cmd_show, "bench": cmd_bench, "worker": cmd_worker,
    "compile": cmd_compile, "run": cmd_run, "tasks": cmd_tasks, "profile": cmd_profile, "tune-model": cmd_tune_model,
    "refine": cmd_refine,
}

if __name__ == "__main__":
    sys.exit(main())

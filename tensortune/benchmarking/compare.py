"""A tuned kernel against its untuned baseline and the peer libraries, timed with one protocol.

``compare_kernels`` builds the config a log chose, checks it against the numpy reference, times it,
then times the operator's default tensortune schedule and the peers (``peers.time_peers``, in a child
process) on the same inputs, in rounds taken in turns. A wrong kernel is reported, never timed. ``fastest_of`` times a few
configs again (a log's fastest few, ``record.top_records``) to pick the one that is fastest when timed
as a user times it, rather than the luckiest of the tuner's short measurements. ``build_config`` builds
one config with its checked inputs, for both and for the benchmark scripts.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..build import build
from ..errors import TensortuneError
from ..ops.operator import check_output
from .peers import plain_operator, time_peers

if TYPE_CHECKING:
    from ..autotvm.task import Task
    from ..ops import Operator
    from ..runtime import Module


#: seconds to wait after numpy work before timing a kernel in the same process: a multithreaded BLAS leaves its
#: threads spinning for about a tenth of a second after a call (see ``measure.runner.single_threaded_blas``)
BLAS_SETTLE_S = 0.3


def time_module(module: Module, inputs: list[np.ndarray], op: Operator, expected: np.ndarray, threads: int,
                repeat: int, min_repeat_ms: float) -> dict[str, Any]:
    """Check a built kernel against ``expected``, then time it (``{"error": ...}`` if it is wrong)."""
    out = op.empty_output()
    out.fill(np.nan)  # an element the kernel forgets to write fails the check
    module(*inputs, out, num_threads=threads)
    problem = check_output(out, expected)
    if problem:
        return {"error": problem}
    time.sleep(BLAS_SETTLE_S)  # numpy's BLAS threads (the reference) spin for a while on the cores timed next
    t = module.time_evaluator(number=1, repeat=repeat, min_repeat_ms=min_repeat_ms, num_threads=threads)(
        *inputs, out)
    return {"median_s": t.median, "runs_s": list(t.results)}


def build_config(task: Task, config_index: int, canonical: list[np.ndarray] | None = None
                 ) -> tuple[Module, Operator, list[np.ndarray], np.ndarray]:
    """Config ``config_index`` of ``task`` built, with what ``time_module`` takes: ``(module, operator, kernel
    inputs, expected output)`` for the canonical inputs (default: ``task.make_inputs(seed=0)``)."""
    if canonical is None:
        canonical = task.make_inputs(seed=0)
    sch, op = task.instantiate(config_index)
    return (build(sch, list(op.args), task.target), op, task.kernel_inputs(config_index, canonical),
            np.asarray(task.reference(canonical, config_index)))


def compare_kernels(task: Task, config_index: int, threads: int, repeat: int, min_repeat_ms: float,
                    rounds: int = 1) -> dict[str, dict[str, Any]]:
    """Timings of config ``config_index`` of ``task`` ("tensortune"), of the default schedule of the plain
    operator ("tensortune_default") and of each peer, keyed by kernel name.

    Everything is timed ``rounds`` times, ours first in even rounds and the peers first in odd ones, so that a
    slow spell of a shared machine falls on every kernel alike. Each timed kernel has ``median_s`` (the median of
    its rounds' medians, ``rounds_s``; each round's a median of ``repeat`` timings), ``runs_s`` (every timing),
    ``gflops`` and ``tuned_speedup`` (the median over the rounds of its time over the tuned kernel's in the same
    round). A kernel that could not be timed in some round has that round's ``error`` or ``unavailable``. When
    the tuned kernel gives a wrong answer, it is the only entry (with its ``error``).
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    canonical = task.make_inputs(seed=0)
    tuned, op, inputs, expected = build_config(task, config_index, canonical)
    first = time_module(tuned, inputs, op, expected, threads, repeat, min_repeat_ms)
    if "error" in first:  # never report a wrong kernel's speed
        return {"tensortune": first}
    base = plain_operator(task)
    base_mod = build(base.default_schedule(task.target), list(base.args), task.target)
    ours = {"tensortune": (tuned, inputs, op, expected),
            "tensortune_default": (base_mod, base.prepare(*canonical), base, np.asarray(base.reference(*canonical)))}
    timed: dict[str, list[dict[str, Any]]] = {"tensortune": [first]}

    def time_ours(skip_tuned: bool) -> None:
        for name, (module, kernel_inputs, operator, want) in ours.items():
            if not (skip_tuned and name == "tensortune"):
                timed.setdefault(name, []).append(time_module(module, kernel_inputs, operator, want, threads, repeat,
                                                              min_repeat_ms))

    def time_theirs() -> None:
        for name, entry in time_peers(task, threads, repeat, min_repeat_ms).items():
            timed.setdefault(name, []).append(entry)

    for r in range(rounds):
        if r % 2 == 0:
            time_ours(skip_tuned=r == 0)  # round 0's tuned timing is the checked one above
            time_theirs()
        else:
            time_theirs()
            time_ours(skip_tuned=False)
    return {name: _combine(entries, timed["tensortune"], task.flops) for name, entries in timed.items()}


def _combine(entries: list[dict[str, Any]], tuned: list[dict[str, Any]], flops: int) -> dict[str, Any]:
    """One kernel's rounds as one entry (see ``compare_kernels``)."""
    failed = next((e for e in entries if "median_s" not in e), None)
    if failed is not None:
        return failed
    medians = [e["median_s"] for e in entries]
    median = float(np.median(medians))
    ratios = [e["median_s"] / t["median_s"] for e, t in zip(entries, tuned) if "median_s" in t]
    return {**entries[0], "median_s": median, "rounds_s": medians,
            "runs_s": [x for e in entries for x in e.get("runs_s", [e["median_s"]])],
            "gflops": flops / median / 1e9, "tuned_speedup": float(np.median(ratios)) if ratios else None}


def fastest_of(candidates: Sequence[tuple[Task, int]], threads: int, passes: int = 2, repeat: int = 5,
               min_repeat_ms: float = 20.0) -> list[dict[str, Any]]:
    """Time each (task, config index) again, in ``passes`` passes over all of them (each pass in the other
    order), and return one entry per candidate, in the given order: ``{"task", "config_index", "median_s",
    "passes_s"}`` (``median_s`` the fastest pass's median: a busy machine only ever slows a kernel down) or
    ``{"task", "config_index", "error"}`` for a config that is wrong or fails to build. The fastest is
    ``min(entries with "median_s", key=median_s)``.
    """
    if passes < 1 or repeat < 1:
        raise ValueError(f"passes and repeat must be at least 1, got {passes} and {repeat}")
    entries: list[dict[str, Any]] = []
    ready = []
    for task, index in candidates:
        entry: dict[str, Any] = {"task": task, "config_index": index}
        entries.append(entry)
        try:
            ready.append((entry, *build_config(task, index)))
        except TensortuneError as e:  # a config outside the space, or one the compiler rejects: reported
            entry["error"] = f"{type(e).__name__}: {e}"
    for p in range(passes):
        for entry, module, op, inputs, expected in (ready if p % 2 == 0 else ready[::-1]):
            if "error" in entry:
                continue
            t = time_module(module, inputs, op, expected, threads, repeat, min_repeat_ms)
            if "error" in t:
                entry["error"] = t["error"]
                entry.pop("passes_s", None)
            else:
                entry.setdefault("passes_s", []).append(t["median_s"])
    for entry in entries:
        if "passes_s" in entry:
            entry["median_s"] = min(entry["passes_s"])
    return entries

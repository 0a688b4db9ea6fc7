"""Run built candidates one at a time in a guarded worker process, so a crash or hang costs one candidate.

The worker is a persistent child process (``spawn``: it never inherits OpenMP threads) that talks
over a pipe. If a kernel kills it (segfault, abort) or overruns the timeout, the parent records the
failure, starts a fresh worker and goes on with the next candidate.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
import traceback
import warnings
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Iterator, Sequence

import numpy as np

from ...errors import TensortuneError
from ...ops.operator import check_output
from ...runtime.compiler import unload_library
from ...runtime.cross import is_foreign
from ...runtime.emulator import EmulatedTimingWarning
from ...runtime.module import KernelRuntimeError
from ...runtime.timer import timer_library
from ...target import TargetKind
from .result import BuildResult, ErrorKind, MeasureInput, MeasureResult
from .steadiness import SlowSpellGuard, SpeedProbe

FLUSH_BYTES = 64 << 20  # larger than the last-level cache of common CPUs
START_TIMEOUT = 60.0  # seconds for a fresh worker to import tensortune and report ready
PREPARE_TIMEOUT = 120.0  # seconds to make a task's inputs and numpy reference (not part of RunOptions.timeout)


@dataclass(frozen=True)
class RunOptions:
    """How each candidate is timed: ``repeat`` measurements of ``number`` calls (see ``Module.time_evaluator``).

    ``timeout`` bounds one candidate (loading, checking and timing). ``flush_cache`` overwrites a
    buffer larger than the last-level cache before each repeat (``min_repeat_ms`` is then ignored).
    ``fresh_input``: before each call the kernel's threads rewrite its first input (untimed), as inside a
    network (see ``Module.time_evaluator``). ``cooldown_s`` sleeps between candidates. ``min_repeat_ms``
    (default 2 ms) raises ``number`` for small kernels: a repeat of a few microsecond-long calls is dominated
    by timer and scheduling noise, and the tuner's best would be the luckiest draw rather than the fastest
    kernel.
    A target of another architecture runs under an emulator, 10-50x slower: its candidates get
    ``timeout * emulation_timeout_scale`` seconds.
    ``slow_spell_retries``: a CPU candidate timed while a speed probe ran more than ``slow_spell_tolerance``
    slower than its fastest (another process had a core: ``steadiness``) is timed again, up to this many more
    times; 0 turns the guard off.
    """

    number: int = 4
    repeat: int = 3
    min_repeat_ms: float = 2.0
    timeout: float = 10.0
    check_correctness: bool = True
    flush_cache: bool = False
    fresh_input: bool = False
    num_threads: int | None = None
    cooldown_s: float = 0.0
    emulation_timeout_scale: float = 20.0
    slow_spell_retries: int = 3
    slow_spell_tolerance: float = 0.25

    def __post_init__(self) -> None:
        if (self.number < 1 or self.repeat < 1 or self.min_repeat_ms < 0 or self.timeout <= 0 or self.cooldown_s < 0
                or self.emulation_timeout_scale < 1 or self.slow_spell_retries < 0 or self.slow_spell_tolerance <= 0):
            raise ValueError(f"RunOptions needs number, repeat >= 1, timeout > 0, min_repeat_ms, cooldown_s, "
                             f"slow_spell_retries >= 0, emulation_timeout_scale >= 1 and slow_spell_tolerance > 0; "
                             f"got {self}")


class LocalRunner:
    """Times built candidates in a child process on this machine (``close()`` stops the child)."""

    def __init__(self, options: RunOptions | None = None):
        self.options = options or RunOptions()
        self._ctx = multiprocessing.get_context("spawn")
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None

    def run(self, inputs: Sequence[MeasureInput], builds: Sequence[BuildResult]) -> list[MeasureResult]:
        """One ``MeasureResult`` per input; a failed build is passed through with its error."""
        if len(inputs) != len(builds):
            raise ValueError(f"run() got {len(inputs)} inputs but {len(builds)} build results")
        results = []
        ran_one = False
        for inp, build in zip(inputs, builds):
            if not build.ok:
                results.append(MeasureResult((), build.error_kind, build.error_msg, build.build_seconds))
                continue
            if ran_one and self.options.cooldown_s > 0:
                time.sleep(self.options.cooldown_s)
            start = time.perf_counter()
            emulated = is_foreign(inp.task.target)
            costs, kind, msg = self._run_one(inp, build, emulated)
            results.append(MeasureResult(costs, kind, msg, build.build_seconds + time.perf_counter() - start,
                                         emulated=emulated))
            ran_one = True
        return results

    def close(self) -> None:
        """Ask the worker to exit, and kill it if it does not."""
        if self._process is None:
            return
        try:
            self._conn.send(None)
        except OSError:
            pass  # already dead
        self._process.join(timeout=2.0)
        self._kill_worker()

    def __enter__(self) -> LocalRunner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _run_one(self, inp: MeasureInput, build: BuildResult,
                 emulated: bool) -> tuple[tuple[float, ...], ErrorKind, str]:
        conn = self._ensure_worker()
        conn.send((inp, build, self.options))
        # The worker says "started" once the task's inputs and reference are ready; the timeout starts then.
        reply = self._receive(conn, PREPARE_TIMEOUT, "preparing inputs")
        if reply == "started":
            timeout = self.options.timeout * (self.options.emulation_timeout_scale if emulated else 1.0)
            phase = "loading, checking and timing the kernel" + (" under emulation" if emulated else "")
            reply = self._receive(conn, timeout, phase)
        return reply

    def _receive(self, conn: Connection, seconds: float, phase: str) -> Any:
        """The worker's next message, or a failure result if it dies or is silent for ``seconds``."""
        if not conn.poll(seconds):
            self._kill_worker()
            return (), ErrorKind.RUN_TIMEOUT, f"{phase} took longer than {seconds} s; worker killed"
        try:
            return conn.recv()
        except (EOFError, OSError):
            return (), ErrorKind.RUNTIME_CRASH, self._death_message()

    def _ensure_worker(self) -> Connection:
        if self._process is not None and self._process.is_alive():
            return self._conn
        self._kill_worker()
        parent, child = self._ctx.Pipe()
        self._process = self._ctx.Process(target=_worker_main, args=(child,), daemon=True, name="tensortune-runner")
        with single_threaded_blas():
            self._process.start()
        child.close()  # so the parent sees EOF when the worker dies
        self._conn = parent
        try:
            ready = parent.poll(START_TIMEOUT) and parent.recv() == "ready"
        except EOFError:
            ready = False
        if not ready:
            self._kill_worker()
            raise RuntimeError(f"the measurement worker did not start within {START_TIMEOUT} s; "
                               "run the same Python outside the tuner to see the import error")
        return parent

    def _death_message(self) -> str:
        self._process.join(timeout=5.0)
        code = self._process.exitcode
        self._kill_worker()
        if code is not None and code < 0 and -code in signal.valid_signals():
            return f"worker died with signal {signal.Signals(-code).name} (exit code {code})"
        return f"worker died with exit code {code}"

    def _kill_worker(self) -> None:
        if self._process is not None:
            if self._process.is_alive():
                self._process.kill()
            self._process.join()
            self._process.close()
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None


# ------------------------------------------------------------------------------ in the worker process

@dataclass
class _TaskData:
    """Per-task arrays, made once per worker: canonical inputs, and per output layout (configs may block a packed
    output differently) the output buffer and the numpy reference."""

    canonical: list[np.ndarray]
    outputs: dict[tuple, tuple[np.ndarray, np.ndarray]]


#: the thread-count variables of the BLAS libraries numpy may use
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Processes started inside get a single-threaded BLAS (the environment is restored after).

    The runner's numpy only makes references and inputs. A multithreaded BLAS would leave its threads spinning for
    up to about a tenth of a second after each reference, on the cores the next kernel is timed on: measured on 2
    cores, a candidate timed after a new task's reference then took up to 40 times its real time (whole
    scheduler time slices per call), and the first batch of every task was ranked by that noise.
    """
    saved = {k: os.environ.get(k) for k in BLAS_THREAD_VARIABLES}
    os.environ.update({k: "1" for k in BLAS_THREAD_VARIABLES})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _worker_main(conn: Connection) -> None:
    """Serve ``(input, build, options)`` requests until ``None``; reply ``(costs, error_kind, message)``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, which then closes us
    warnings.simplefilter("ignore", EmulatedTimingWarning)  # results say it: MeasureResult.emulated
    timer_library()  # build (or load) the native timer before the first timed candidate
    cache: dict[Any, _TaskData] = {}
    conn.send("ready")
    while True:
        try:
            request = conn.recv()
        except EOFError:  # the parent is gone
            return
        if request is None:
            return
        inp, build, options = request
        lost = False
        try:
            reply = _measure(inp, build, options, cache, conn)
        except TensortuneError as e:
            reply = ((), ErrorKind.RUNTIME_CRASH, f"{type(e).__name__}: {e}")
            lost = isinstance(e, KernelRuntimeError) and e.ends_process
        except Exception:
            reply = ((), ErrorKind.UNKNOWN, traceback.format_exc(limit=-3))
        conn.send(reply)
        if lost:  # e.g. a GPU context lost to an illegal address: the next candidate gets a fresh worker
            return


def _measure(inp: MeasureInput, build: BuildResult, options: RunOptions, cache: dict[Any, _TaskData],
             conn: Connection) -> tuple[tuple[float, ...], ErrorKind, str]:
    """Check and time one candidate; sends "started" on ``conn`` once the untimed preparation is done."""
    task = inp.task
    data = cache.get(task)
    if data is None:
        data = cache[task] = _TaskData(task.make_inputs(seed=0), {})
    _, op = task.instantiate(inp.config_index)
    inputs = op.prepare(*data.canonical)  # weights packed for this config
    layout = tuple(op.output.shape)
    if layout not in data.outputs:
        data.outputs[layout] = (op.empty_output(), np.asarray(task.reference(data.canonical, inp.config_index)))
    output, expected = data.outputs[layout]
    conn.send("started")
    module = build.library.load(options.num_threads)
    path = module.lib_path
    try:
        # Poison the output so an element the kernel forgets to write fails the check.
        output.fill(np.nan if output.dtype.kind == "f" else 123)
        module(*inputs, output)  # also the warm-up call
        problem = check_output(output, expected) if options.check_correctness else None
        if problem:
            return (), ErrorKind.WRONG_ANSWER, problem
        guard = _guard(task, module, options)
        if guard is None:
            return _time(module, (*inputs, output), options), ErrorKind.NONE, ""
        costs, note = guard.time(lambda: _time(module, (*inputs, output), options))
        return costs, ErrorKind.NONE, note
    finally:
        module.close()  # a GPU kernel's device memory
        del module
        unload_library(path)  # a long tuning run loads thousands of candidates into this worker


_GUARDS: dict[tuple, SlowSpellGuard] = {}  # this worker's slow-spell guards, by threads and options


def _guard(task, module: Module, options: RunOptions) -> SlowSpellGuard | None:
    """The worker's slow-spell guard for the module's threads; None for a GPU or emulated target, or when off."""
    if options.slow_spell_retries == 0 or task.target.kind is not TargetKind.C or is_foreign(task.target):
        return None
    key = (module.num_threads, options.slow_spell_retries, options.slow_spell_tolerance)
    if key not in _GUARDS:
        probes = [g.probe for k, g in _GUARDS.items() if k[0] == key[0]]
        _GUARDS[key] = SlowSpellGuard(probes[0] if probes else SpeedProbe(key[0]), options.slow_spell_retries,
                                      options.slow_spell_tolerance)
    return _GUARDS[key]


def _time(module: Module, arrays: tuple[np.ndarray, ...], options: RunOptions) -> tuple[float, ...]:
    if not options.flush_cache:
        evaluate = module.time_evaluator(options.number, options.repeat, options.min_repeat_ms, options.num_threads,
                                         options.fresh_input)
        return evaluate(*arrays).results
    # time_evaluator warms the caches before it measures, which would undo a flush; so time the calls here.
    # Each call adds the ctypes overhead (microseconds), fine for the large kernels a flush is meant for.
    flush = np.ones(FLUSH_BYTES // 8)
    costs = []
    for _ in range(options.repeat):
        flush += 1.0
        start = time.perf_counter()
        for _ in range(options.number):
            module(*arrays)
        costs.append((time.perf_counter() - start) / options.number)
    return tuple(costs)

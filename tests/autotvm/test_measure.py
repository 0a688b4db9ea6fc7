"""Measurement: parallel builds, guarded runs, and every failure recorded as a classified result."""
from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import sys
import random
import time

import pytest

from measure_templates import MODES, faulty_template
from tensortune.autotvm.measure import (BuildOptions, BuildResult, ErrorKind, LocalBuilder, LocalRunner,
                                        MeasureInput, MeasureOptions, Measurer, RunOptions)
from tensortune.autotvm.task import Task
from tensortune.autotvm.templates.matmul import matmul_template
from tensortune.build import Library
from tensortune.runtime import ArgSpec, compile_shared
from tensortune.target import ISA, Target

HOST = Target.host()
MATMUL = Task(matmul_template, (64, 64, 64), HOST)
FAULTY = Task(faulty_template, (16,), HOST)
FAST_RUN = RunOptions(number=2, repeat=2, timeout=5.0)
#: for candidates that must succeed: a timeout a busy machine's OpenMP threads cannot hit
SURE_RUN = dataclasses.replace(FAST_RUN, timeout=60.0)


def faulty(mode: str) -> MeasureInput:
    return MeasureInput(FAULTY, MODES[mode])


def good() -> MeasureInput:
    return faulty("ok")


def build_good() -> BuildResult:
    with LocalBuilder(BuildOptions(n_parallel=1)) as builder:
        return builder.build([good()])[0]


def kinds(results) -> list[ErrorKind]:
    return [r.error_kind for r in results]


@pytest.fixture(scope="module")
def measurer():
    with Measurer(MeasureOptions(BuildOptions(n_parallel=2), FAST_RUN)) as m:
        yield m


def test_random_matmul_configs_measure_ok(measurer):
    indices = MATMUL.space.sample(4, random.Random(0))
    before = dataclasses.replace(measurer.stats)
    results = measurer([MeasureInput(MATMUL, i) for i in indices])
    assert kinds(results) == [ErrorKind.NONE] * 4, [r.error_msg for r in results]
    for r in results:
        assert len(r.costs) == FAST_RUN.repeat and all(c > 0 for c in r.costs)
        assert 0 < r.mean_cost < r.all_cost
    assert measurer.stats.n_measured == before.n_measured + 4
    assert measurer.stats.build_s > before.build_s and measurer.stats.run_s > before.run_s


def test_build_failures_are_classified_and_the_batch_goes_on(measurer):
    # An architecture tensortune has no cross compiler for: lowering and codegen work, compiling cannot.
    foreign = MeasureInput(Task(faulty_template, (16,), Target(ISA.SCALAR, 2, "riscv64")), MODES["ok"])
    results = measurer([faulty("invalid"), good(), foreign, good()])
    assert kinds(results) == [ErrorKind.INVALID_CONFIG, ErrorKind.NONE, ErrorKind.COMPILE_ERROR, ErrorKind.NONE]
    assert "ScheduleError" in results[0].error_msg and "split factor" in results[0].error_msg
    assert "CompilerNotFoundError" in results[2].error_msg and "riscv64" in results[2].error_msg
    assert results[0].costs == () and results[0].mean_cost == float("inf")


def test_compiler_errors_keep_the_compiler_output(monkeypatch):
    monkeypatch.setenv("TENSORTUNE_CFLAGS", "-fno-such-flag")  # read by the build worker, spawned after this
    with LocalBuilder(BuildOptions(n_parallel=1)) as builder:
        [result] = builder.build([good()])
    assert result.error_kind is ErrorKind.COMPILE_ERROR
    assert result.error_msg.startswith("C compilation failed:\n") and "-fno-such-flag" in result.error_msg
    assert "int32_t kernel(void** args" in result.source


def test_wrong_answer_is_caught_unless_checking_is_off(measurer):
    results = measurer([faulty("wrong_kernel"), good()])
    assert kinds(results) == [ErrorKind.WRONG_ANSWER, ErrorKind.NONE]
    assert "max abs error" in results[0].error_msg
    with Measurer(MeasureOptions(BuildOptions(n_parallel=1), dataclasses.replace(FAST_RUN, check_correctness=False))) as m:
        assert kinds(m([faulty("wrong_kernel")])) == [ErrorKind.NONE]


@pytest.mark.slow
def test_build_timeout_replaces_the_stuck_pool():
    # 8 s: ample for a good candidate (pool start included) on a loaded machine, far below the 60 s sleep; the
    # sleeping template's build is recorded as timed out (it was killed, not waited for) and the others built
    with LocalBuilder(BuildOptions(n_parallel=2, timeout=8.0)) as builder:
        builds = builder.build([faulty("slow"), good(), good()])
        assert kinds(builds) == [ErrorKind.BUILD_TIMEOUT, ErrorKind.NONE, ErrorKind.NONE]
        assert builds[0].error_msg == "build took longer than 8.0 s"
        assert kinds(builder.build([good()])) == [ErrorKind.NONE]  # the new pool works


def test_a_dead_build_worker_is_replaced():
    with LocalBuilder(BuildOptions(n_parallel=1)) as builder:
        builds = builder.build([faulty("crash"), good()])
    assert kinds(builds) == [ErrorKind.UNKNOWN, ErrorKind.NONE]
    assert "build worker died" in builds[0].error_msg


# ------------------------------------------------------------------ kernels that misbehave when run

def c_kernel(body: str) -> BuildResult:
    """A hand-written kernel for FAULTY's arrays, with the calling convention of generated ones."""
    source = f"#include <stdint.h>\nint32_t bad(void** args, int32_t num_threads) {{ {body} }}\n"
    n = FAULTY.args[0]
    specs = (ArgSpec("A", (n, n), "float32"), ArgSpec("B", (n, n), "float32"), ArgSpec("C", (n, n), "float32", True))
    path = compile_shared(source, HOST)
    return BuildResult(Library(path.stem, path.read_bytes(), "bad", specs, (), str(HOST), source), ErrorKind.NONE,
                       "", 0.0, source)


SEGFAULT = "volatile int* p = 0; *p = 1; return 0;"
HANG = "volatile int spin = 1; while (spin) {} return 0;"
ERROR_CODE = "return 7;"


@pytest.mark.slow
def test_runner_survives_crash_hang_and_error_codes():
    ok_build = build_good()
    bad = [c_kernel(SEGFAULT), c_kernel(HANG), c_kernel(ERROR_CODE)]
    garbage = b"not a shared object"
    missing = BuildResult(Library(hashlib.sha256(garbage).hexdigest(), garbage, "bad", bad[0].library.args, (),
                                  str(HOST)), ErrorKind.NONE, "", 0.0)
    failed_build = BuildResult(None, ErrorKind.COMPILE_ERROR, "boom", 0.25)
    builds = [b for x in (*bad, missing, failed_build) for b in (x, ok_build)]
    with LocalRunner(dataclasses.replace(FAST_RUN, timeout=2.0)) as runner:
        results = runner.run([good()] * len(builds), builds)
    assert kinds(results) == [
        ErrorKind.RUNTIME_CRASH, ErrorKind.NONE,  # segfault: the worker died and was restarted
        ErrorKind.RUN_TIMEOUT, ErrorKind.NONE,  # hang: the worker was killed and restarted
        ErrorKind.RUNTIME_CRASH, ErrorKind.NONE,  # nonzero return code
        ErrorKind.RUNTIME_CRASH, ErrorKind.NONE,  # library bytes cannot be loaded
        ErrorKind.COMPILE_ERROR, ErrorKind.NONE,  # build failure passed through
    ]
    assert "SIGSEGV" in results[0].error_msg
    assert "error code 7" in results[4].error_msg
    assert results[8].error_msg == "boom" and results[8].all_cost == 0.25
    assert all(r.costs and min(r.costs) > 0 for r in results[1::2])


def test_flush_cache_times_each_repeat():
    build = build_good()
    options = dataclasses.replace(SURE_RUN, flush_cache=True, repeat=3, num_threads=1, cooldown_s=0.01)
    with LocalRunner(options) as runner:
        (result,) = runner.run([good()], [build])
    assert result.ok and len(result.costs) == 3 and min(result.costs) > 0


def test_fresh_input_times_a_checked_candidate():
    build = build_good()
    options = dataclasses.replace(SURE_RUN, fresh_input=True, repeat=3, num_threads=2)
    with LocalRunner(options) as runner:
        (result,) = runner.run([good()], [build])
    assert result.ok and len(result.costs) == 3 and min(result.costs) > 0


def test_mismatched_lengths_are_a_programming_error():
    with pytest.raises(ValueError, match="2 inputs but 1 build"):
        LocalRunner().run([good(), good()], [BuildResult(None, ErrorKind.UNKNOWN, "", 0.0)])


def test_build_workers_exit_when_the_tuning_process_is_killed():
    """A killed tuning process (SIGKILL: no cleanup runs) must not leave compile workers behind."""
    import signal
    import textwrap

    script = textwrap.dedent("""
        import sys
        from tensortune.autotvm.measure.builder import LocalBuilder
        from tensortune.autotvm.measure.result import MeasureInput
        from tensortune.autotvm.catalog import create_task
        if __name__ == "__main__":
            b = LocalBuilder()
            b.build([MeasureInput(create_task("matmul", {"M": 8, "N": 8, "K": 8}), 0)])
            print(*b._pool._processes, flush=True)
            sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    workers = [int(p) for p in proc.stdout.readline().split()]
    assert workers
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 15
    alive = workers
    while alive and time.time() < deadline:
        time.sleep(0.2)
        alive = [p for p in workers if _alive(p)]
    assert not alive, f"build workers {alive} outlived their parent"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_pools_refuse_to_start_while_a_worker_imports_the_script(monkeypatch):
    # What a spawned worker sees when the user's script tunes at top level, without a __main__ guard.
    import multiprocessing

    from tensortune.autotvm.workers import WorkerStartError, spawn_pool

    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(WorkerStartError, match='if __name__ == "__main__"'):
        spawn_pool(1)


def _blas_threads() -> str | None:
    import os

    return os.environ.get("OPENBLAS_NUM_THREADS")


def test_the_runner_process_gets_a_single_threaded_blas_and_the_parent_keeps_its_own(monkeypatch):
    """A BLAS that spins after each numpy reference would steal the cores the next kernel is timed on."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    from tensortune.autotvm.measure.runner import single_threaded_blas

    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "7")
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    with single_threaded_blas():
        pool = ProcessPoolExecutor(1, multiprocessing.get_context("spawn"))
        assert pool.submit(_blas_threads).result() == "1"
    pool.shutdown()
    assert os.environ["OPENBLAS_NUM_THREADS"] == "7" and "MKL_NUM_THREADS" not in os.environ


def test_a_pool_is_returned_with_all_its_workers_started():
    """No worker may still be starting (importing, on the same cores) while a kernel is timed."""
    from tensortune.autotvm.workers import spawn_pool

    pool = spawn_pool(2)
    try:
        assert len(pool._processes) == 2 and all(p.is_alive() for p in pool._processes.values())
        assert pool.submit(abs, -3).result() == 3
    finally:
        pool.shutdown()

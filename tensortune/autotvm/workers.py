"""Process pools for the tuner's parallel work (compiling candidates, extracting features).

Workers are spawned, never forked: the parent may hold OpenMP or BLAS threads. Each worker exits
when the process that started it is gone (killed, not closed), instead of lingering. A pool is
returned only once all its workers have started: a worker spawned on demand would otherwise still be
importing (a second or two of CPU) while the runner times a kernel on the same cores, and the
kernel's timings would be several times too long (seen on 2 cores: the first batch of each task).
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ..errors import TensortuneError


class WorkerStartError(TensortuneError, RuntimeError):
    """Worker processes were started while a worker was importing the user's script."""


def spawn_pool(n_workers: int) -> ProcessPoolExecutor:
    """A pool of ``n_workers`` spawned processes that exit with this one."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # A spawned worker re-imports the main script; tuning at its top level would start pools forever.
        raise WorkerStartError("tensortune starts worker processes, which import your script: put the code "
                               "that tunes under `if __name__ == \"__main__\":`")
    ctx = multiprocessing.get_context("spawn")
    started = ctx.Barrier(n_workers)
    pool = ProcessPoolExecutor(n_workers, ctx, initializer=_start_worker, initargs=(os.getpid(), started))
    try:
        for job in [pool.submit(_started) for _ in range(n_workers)]:  # each submit starts a worker (none is idle)
            job.result()
    except BrokenProcessPool:  # a worker died starting: a pool as before, whose users report its failures
        pool.shutdown(wait=False, cancel_futures=True)
        return ProcessPoolExecutor(n_workers, ctx, initializer=_exit_with_parent, initargs=(os.getpid(),))
    return pool


#: seconds a worker waits for the others of its pool to start
START_TIMEOUT = 120.0


def _start_worker(parent: int, started: threading.Barrier) -> None:
    _exit_with_parent(parent)
    try:  # hold every job until all workers have imported what they need
        started.wait(START_TIMEOUT)
    except threading.BrokenBarrierError:  # a worker that failed to start, or one started later: nothing to wait for
        pass


def _started() -> None:
    """The job that tells a pool's workers have all started (see ``spawn_pool``)."""


def _exit_with_parent(parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()

"""Process pools for the tuner's parallel work (compiling candidates, extracting features).

Workers are spawned, never forked: the parent may hold OpenMP or BLAS threads. Each worker exits
when the process that started it is gone (killed, not closed), instead of lingering.
"""
from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from ..errors import TensortuneError


class WorkerStartError(TensortuneError, RuntimeError):
    """Worker processes were started while a worker was importing the user's script."""


def spawn_pool(n_workers: int) -> ProcessPoolExecutor:
    """A pool of ``n_workers`` spawned processes that exit with this one."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        # A spawned worker re-imports the main script; tuning at its top level would start pools forever.
        raise WorkerStartError("tensortune starts worker processes, which import your script: put the code "
                               "that tunes under `if __name__ == \"__main__\":`")
    return ProcessPoolExecutor(n_workers, multiprocessing.get_context("spawn"),
                               initializer=_exit_with_parent, initargs=(os.getpid(),))


def _exit_with_parent(parent: int) -> None:
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()

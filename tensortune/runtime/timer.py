"""Timing: the one calibration protocol every timed call uses, and a tiny native library that times
repeated kernel calls, so Python overhead is not measured."""
from __future__ import annotations

import ctypes
import functools
from typing import Callable

from .compiler import compile_shared, load_library
from ..target import ISA, Target

MAX_CALIBRATIONS = 5


def time_repeats(run: Callable[[int], float], number: int, repeat: int, min_repeat_ms: float = 0.0,
                 max_calibrations: int = MAX_CALIBRATIONS) -> list[float]:
    """Per-call seconds of ``repeat`` timings, each of ``count`` calls; ``run(count)`` returns their seconds.

    One warm-up call first (caches, page faults, thread pools). ``count`` starts at ``number``; if
    ``min_repeat_ms`` > 0 it is then raised until one timing lasts at least that long (at most
    ``max_calibrations`` tries), so that short kernels are not timed at the clock's resolution.
    """
    run(1)
    count = number
    for _ in range(max_calibrations if min_repeat_ms > 0 else 0):
        elapsed_ms = run(count) * 1e3
        if elapsed_ms >= min_repeat_ms:
            break
        per_call_ms = max(elapsed_ms / count, 1e-6)
        count = max(int(min_repeat_ms / per_call_ms) + 1, int(count * 1.618) + 1)
    return [run(count) / count for _ in range(repeat)]

TIMER_SOURCE = r"""
#include <stdint.h>
#include <time.h>

typedef int32_t (*tt_kernel)(void**, int32_t);
static _Thread_local int32_t last_error;

/* Return code of the kernel call that made the last tt_time_calls fail (0 if none failed). */
int32_t tt_last_error(void) { return last_error; }

/* Seconds taken by `number` calls of f, or -1.0 if a call returns nonzero (see tt_last_error). */
double tt_time_calls(tt_kernel f, void** args, int32_t num_threads, int64_t number) {
    struct timespec t0, t1;
    last_error = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int64_t i = 0; i < number; i++) {
        int32_t rc = f(args, num_threads);
        if (rc != 0) {
            last_error = rc;
            return -1.0;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

/* Write one word of each cache line of `bytes` bytes at `data`, the lines split in contiguous parts among
   `num_threads` threads (as a previous layer splitting its outer loop leaves its output). */
static void rewrite(void* data, int64_t bytes, int32_t num_threads) {
    volatile int32_t* words = (volatile int32_t*)data;
    int64_t lines = bytes / 64;
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t i = 0; i < lines; i++)
        words[i * 16] = words[i * 16];
}

/* Seconds taken by `number` calls of f, each after the `bytes` bytes at `data` are rewritten by the threads
   (not timed); -1.0 if a call returns nonzero (see tt_last_error). */
double tt_time_calls_rewritten(tt_kernel f, void** args, int32_t num_threads, int64_t number, void* data,
                               int64_t bytes) {
    struct timespec t0, t1;
    double total = 0.0;
    last_error = 0;
    for (int64_t i = 0; i < number; i++) {
        rewrite(data, bytes, num_threads);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        int32_t rc = f(args, num_threads);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (rc != 0) {
            last_error = rc;
            return -1.0;
        }
        total += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    }
    return total;
}
"""


@functools.cache
def timer_library() -> ctypes.CDLL:
    """The support library (``tt_time_calls``, ``tt_time_calls_rewritten``, ``tt_last_error``), built once (and
    cached on disk)."""
    host = Target.host()
    lib = load_library(compile_shared(TIMER_SOURCE, Target(ISA.SCALAR, host.num_cores, host.arch)))
    lib.tt_time_calls.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32, ctypes.c_int64]
    lib.tt_time_calls.restype = ctypes.c_double
    lib.tt_time_calls_rewritten.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32,
                                            ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
    lib.tt_time_calls_rewritten.restype = ctypes.c_double
    lib.tt_last_error.argtypes = []
    lib.tt_last_error.restype = ctypes.c_int32
    return lib

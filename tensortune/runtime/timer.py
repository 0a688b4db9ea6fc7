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

/* Write one word of each cache line of `slices` slices of `rows` rows of `row_bytes` bytes (consecutive in
   memory), each thread a contiguous band of rows of every slice: as a previous layer whose threads split its
   output rows leaves a channel-blocked (NCHW[x]c) tensor. A line belongs to the row in which it starts. */
static void rewrite(char* data, int64_t slices, int64_t rows, int64_t row_bytes, int32_t num_threads) {
    #pragma omp parallel for num_threads(num_threads) schedule(static)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t s = 0; s < slices; s++) {
            int64_t begin = (s * rows + r) * row_bytes, end = begin + row_bytes;
            for (int64_t line = (begin + 63) / 64 * 64; line < end; line += 64) {
                volatile int32_t* word = (volatile int32_t*)(data + line);
                *word = *word;
            }
        }
}

/* Seconds taken by `number` calls of f, each after the tensor at `data` is rewritten by the threads (not
   timed; see rewrite); -1.0 if a call returns nonzero (see tt_last_error). */
double tt_time_calls_rewritten(tt_kernel f, void** args, int32_t num_threads, int64_t number, char* data,
                               int64_t slices, int64_t rows, int64_t row_bytes) {
    struct timespec t0, t1;
    double total = 0.0;
    last_error = 0;
    for (int64_t i = 0; i < number; i++) {
        rewrite(data, slices, rows, row_bytes, num_threads);
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
                                            ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                            ctypes.c_int64]
    lib.tt_time_calls_rewritten.restype = ctypes.c_double
    lib.tt_last_error.argtypes = []
    lib.tt_last_error.restype = ctypes.c_int32
    return lib


def row_bands(shape: tuple[int, ...], itemsize: int) -> tuple[int, int, int]:
    """How a previous layer's threads leave a tensor of ``shape``, as ``tt_time_calls_rewritten`` rewrites it:
    (slices, rows per slice, bytes per row), each thread a band of rows of every slice. A channel-blocked tensor
    (NCHW[x]c, five dimensions), as a layer splitting its output rows among its threads leaves it: its batch x
    channel blocks slices of rows of W x c elements; any other, as one whose threads split its memory in
    contiguous parts: one slice of 64-byte rows. A channel-blocked tensor of one row is a 1x1 convolution's input
    seen as one row of its pixels (``operators.conv_tasks.flat_workload``), which the previous layer left in bands
    of pixels."""
    if len(shape) == 5:
        n, c, h, w, b = shape
        return (n * c, w, b * itemsize) if h == 1 else (n * c, h, w * b * itemsize)
    size = itemsize
    for d in shape:
        size *= d
    return 1, -(-size // 64), 64

"""A compiled kernel that can be called on numpy arrays and timed.

Calling convention of the C entry point: ``int32_t entry(void** args, int32_t num_threads)``,
where ``args`` holds the data pointers of the user arrays in order, then the workspace buffers.
It returns 0 on success.
"""
from __future__ import annotations

import contextlib
import ctypes
import statistics
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Iterator

import numpy as np

from ..dtype import DType
from ..env import settings
from ..errors import ArgumentError, TensortuneError
from ..target import Target
from .compiler import load_library
from .timer import row_bands, time_repeats, timer_library

ALIGNMENT = 64  # bytes; one cache line and one AVX-512 register


class KernelRuntimeError(TensortuneError, RuntimeError):
    """A kernel could not be loaded, or returned a nonzero error code. ``ends_process``: the process that ran
    it cannot run kernels any more (a GPU context lost to an illegal access)."""

    ends_process = False


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """Name, shape and dtype of one kernel argument or workspace buffer."""

    name: str
    shape: tuple[int, ...]
    dtype: DType
    is_output: bool = False  # the kernel writes it: the array must be writeable

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(n) for n in self.shape))
        object.__setattr__(self, "dtype", DType.of(self.dtype))
        if any(n < 0 for n in self.shape):
            raise ArgumentError(f"argument '{self.name}' has a negative extent in shape {self.shape}")

    def __str__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


@dataclass(frozen=True, slots=True)
class TimingResult:
    """Per-repeat mean seconds per call. ``emulated``: the kernel ran under an emulator, so the seconds are
    the emulator's, and say nothing about the target CPU."""

    results: tuple[float, ...]
    emulated: bool = False

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    @property
    def std(self) -> float:
        """Population standard deviation (0 for a single repeat)."""
        return statistics.pstdev(self.results)


class BaseModule:
    """What every loaded kernel has: its entry point, argument specs, source and target, the argument checks,
    and ``time_evaluator`` (with the loop in native code). Subclasses say how to open the library
    (``_open``), call the kernel (``__call__``) and run a timed loop of calls (``_timed_calls``)."""

    emulated = False  # whether timings are an emulator's, not the target's

    def __init__(
        self,
        lib_path: Path | str,
        entry: str,
        args: tuple[ArgSpec, ...],
        workspaces: tuple[ArgSpec, ...] = (),
        source: str = "",
        num_threads: int | None = None,
        target: Target | None = None,
    ):
        self.lib_path = Path(lib_path)
        self.entry = entry
        self.args = tuple(args)
        self.workspaces = tuple(workspaces)
        self.source = source
        self.target = target or Target.host()  # the CPU the library was compiled for
        # Read once here, not per call: the environment is a setting of the run, not of each call.
        self.num_threads = _check_threads(num_threads) if num_threads is not None else settings().num_threads
        self._open()

    def _open(self) -> None:
        """Make the kernel callable (raises ``KernelRuntimeError`` or a missing tool's error)."""
        raise NotImplementedError

    def __call__(self, *arrays: np.ndarray, num_threads: int | None = None) -> None:
        """Run the kernel on ``arrays`` (inputs and outputs, in the order of ``self.args``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the kernel holds outside this process's memory (GPU memory); a no-op on CPUs."""

    def time_evaluator(
        self, number: int = 10, repeat: int = 3, min_repeat_ms: float = 0.0, num_threads: int | None = None,
        fresh_input: bool = False,
    ) -> Callable[..., TimingResult]:
        """A function that times the kernel on given arrays, with the loop in native code.

        After one warm-up call, each of ``repeat`` measurements runs the kernel ``number`` times and
        records the mean. If ``min_repeat_ms`` > 0, ``number`` is first raised until one measurement
        takes at least that long (at most ``timer.MAX_CALIBRATIONS`` tries; see ``timer.time_repeats``).
        ``fresh_input``: before each call (not timed), the kernel's threads rewrite its first input as the
        previous layer inside a network leaves it (``timer.row_bands``: a channel-blocked tensor in bands of rows,
        any other in contiguous parts; CPU kernels in this process; ignored elsewhere). Called again and again
        on an input it only reads, a kernel finds a copy of it in every core's cache; inside a network it reads
        what other cores just wrote, at a cost that depends on how it splits its work.
        """
        check_timing(number, repeat, min_repeat_ms)
        threads = self._threads(num_threads)

        def evaluate(*arrays: np.ndarray) -> TimingResult:
            self._check(arrays)
            with self._timed_calls(arrays, threads, fresh_input) as run:
                return TimingResult(tuple(time_repeats(run, number, repeat, min_repeat_ms)), self.emulated)

        return evaluate

    def _timed_calls(self, arrays: tuple[np.ndarray, ...], threads: int,
                     fresh_input: bool = False) -> ContextManager[Callable[[int], float]]:
        """A context giving ``run(count) -> seconds`` of ``count`` calls on (checked) ``arrays`` (``fresh_input``:
        see ``time_evaluator``)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(str(a) for a in self.args)
        return f"{type(self).__name__}({self.entry}({args}), lib={self.lib_path})"

    def _threads(self, num_threads: int | None) -> int:
        return self.num_threads if num_threads is None else _check_threads(num_threads)

    def _check(self, arrays: tuple[np.ndarray, ...]) -> None:
        if len(arrays) != len(self.args):
            expected = ", ".join(str(a) for a in self.args)
            raise ArgumentError(
                f"kernel '{self.entry}' takes {len(self.args)} arrays ({expected}), got {len(arrays)}"
            )
        for spec, a in zip(self.args, arrays):
            check_array(spec, a)
            if spec.is_output and not a.flags.writeable:
                raise ArgumentError(f"argument '{spec.name}' is written by the kernel but the array is read-only; "
                                    "pass a writeable array (e.g. np.empty or .copy())")
            if not a.flags.c_contiguous:
                raise ArgumentError(
                    f"argument '{spec.name}' is not C-contiguous; pass np.ascontiguousarray(...) instead"
                )


class Module(BaseModule):
    """A kernel in a shared library loaded into this process, with preallocated workspaces."""

    def _open(self) -> None:
        try:
            self._func = entry_point(self.lib_path, self.entry)
        except (OSError, AttributeError) as e:
            raise KernelRuntimeError(f"cannot load kernel '{self.entry}' from {self.lib_path}: {e}") from e
        # Allocated once and reused by every call.
        self._workspace_arrays = tuple(_aligned_zeros(w.shape, w.dtype) for w in self.workspaces)
        self._last_arrays: tuple[np.ndarray, ...] = ()
        self._last_pointers: ctypes.Array | None = None

    def __call__(self, *arrays: np.ndarray, num_threads: int | None = None) -> None:
        """Run the kernel on ``arrays`` (inputs and outputs, in the order of ``self.args``)."""
        pointers = self._pointers(arrays)
        rc = self._func(pointers, self._threads(num_threads))
        if rc != 0:
            raise KernelRuntimeError(f"kernel '{self.entry}' returned error code {rc}")

    @contextlib.contextmanager
    def _timed_calls(self, arrays: tuple[np.ndarray, ...], threads: int,
                     fresh_input: bool = False) -> Iterator[Callable[[int], float]]:
        first = next((a for spec, a in zip(self.args, arrays) if not spec.is_output), None) if fresh_input else None
        yield native_timer(self._func, self._pointers(arrays), threads, f"kernel '{self.entry}'", rewrite=first)

    def _pointers(self, arrays: tuple[np.ndarray, ...]) -> ctypes.Array:
        """Check ``arrays`` and return the ``void*`` array to pass; rebuilt only when the arrays change."""
        self._check(arrays)  # every call: shape and dtype of an ndarray can be reassigned in place
        last = self._last_arrays
        # Identity is a safe key because self._last_arrays keeps those arrays (and their ids) alive.
        if len(arrays) == len(last) and all(a is b for a, b in zip(arrays, last)):
            return self._last_pointers
        data = [a.ctypes.data for a in (*arrays, *self._workspace_arrays)]
        self._last_pointers = (ctypes.c_void_p * max(1, len(data)))(*data)
        self._last_arrays = tuple(arrays)
        return self._last_pointers


def entry_point(lib_path: Path | str, entry: str) -> ctypes._CFuncPtr:
    """``int32_t entry(void** args, int32_t num_threads)`` of a shared library (``OSError`` or ``AttributeError``
    when the library or the symbol is missing)."""
    fn = load_library(lib_path)[entry]
    fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32]
    fn.restype = ctypes.c_int32
    return fn


def check_array(spec: ArgSpec, a: object, what: str = "argument", hint: str = "") -> None:
    """An ``ArgumentError`` unless ``a`` is a numpy array of ``spec``'s dtype and shape (``hint`` follows the
    expected shape in the message)."""
    if not isinstance(a, np.ndarray):
        raise ArgumentError(f"{what} '{spec.name}' must be a numpy array, got {type(a).__name__}")
    if a.dtype != spec.dtype.numpy:
        raise ArgumentError(f"{what} '{spec.name}' must have dtype {spec.dtype}, got {a.dtype}; "
                            f"convert it with .astype(np.{spec.dtype})")
    if a.shape != spec.shape:
        raise ArgumentError(f"{what} '{spec.name}' must have shape {spec.shape}{hint}, got {a.shape}")


def check_timing(number: int, repeat: int, min_repeat_ms: float) -> None:
    if number < 1 or repeat < 1 or min_repeat_ms < 0:
        raise ArgumentError(
            f"time_evaluator needs number >= 1, repeat >= 1 and min_repeat_ms >= 0; "
            f"got number={number}, repeat={repeat}, min_repeat_ms={min_repeat_ms}"
        )


def native_timer(function: ctypes._CFuncPtr, pointers: ctypes.Array, threads: int, what: str,
                 lock: threading.Lock | None = None, rewrite: np.ndarray | None = None) -> Callable[[int], float]:
    """``run(count) -> seconds`` of ``count`` calls of an entry point ``int32_t f(void** args, int32_t
    num_threads)`` on ``pointers``, the loop in native code; ``lock`` is held around each timed loop; ``rewrite``:
    an array the threads rewrite before each call, untimed (``time_evaluator``'s ``fresh_input``)."""
    lib = timer_library()
    last_error = lib.tt_last_error
    bands = None if rewrite is None else row_bands(rewrite.shape, rewrite.itemsize)
    address = ctypes.cast(function, ctypes.c_void_p)

    def calls(count: int) -> float:
        if rewrite is None:
            return lib.tt_time_calls(address, pointers, threads, count)
        return lib.tt_time_calls_rewritten(address, pointers, threads, count, rewrite.ctypes.data, *bands)

    def run(count: int) -> float:
        with lock or contextlib.nullcontext():
            seconds = calls(count)
        if seconds < 0:
            raise KernelRuntimeError(f"{what} returned error code {last_error()} while timed")
        return seconds

    return run


def time_native(function: ctypes._CFuncPtr, pointers: ctypes.Array, threads: int, what: str, number: int,
                repeat: int, min_repeat_ms: float, lock: threading.Lock | None = None) -> TimingResult:
    """Time calls of an entry point on ``pointers`` (protocol of ``timer.time_repeats``)."""
    run = native_timer(function, pointers, threads, what, lock)
    return TimingResult(tuple(time_repeats(run, number, repeat, min_repeat_ms)))


def _check_threads(num_threads: int) -> int:
    if not isinstance(num_threads, int) or isinstance(num_threads, bool) or num_threads < 1:
        raise ArgumentError(f"num_threads must be an integer >= 1, got {num_threads!r}")
    return num_threads


def _aligned_zeros(shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    """A zero-filled C-contiguous array whose data starts on an ALIGNMENT-byte boundary."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.bytes
    raw = np.zeros(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    return raw[offset : offset + nbytes].view(dtype.numpy).reshape(shape)

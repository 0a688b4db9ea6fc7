"""Build candidates in parallel: instantiate, lower, generate C and compile, each in a pool worker."""
from __future__ import annotations

import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Sequence

from ...arith import Analyzer
from ...build import build_library, generate_source
from ...env import usable_cores
from ...errors import CompileError, CompileTimeoutError
from ...lower import lower
from ..workers import spawn_pool
from .result import BuildResult, ErrorKind, MeasureInput

ERROR_LINES = 20  # lines of compiler output kept in a COMPILE_ERROR message
_DIED_HINT = (" (if every candidate fails this way, the workers could not start: they are spawned and import "
              "your script, so a script must tune under `if __name__ == \"__main__\":`)")


@dataclass(frozen=True)
class BuildOptions:
    """``n_parallel`` worker processes; ``timeout`` seconds per candidate (from instantiation to library)."""

    n_parallel: int = field(default_factory=usable_cores)
    timeout: float = 20.0

    def __post_init__(self) -> None:
        if self.n_parallel < 1 or self.timeout <= 0:
            raise ValueError(f"BuildOptions needs n_parallel >= 1 and timeout > 0, got {self}")


class LocalBuilder:
    """Compiles candidates on this machine with a persistent process pool (``close()`` shuts it down)."""

    def __init__(self, options: BuildOptions | None = None):
        self.options = options or BuildOptions()
        self._pool: ProcessPoolExecutor | None = None

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        """One ``BuildResult`` per input, in order; failures are results, never exceptions."""
        results: list[BuildResult | None] = [None] * len(inputs)
        todo = list(range(len(inputs)))[::-1]  # a stack: pop() takes the next input in order
        running: dict[Future, tuple[int, float]] = {}  # future -> (input index, deadline)
        while todo or running:
            # At most n_parallel in flight, so each submitted candidate starts at once and its deadline is fair.
            while todo and len(running) < self.options.n_parallel:
                i = todo.pop()
                fut = self._get_pool().submit(_build_one, inputs[i], self.options.timeout)
                running[fut] = (i, time.monotonic() + self.options.timeout)
            next_deadline = min(d for _, d in running.values())
            done, _ = wait(running, timeout=max(0.0, next_deadline - time.monotonic()), return_when=FIRST_COMPLETED)
            broken = False
            for fut in done:
                i, _ = running.pop(fut)
                try:
                    results[i] = fut.result()
                except BrokenProcessPool as e:
                    broken = True
                    results[i] = BuildResult(None, ErrorKind.UNKNOWN, f"build worker died: {e}{_DIED_HINT}", 0.0)
            now = time.monotonic()
            expired = [f for f, (_, d) in running.items() if d <= now and not f.done()]
            for fut in expired:
                i, _ = running.pop(fut)
                results[i] = BuildResult(None, ErrorKind.BUILD_TIMEOUT,
                                         f"build took longer than {self.options.timeout} s", self.options.timeout)
            if expired or broken:
                # A stuck worker cannot be cancelled: replace the pool and resubmit what was still running.
                todo.extend(i for i, _ in sorted(running.values(), reverse=True))
                running.clear()
                self._kill_pool()
        return results  # type: ignore[return-value]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> LocalBuilder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _get_pool(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = spawn_pool(self.options.n_parallel)
        return self._pool

    def _kill_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # The executor has no public way to stop a running call; terminate its workers directly.
        processes = list((getattr(pool, "_processes", None) or {}).values())
        for p in processes:
            p.kill()
        pool.shutdown(wait=True, cancel_futures=True)


def _build_one(inp: MeasureInput, timeout: float) -> BuildResult:
    """Instantiate, lower, generate C and compile one candidate (runs in a pool worker)."""
    start = time.perf_counter()

    def fail(kind: ErrorKind, msg: str, source: str = "") -> BuildResult:
        return BuildResult(None, kind, msg, time.perf_counter() - start, source)

    task = inp.task
    try:
        sch, op = task.instantiate(inp.config_index)
    except Exception as e:  # a template is user code: any failure makes the config invalid
        return fail(ErrorKind.INVALID_CONFIG, _describe(e))
    source = ""
    try:
        analyzer = Analyzer()
        func = lower(sch, op.args, "kernel", analyzer=analyzer)
        source = generate_source(func, task.target, analyzer)
        library = build_library(func, task.target, timeout=timeout, source=source)
    except CompileTimeoutError as e:
        return fail(ErrorKind.BUILD_TIMEOUT, str(e), source)
    except CompileError as e:
        head = "\n".join(e.output.strip().splitlines()[:ERROR_LINES]) or str(e)
        return fail(ErrorKind.COMPILE_ERROR, f"C compilation failed:\n{head}", source)
    except Exception as e:  # lowering or codegen rejected the schedule, or an internal error there
        return fail(ErrorKind.COMPILE_ERROR, _describe(e), source)
    return BuildResult(library, ErrorKind.NONE, "", time.perf_counter() - start, source)


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"

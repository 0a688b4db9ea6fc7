"""What a tuning run shows while it runs: task, trials done/total, current and best GFLOP/s, elapsed, ETA, and
on a cluster the workers that measured the last batch.

Uses ``rich`` if it is installed, else ``tqdm``, else plain lines on stderr every few seconds. Neither
library is a dependency. ``progress_display(..., enabled=False)`` shows nothing (the CLI's --quiet).
"""
from __future__ import annotations

import importlib.util
import sys
import time
from enum import Enum
from typing import Callable, Sequence, TextIO


class Backend(Enum):
    """How progress is shown."""

    RICH = "rich"
    TQDM = "tqdm"
    PLAIN = "plain"
    NONE = "none"


def available_backend() -> Backend:
    """The best installed backend: rich, then tqdm, then plain lines."""
    for backend in (Backend.RICH, Backend.TQDM):
        if importlib.util.find_spec(backend.value) is not None:
            return backend
    return Backend.PLAIN


class ProgressDisplay:
    """Shows nothing; the base of the real displays. Use as a context manager or call ``close``."""

    def update(self, done: int, current_gflops: float, best_gflops: float, note: str = "",
               workers: Sequence[str] = ()) -> None:
        """``done`` trials so far (resumed ones included); GFLOP/s of the last batch's best and overall best;
        ``note``: more to show (the task being tuned and the network's latency, for a network); the cluster
        workers that measured the last batch (none on one machine)."""

    def close(self, message: str | None = None) -> None:
        """Finish the display; ``message`` (e.g. why tuning stopped) is shown after it."""

    def __enter__(self) -> ProgressDisplay:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def format_workers(workers: Sequence[str], shown: int = 3) -> str:
    """`` | 2 workers: 10.0.0.5:40123, 10.0.0.6:40123`` (the first ``shown``, then a count); "" for none."""
    if not workers:
        return ""
    names = [w.removeprefix("tcp://") for w in sorted(workers)]
    more = f" +{len(names) - shown} more" if len(names) > shown else ""
    return f" | {len(names)} worker{'s' if len(names) > 1 else ''}: {', '.join(names[:shown])}{more}"


def format_seconds(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class PlainProgress(ProgressDisplay):
    """One line per ``interval`` seconds (and a last one at the end) on ``stream``."""

    def __init__(self, name: str, total: int, initial: int = 0, stream: TextIO | None = None,
                 interval: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.name, self.total, self.initial = name, total, initial
        self.stream = stream if stream is not None else sys.stderr
        self.interval, self.clock = interval, clock
        self.start = clock()
        self.last_print: float | None = None
        self.state = (initial, 0.0, 0.0)
        self.note = ""
        self.printed_state: tuple[int, float, float] | None = None
        self.workers: Sequence[str] = ()
        self.closed = False

    def line(self) -> str:
        done, cur, best = self.state
        elapsed = self.clock() - self.start
        rate_done = done - self.initial
        eta = format_seconds(elapsed / rate_done * max(0, self.total - done)) if rate_done > 0 else "?"
        note = f" | {self.note}" if self.note else ""
        return (f"{self.name}: {done}/{self.total} trials | current {cur:.2f} GFLOP/s | best {best:.2f} GFLOP/s"
                f"{note} | elapsed {format_seconds(elapsed)} | ETA {eta}{format_workers(self.workers)}")

    def _print(self) -> None:
        print(self.line(), file=self.stream, flush=True)
        self.last_print, self.printed_state = self.clock(), self.state

    def update(self, done: int, current_gflops: float, best_gflops: float, note: str = "",
               workers: Sequence[str] = ()) -> None:
        self.state, self.note, self.workers = (done, current_gflops, best_gflops), note, workers
        if self.last_print is None or self.clock() - self.last_print >= self.interval or done >= self.total:
            self._print()

    def close(self, message: str | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        if self.printed_state != self.state:
            self._print()
        if message:
            print(message, file=self.stream, flush=True)


class TqdmProgress(ProgressDisplay):
    """A tqdm bar; current and best GFLOP/s in its postfix."""

    def __init__(self, name: str, total: int, initial: int = 0, stream: TextIO | None = None):
        from tqdm import tqdm

        self.stream = stream if stream is not None else sys.stderr
        self.bar = tqdm(total=total, initial=initial, desc=name, unit="trial", file=self.stream, dynamic_ncols=True)
        self.closed = False

    def update(self, done: int, current_gflops: float, best_gflops: float, note: str = "",
               workers: Sequence[str] = ()) -> None:
        self.bar.set_postfix_str(f"current {current_gflops:.2f} GFLOP/s, best {best_gflops:.2f} GFLOP/s"
                                 + (f", {note}" if note else "") + format_workers(workers), refresh=False)
        self.bar.update(done - self.bar.n)

    def close(self, message: str | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        self.bar.close()
        if message:
            self.bar.write(message, file=self.stream)


class RichProgress(ProgressDisplay):
    """A rich progress bar on stderr."""

    def __init__(self, name: str, total: int, initial: int = 0, stream: TextIO | None = None):
        from rich.console import Console
        from rich.markup import escape
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self.console = Console(file=stream) if stream is not None else Console(stderr=True)
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[gflops]}", markup=False), TimeElapsedColumn(), TimeRemainingColumn(),
                                 console=self.console)
        self.progress.start()
        # a name is text, not markup: "[emulated: ...]" is shown, not read as a style
        self.task_id = self.progress.add_task(escape(name), total=total, completed=initial, gflops="")
        self.closed = False

    def update(self, done: int, current_gflops: float, best_gflops: float, note: str = "",
               workers: Sequence[str] = ()) -> None:
        self.progress.update(self.task_id, completed=done,
                             gflops=f"current {current_gflops:.2f} | best {best_gflops:.2f} GFLOP/s"
                             + (f" | {note}" if note else "") + format_workers(workers))

    def close(self, message: str | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        self.progress.stop()
        if message:
            self.console.print(message, markup=False, highlight=False)


def progress_display(name: str, total: int, initial: int = 0, enabled: bool = True,
                     backend: Backend | None = None, stream: TextIO | None = None) -> ProgressDisplay:
    """A display for a run of ``total`` trials of which ``initial`` are done; ``backend`` defaults to the best."""
    if not enabled or backend is Backend.NONE:
        return ProgressDisplay()
    backend = backend or available_backend()
    if backend is Backend.RICH:
        return RichProgress(name, total, initial, stream)
    if backend is Backend.TQDM:
        return TqdmProgress(name, total, initial, stream)
    return PlainProgress(name, total, initial, stream)

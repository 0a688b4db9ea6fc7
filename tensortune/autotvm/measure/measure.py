"""``Measurer``: build a batch of candidates, then run it; what the tuning loop calls."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

from .builder import BuildOptions, LocalBuilder
from .result import MeasureInput, MeasureResult
from .runner import LocalRunner, RunOptions


@dataclass(frozen=True)
class MeasureOptions:
    """Options of the two stages: parallel builds, then guarded runs."""

    builder: BuildOptions = field(default_factory=BuildOptions)
    runner: RunOptions = field(default_factory=RunOptions)


@dataclass
class MeasureStats:
    """Cumulative wall seconds spent building and running, and candidates measured."""

    build_s: float = 0.0
    run_s: float = 0.0
    n_measured: int = 0

    @property
    def per_minute(self) -> float:
        """Candidates measured per minute of build and run time."""
        total = self.build_s + self.run_s
        return 60.0 * self.n_measured / total if total > 0 else 0.0


class Measurer:
    """Builds a batch in parallel, then runs it (the two never overlap, so builds do not disturb timings).

    A ``Measurer`` is a callable ``measure(inputs) -> results``; the tuning loop accepts any such callable.
    """

    def __init__(self, options: MeasureOptions | None = None):
        self.options = options or MeasureOptions()
        self.builder = LocalBuilder(self.options.builder)
        self.runner = LocalRunner(self.options.runner)
        self.stats = MeasureStats()

    def measure(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        """One result per input, in order; failed candidates are results with an error kind."""
        t0 = time.perf_counter()
        builds = self.builder.build(inputs)
        t1 = time.perf_counter()
        results = self.runner.run(inputs, builds)
        t2 = time.perf_counter()
        self.stats.build_s += t1 - t0
        self.stats.run_s += t2 - t1
        self.stats.n_measured += len(inputs)
        return results

    __call__ = measure

    def close(self) -> None:
        try:
            self.builder.close()
        finally:
            self.runner.close()

    def __enter__(self) -> Measurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

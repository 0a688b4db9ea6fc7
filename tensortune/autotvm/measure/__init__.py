"""Measurement: build candidates in parallel, run each in a guarded worker process."""
from .builder import BuildOptions, LocalBuilder
from .measure import MeasureOptions, MeasureStats, Measurer
from .result import BuildResult, ErrorKind, MeasureInput, MeasureResult
from .runner import LocalRunner, RunOptions

__all__ = [
    "BuildOptions",
    "BuildResult",
    "ErrorKind",
    "LocalBuilder",
    "LocalRunner",
    "MeasureInput",
    "MeasureOptions",
    "MeasureResult",
    "MeasureStats",
    "Measurer",
    "RunOptions",
]

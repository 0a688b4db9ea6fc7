"""Measurement: build candidates in parallel, run each in a guarded worker process."""
from .result import BuildResult, ErrorKind, MeasureInput, MeasureResult

__all__ = ["BuildResult", "ErrorKind", "MeasureInput", "MeasureResult"]

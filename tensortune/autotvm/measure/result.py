"""What a measurement produces: every candidate ends as a result with an error kind, never an exception."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...build import Library
    from ..task import Task


class ErrorKind(Enum):
    """Why a candidate has no valid timing (``NONE`` when it has one)."""

    NONE = 0
    INVALID_CONFIG = 1  # the template raised while instantiating the config (e.g. ScheduleError)
    COMPILE_ERROR = 2  # lowering, code generation or the C compiler failed
    RUNTIME_CRASH = 3  # the kernel crashed its worker process (segfault, abort) or returned an error
    WRONG_ANSWER = 4  # the kernel's output differs from the numpy reference
    BUILD_TIMEOUT = 5
    RUN_TIMEOUT = 6
    UNKNOWN = 7
    WORKER_LOST = 8  # on a cluster: the machines measuring it died, more often than the scheduler retries


@dataclass(frozen=True)
class MeasureInput:
    """One candidate: a task and the index of a config in its space."""

    task: Task
    config_index: int


@dataclass(frozen=True)
class BuildResult:
    """A compiled candidate (``library``, with its bytes: it can be run on another machine), or why it could
    not be built (``source``: the generated code, when there is some)."""

    library: Library | None
    error_kind: ErrorKind
    error_msg: str
    build_seconds: float
    source: str = field(default="", repr=False)

    @property
    def ok(self) -> bool:
        return self.error_kind is ErrorKind.NONE


@dataclass(frozen=True)
class MeasureResult:
    """Timings in seconds per call (one per repeat; empty unless ``error_kind`` is NONE).

    ``emulated``: the kernel ran under an emulator (a target of another architecture): its result was
    checked, but its timings are the emulator's and mean nothing for the target CPU.
    """

    costs: tuple[float, ...]
    error_kind: ErrorKind
    error_msg: str
    all_cost: float  # wall seconds spent on this candidate, build included
    timestamp: float = field(default_factory=time.time)
    emulated: bool = False
    worker: str = ""  # the cluster worker that measured it (its address); "" when measured by this process

    @property
    def ok(self) -> bool:
        return self.error_kind is ErrorKind.NONE

    @property
    def cost(self) -> float:
        """Seconds per call, the figure tuning goes by: the median of the repeats, so that one repeat slowed by
        another process (1 record in 12 of a ResNet-18 run on a shared 2-core host had a repeat 20% or more above
        the median, up to 2.4x) does not make a kernel look slower; infinity for a failed candidate."""
        return statistics.median(self.costs) if self.ok and self.costs else float("inf")

    @property
    def mean_cost(self) -> float:
        """Mean seconds per call over the repeats; infinity for a failed candidate."""
        return sum(self.costs) / len(self.costs) if self.ok and self.costs else float("inf")

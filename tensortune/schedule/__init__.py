"""Schedules: how the loops of each stage run, as a replayable list of steps."""
from .schedule import Axis, Schedule, StageHandle, create_schedule
from .steps import (Annotate, CacheRead, CacheWrite, ComputeAt, ComputeInline, ComputeRoot, Fuse, Prefetch, Reorder,
                    Split, Step, step_from_json, step_to_json)

__all__ = ["Annotate", "Axis", "CacheRead", "CacheWrite", "ComputeAt", "ComputeInline", "ComputeRoot",
           "Fuse", "Prefetch", "Reorder", "Schedule", "Split", "StageHandle", "Step", "create_schedule",
           "step_from_json", "step_to_json"]

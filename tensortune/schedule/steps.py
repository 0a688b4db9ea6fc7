"""Schedule steps: small frozen records that name stages and axes by string, so a schedule
can be logged as JSON and replayed exactly on a fresh declaration of the same operator."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any


class Annotation(Enum):
    """How a loop runs. GPU backends add block/thread bindings here."""

    SERIAL = "serial"
    UNROLL = "unroll"
    VECTORIZE = "vectorize"
    PARALLEL = "parallel"


@dataclass(frozen=True)
class Split:
    stage: str
    axis: str
    factor: int | None = None
    nparts: int | None = None


@dataclass(frozen=True)
class Fuse:
    stage: str
    outer: str
    inner: str


@dataclass(frozen=True)
class Reorder:
    stage: str
    axes: tuple[str, ...]


@dataclass(frozen=True)
class Annotate:
    stage: str
    axis: str
    annotation: Annotation


@dataclass(frozen=True)
class ComputeInline:
    stage: str


@dataclass(frozen=True)
class ComputeAt:
    stage: str
    target: str
    axis: str


@dataclass(frozen=True)
class ComputeRoot:
    stage: str


@dataclass(frozen=True)
class CacheWrite:
    stage: str
    scope: str = "local"


@dataclass(frozen=True)
class CacheRead:
    stage: str
    scope: str
    readers: tuple[str, ...]


Step = Split | Fuse | Reorder | Annotate | ComputeInline | ComputeAt | ComputeRoot | CacheWrite | CacheRead

STEP_TYPES: dict[str, type] = {t.__name__: t for t in
                               (Split, Fuse, Reorder, Annotate, ComputeInline, ComputeAt, ComputeRoot, CacheWrite,
                                CacheRead)}


def step_to_json(step: Step) -> dict[str, Any]:
    d = asdict(step)
    for k, v in d.items():
        if isinstance(v, Enum):
            d[k] = v.value
        elif isinstance(v, tuple):
            d[k] = list(v)
    return {"step": type(step).__name__, **d}


def step_from_json(d: dict[str, Any]) -> Step:
    from ..errors import ScheduleError

    d = dict(d)
    kind = d.pop("step", None)
    if kind not in STEP_TYPES:
        raise ScheduleError(str(d.get("stage", "?")), None, f"unknown schedule step {kind!r} in a record")
    cls = STEP_TYPES[kind]
    kw = {}
    for f in fields(cls):
        if f.name not in d:
            continue
        v = d[f.name]
        if f.name == "annotation":
            v = Annotation(v)
        elif isinstance(v, list):
            v = tuple(v)
        kw[f.name] = v
    return cls(**kw)

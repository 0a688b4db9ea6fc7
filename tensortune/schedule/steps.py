"""Schedule steps: small frozen records that name stages and axes by string, so a schedule
can be logged as JSON and replayed exactly on a fresh declaration of the same operator."""
from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any

from ..ir.nodes import ForKind


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
    """Run loop ``axis`` of ``stage`` as ``kind`` (unrolled, vectorized, parallel...)."""

    stage: str
    axis: str
    kind: ForKind


@dataclass(frozen=True)
class Bind:
    """Run loop ``axis`` of ``stage`` on a GPU block or thread index (``thread``: ``ForKind.BLOCK_X`` ...
    ``ForKind.THREAD_Z`` or ``ForKind.VTHREAD``)."""

    stage: str
    axis: str
    thread: ForKind


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


@dataclass(frozen=True)
class Prefetch:
    """While an iteration of loop ``loop`` of stage ``owner`` runs, fetch into the cache what the next iteration
    reads of ``tensor``, a share at the top of each iteration of loop ``at`` of ``stage`` (``owner`` itself, ``at``
    being ``loop`` or a loop inside it, or a stage computed inside ``loop``)."""

    stage: str
    tensor: str
    owner: str
    loop: str
    at: str


Step = (Split | Fuse | Reorder | Annotate | Bind | ComputeInline | ComputeAt | ComputeRoot | CacheWrite | CacheRead
        | Prefetch)

STEP_TYPES: dict[str, type] = {t.__name__: t for t in
                               (Split, Fuse, Reorder, Annotate, Bind, ComputeInline, ComputeAt, ComputeRoot, CacheWrite,
                                CacheRead, Prefetch)}


def step_to_json(step: Step) -> dict[str, Any]:
    d = asdict(step)
    for k, v in d.items():
        if isinstance(v, Enum):
            d[k] = v.value
        elif isinstance(v, tuple):
            d[k] = list(v)
    return {"step": type(step).__name__, **d}


def step_from_json(d: dict[str, Any]) -> Step:
    """Rebuild a step from ``step_to_json``'s output; a malformed record is a ``ScheduleError``."""
    from ..errors import ScheduleError

    if not isinstance(d, dict):
        raise ScheduleError("?", None, f"a schedule step record must be a JSON object, got {d!r}")
    d = dict(d)
    kind = d.pop("step", None)
    stage = str(d.get("stage", "?"))
    if kind not in STEP_TYPES:
        raise ScheduleError(stage, None, f"unknown schedule step {kind!r} in a record")
    cls = STEP_TYPES[kind]
    names = {f.name for f in fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise ScheduleError(stage, None, f"record of {kind} has unknown fields {sorted(unknown)}")
    kw = {}
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if f.name not in d:
            continue
        v = d[f.name]
        try:
            kw[f.name] = _field_value(hints[f.name], v)
        except (TypeError, ValueError) as e:
            raise ScheduleError(stage, None, f"record of {kind}: bad value {v!r} for '{f.name}' ({e})") from None
    try:
        return cls(**kw)
    except TypeError as e:
        raise ScheduleError(stage, None, f"record of {kind} is incomplete: {e}") from None


def _field_value(type_: Any, v: Any) -> Any:
    """``v`` (decoded JSON) as a value of the field type ``type_``."""
    if isinstance(type_, type) and issubclass(type_, Enum):
        return type_.parse(v) if hasattr(type_, "parse") else type_(v)
    if typing.get_origin(type_) is tuple:
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise TypeError("expected a list of names")
        return tuple(v)
    accepted = typing.get_args(type_) or (type_,)
    if v is None and type(None) in accepted:
        return None
    if int in accepted:
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError("expected an integer")
        return v
    if not isinstance(v, str):
        raise TypeError("expected a string")
    return v

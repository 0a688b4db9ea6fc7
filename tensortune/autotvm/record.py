"""Tuning logs: versioned JSON lines, one per measured config, appended so that a kill loses at most a line.

Each line holds everything needed to replay the measurement's config: format version, target, workload
key, template name and arguments, config index and its knob values, timings and error kind, and the
tensortune version that measured it. Optional fields, absent from older lines (they read as the default;
older readers ignore them): ``"emulated": true`` when the kernel ran under an emulator, so its timings mean
nothing; ``"worker"``, the cluster worker that measured it; ``"network"``, the fingerprint of the compiled
network the kernel was timed inside (``network.refine``: seconds per call of the kernel among the network's
other kernels, not alone), which only ``load_records(..., in_network=True)`` returns, so that searches, resumes
and ``best`` see kernels timed alone. ``load_records`` never raises on bad content: a corrupt line is skipped
with a ``SkippedLineWarning`` naming the file and line.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..version import __version__
from ..errors import TensortuneError
from ..runtime import Module
from ..target import Target
from ..schedule import Schedule
from ..ops import Operator
from .measure.result import ErrorKind, MeasureInput, MeasureResult
from .task import Task

RECORD_VERSION = 1

PathLike = str | os.PathLike


class RecordWarning(UserWarning):
    """Part of a log was left out (a corrupt line, a stale record, an unknown template) or it has nothing for a task."""


class SkippedLineWarning(RecordWarning):
    """One log line was skipped: corrupt, truncated, or of an unknown format version."""


class LogError(TensortuneError, ValueError):
    """A tuning log cannot be used: it holds no records, or none of a successful measurement."""


@dataclass(frozen=True)
class Record:
    """One measured config, as stored on one log line."""

    target: str
    workload: str
    template: str
    args: tuple
    config_index: int
    config: dict[str, Any]
    costs: tuple[float, ...]
    error_kind: ErrorKind
    error_msg: str
    all_cost: float
    timestamp: float
    version: str
    emulated: bool = False  # ran under an emulator: checked, but its timings mean nothing
    worker: str = ""  # the cluster worker that measured it; "" (and absent from the line) when measured locally
    network: str = ""  # fingerprint of the network it was timed inside; "" (and absent) when timed alone

    @property
    def ok(self) -> bool:
        return self.error_kind is ErrorKind.NONE

    @property
    def cost(self) -> float:
        """Seconds per call: the median of the repeats (``MeasureResult.cost``); infinity for a failed record."""
        return self.result().cost

    @property
    def mean_cost(self) -> float:
        """Mean seconds per call over the repeats; infinity for a failed record."""
        return self.result().mean_cost

    def task(self) -> Task:
        """Rebuild the task this record was measured for (the template must be in ``TEMPLATES``)."""
        from .templates import TEMPLATES

        if self.template not in TEMPLATES:
            raise KeyError(f"record names template {self.template!r}, which is not one of {sorted(TEMPLATES)}")
        return Task(TEMPLATES[self.template], self.args, Target.parse(self.target))

    def result(self) -> MeasureResult:
        return MeasureResult(self.costs, self.error_kind, self.error_msg, self.all_cost, self.timestamp, self.emulated,
                             self.worker)

    def matches(self, task: Task) -> bool:
        """Same workload and target as ``task``."""
        return self.workload == task.workload_key and self.target == str(task.target)

    @staticmethod
    def from_measurement(inp: MeasureInput, res: MeasureResult) -> Record:
        task: Task = inp.task  # type: ignore[assignment]
        return Record(
            target=str(task.target), workload=task.workload_key, template=task.name, args=tuple(task.args),
            config_index=inp.config_index, config=_jsonable(task.config(inp.config_index).to_json()),
            costs=tuple(res.costs), error_kind=res.error_kind, error_msg=res.error_msg, all_cost=res.all_cost,
            timestamp=res.timestamp, version=__version__, emulated=res.emulated, worker=res.worker,
        )

    def to_line(self) -> str:
        """The record as one JSON line (with the trailing newline)."""
        obj = {
            "v": RECORD_VERSION, "target": self.target, "workload": self.workload, "template": self.template,
            "args": list(self.args), "config_index": self.config_index, "config": self.config,
            "costs": list(self.costs), "error_kind": self.error_kind.name, "error_msg": self.error_msg,
            "all_cost": self.all_cost, "timestamp": self.timestamp, "version": self.version,
        }
        if self.emulated:  # optional: lines of kernels timed natively stay as they always were
            obj["emulated"] = True
        if self.worker:  # optional: logs of one machine stay as they were
            obj["worker"] = self.worker
        if self.network:
            obj["network"] = self.network
        return json.dumps(obj, separators=(",", ":")) + "\n"

    @staticmethod
    def from_json(obj: Any) -> Record:
        """Parse one decoded line; raises ``ValueError`` saying what is wrong."""
        if not isinstance(obj, dict):
            raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
        if obj.get("v") != RECORD_VERSION:
            raise ValueError(f"unknown format version {obj.get('v')!r}, expected {RECORD_VERSION}")
        f = _Fields(obj)
        kind_name = f.get("error_kind", str)
        if kind_name not in ErrorKind.__members__:
            raise ValueError(f"unknown error_kind {kind_name!r}")
        costs = f.get("costs", list)
        if not all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in costs):
            raise ValueError("field 'costs' must be a list of numbers")
        index = f.get("config_index", int)
        if index < 0:
            raise ValueError(f"negative config_index {index}")
        return Record(
            target=f.get("target", str), workload=f.get("workload", str), template=f.get("template", str),
            args=tuple(f.get("args", list)), config_index=index, config=f.get("config", dict),
            costs=tuple(float(c) for c in costs), error_kind=ErrorKind[kind_name],
            error_msg=f.get("error_msg", str), all_cost=float(f.get("all_cost", (int, float))),
            timestamp=float(f.get("timestamp", (int, float))), version=f.get("version", str),
            emulated=f.optional("emulated", bool, False), worker=f.optional("worker", str, ""),
            network=f.optional("network", str, ""),
        )


class _Fields:
    """Typed access to the fields of a decoded line."""

    def __init__(self, obj: dict):
        self.obj = obj

    def get(self, name: str, kind: type | tuple[type, ...]) -> Any:
        if name not in self.obj:
            raise ValueError(f"missing field {name!r}")
        value = self.obj[name]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise ValueError(f"field {name!r} has the wrong type ({type(value).__name__})")
        return value

    def optional(self, name: str, kind: type, default: Any) -> Any:
        """A field added after format version 1 was defined: ``default`` where a line lacks it."""
        return self.get(name, kind) if name in self.obj else default


def _jsonable(value: Any) -> Any:
    """``value`` as it reads back from JSON (tuples become lists), so stored and fresh configs compare equal."""
    return json.loads(json.dumps(value))


# ------------------------------------------------------------------------- writing and reading

def append_records(path: PathLike, pairs: Iterable[tuple[MeasureInput, MeasureResult]]) -> int:
    """Append one line per ``(input, result)`` pair; returns the number written.

    Each line goes out in one ``os.write`` on an ``O_APPEND`` descriptor and the batch is fsynced at
    the end, so a kill at any moment leaves at most a truncated last line. If the file ends in such a
    fragment, a newline is written first so that new lines are not glued to it.
    """
    return write_records(path, [Record.from_measurement(inp, res) for inp, res in pairs])


def write_records(path: PathLike, records: Iterable[Record]) -> int:
    """Append ``records`` to the log at ``path`` as ``append_records`` does; returns the number written."""
    lines = [r.to_line().encode() for r in records]
    if not lines:
        return 0
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            lines[0] = b"\n" + lines[0]
        for line in lines:
            _write_all(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(lines)


def _write_all(fd: int, data: bytes) -> None:
    # A regular file takes the whole buffer in one call; loop only in case the kernel writes less.
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def load_records(path: PathLike, in_network: bool = False) -> list[Record]:
    """The good records of a log, in file order: those of kernels timed alone, and with ``in_network`` also
    those timed inside a network (``Record.network``). Bad lines are skipped with a ``RecordWarning``."""
    lines = Path(path).read_bytes().split(b"\n")
    out = []
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = Record.from_json(json.loads(raw.decode("utf-8")))
        except UnicodeDecodeError:
            _skip(path, lineno, "not UTF-8 text")
        except json.JSONDecodeError as e:
            # Only the last line can lack its newline: that is a write cut short by a kill.
            _skip(path, lineno, f"invalid JSON: {e.msg}" + ("; truncated last line" if lineno == len(lines) else ""))
        except ValueError as e:
            _skip(path, lineno, str(e))
        else:
            if in_network or not record.network:
                out.append(record)
    return out


def _skip(path: PathLike, lineno: int, reason: str) -> None:
    warnings.warn(f"{path}:{lineno}: skipping corrupt record ({reason})", SkippedLineWarning, stacklevel=3)


def _records(path_or_records: PathLike | Sequence[Record]) -> Sequence[Record]:
    return load_records(path_or_records) if isinstance(path_or_records, (str, os.PathLike)) else path_or_records


# ------------------------------------------------------------------------- using a log

def pick_best(path_or_records: PathLike | Sequence[Record], target: Target | str | None = None,
              workload: str | None = None) -> dict[str, Record]:
    """The fastest successful record of each workload (optionally only for one target / workload)."""
    best: dict[str, Record] = {}
    for r in _records(path_or_records):
        if not r.ok or not math.isfinite(r.cost):
            continue
        if target is not None and r.target != str(target):
            continue
        if workload is not None and r.workload != workload:
            continue
        cur = best.get(r.workload)
        if cur is None or r.cost < cur.cost:
            best[r.workload] = r
    return best


@dataclass(frozen=True)
class BestRecord:
    """The fastest successful record of one workload and target in a log, with the task it rebuilds."""

    task: Task
    record: Record
    n_records: int  # records of this workload and target in the log
    n_ok: int  # ... of which measured successfully

    @property
    def gflops(self) -> float:
        return self.task.flops / self.record.cost / 1e9


def best_records(path: PathLike) -> list[BestRecord]:
    """The best record of each (workload, target) in the log at ``path``, in order of first appearance.

    Corrupt lines, workloads of templates this version lacks, and stale records are left out with a
    ``RecordWarning``. Raises ``LogError`` when the log holds no records or none successful.
    """
    records = load_records(path)
    if not records:
        raise LogError(f"{path} holds no tuning records; create one with 'tensortune tune ... --log {path}'")
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        groups.setdefault((r.workload, r.target), []).append(r)
    out = []
    for (key, target), recs in groups.items():
        try:
            task = recs[0].task()
        except KeyError as e:  # a template this version does not have
            warnings.warn(f"skipping workload {key}: {e.args[0]}", RecordWarning, stacklevel=2)
            continue
        best = pick_best(task_records(recs, task), target, key).get(key)
        if best is not None:
            out.append(BestRecord(task, best, len(recs), sum(r.ok for r in recs)))
    if not out:
        raise LogError(f"{path} has {len(records)} records but none of a successful measurement")
    return out


def task_records(records: Iterable[Record], task: Task) -> list[Record]:
    """The records measured for ``task`` (same workload and target), with indices into today's space.

    When the template changed since a record was measured (knobs gained or lost candidates), the
    record's stored knob values are looked up in today's space and its index is updated; a record
    whose config no longer exists there is stale: it is left out with a ``RecordWarning``.
    """
    space = task.space
    out, stale = [], 0
    for r in records:
        if not r.matches(task):
            continue
        if r.config_index >= len(space) or _jsonable(space.get(r.config_index).to_json()) != r.config:
            index = space.index_of(r.config)
            if index is None:
                stale += 1
                continue
            r = dataclasses.replace(r, config_index=index)
        out.append(r)
    if stale:
        warnings.warn(f"{stale} record(s) for {task.workload_key} on '{task.target}' no longer match the "
                      f"template's config space and were ignored (the template changed since they were "
                      f"measured; re-tune)", RecordWarning, stacklevel=3)
    return out


def top_records(records: Iterable[Record], task: Task, k: int) -> list[Record]:
    """The ``k`` fastest successful records of ``task`` (see ``task_records``), one per config, fastest first.

    A tuner's best is the maximum of many noisy measurements, so it is biased towards the luckiest; timing
    the few fastest again, longer (``benchmarking.compare.fastest_of``), tells them apart.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    out: dict[int, Record] = {}
    for r in sorted((r for r in task_records(records, task) if r.ok and math.isfinite(r.cost)),
                    key=lambda r: r.cost):
        out.setdefault(r.config_index, r)
        if len(out) == k:
            break
    return list(out.values())


def apply_best(path: PathLike, task: Task) -> tuple[Schedule, Operator]:
    """The schedule of the best config the log holds for ``task``, and its operator.

    When the log has no successful record for this workload and target, warns and returns the
    operator's default schedule instead. A missing log raises ``FileNotFoundError``.
    """
    best = pick_best(task_records(load_records(path), task), task.target, task.workload_key)
    rec = best.get(task.workload_key)
    if rec is None:
        warnings.warn(f"{path} has no successful record for workload {task.workload_key} on target "
                      f"'{task.target}'; using the operator's default schedule", RecordWarning, stacklevel=2)
        op = task.operator
        return op.default_schedule(task.target), op
    return task.instantiate(rec.config_index)


def build_best(path: PathLike, task: Task) -> Module:
    """Compile the best config of ``task`` from the log (or the default schedule, with a warning)."""
    from ..build import build

    sch, op = apply_best(path, task)
    return build(sch, list(op.args), task.target)

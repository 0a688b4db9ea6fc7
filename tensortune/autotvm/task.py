"""Templates and tasks.

A ``Template`` is a plain function ``fn(cfg, *args) -> (Schedule, Operator)`` plus a name: it
declares knobs on ``cfg`` and schedules the operator with the chosen values for ``cfg.target``.
A ``Task`` is a template with concrete arguments and a target; its workload key identifies it in
tuning logs.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import TensortuneError
from ..ops import Operator
from ..target import Target
from ..schedule import Schedule
from .space import ConfigEntity, ConfigSpace


class TaskError(TensortuneError, ValueError):
    """A task cannot be created (unknown template, bad arguments)."""


@dataclass(frozen=True)
class Template:
    """A schedule template: ``fn(cfg, *args)`` returns ``(schedule, operator)``."""

    name: str
    fn: Callable[..., tuple[Schedule, Operator]] = field(compare=False)
    doc: str = ""

    def __call__(self, cfg, *args) -> tuple[Schedule, Operator]:
        return self.fn(cfg, *args)


def template(name: str) -> Callable[[Callable], Template]:
    """Decorator: turn a function ``fn(cfg, *args)`` into a ``Template`` called ``name``."""

    def wrap(fn: Callable) -> Template:
        return Template(name, fn, (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else "")

    return wrap


@dataclass(frozen=True)
class Task:
    """A template applied to concrete arguments, for one target."""

    template: Template
    args: tuple
    target: Target

    def __post_init__(self):
        try:
            json.dumps(list(self.args))
        except TypeError as e:
            raise TaskError(f"task arguments must be JSON values (numbers, strings), got {self.args!r}") from e

    @property
    def name(self) -> str:
        return self.template.name

    @property
    def workload_key(self) -> str:
        """Stable identity of the workload (template and arguments), as stored in logs."""
        return json.dumps([self.template.name, list(self.args)], separators=(",", ":"))

    @property
    def space(self) -> ConfigSpace:
        return _space(self)

    @property
    def operator(self) -> Operator:
        return _space_and_op(self)[1]

    @property
    def flops(self) -> int:
        return self.operator.flops

    def config(self, index: int) -> ConfigEntity:
        return self.space.get(index)

    def instantiate(self, config: ConfigEntity | int) -> tuple[Schedule, Operator]:
        """Schedule the operator with one config for the task's target (may raise ScheduleError for
        an invalid config)."""
        if not isinstance(config, (int, ConfigEntity)):
            raise TaskError(f"config must be a config index or a ConfigEntity, got {config!r}"
                            + (" (a tuning run that measured no successful config has no best_index)"
                               if config is None else ""))
        space, index = (self.space, config) if isinstance(config, int) else (config.space, config.index)
        return self.template(ConfigEntity(space, index, self.target), *self.args)

    def make_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Random canonical inputs (as ``reference`` takes them; the same for every config)."""
        return self.operator.random_inputs(seed)

    def reference(self, canonical: list[np.ndarray], config: ConfigEntity | int | None = None) -> np.ndarray:
        """The numpy result for ``canonical`` inputs: the reference of the template's first config (every config
        computes the same); when ``config``'s kernel writes another layout (a packed template's channel blocks are
        knobs), its operator's reference in that layout."""
        op = self.operator
        if config is not None:
            mine = self.instantiate(config)[1]
            if tuple(mine.output.shape) != tuple(op.output.shape):
                op = mine
        return op.reference(*canonical)

    def kernel_inputs(self, config: ConfigEntity | int, canonical: list[np.ndarray]) -> list[np.ndarray]:
        """The arrays one config's kernel takes: canonical inputs with weights packed for that config.

        This runs outside any timed region (weight packing is done once in a deployed model).
        """
        _, op = self.instantiate(config)
        return op.prepare(*canonical)

    def __str__(self) -> str:
        return f"{self.template.name}{tuple(self.args)}"

    def __reduce__(self):
        # Pickle by reference to the template's module-level function, so worker processes rebuild it.
        return (_rebuild_task, (self.template.fn.__module__, self.template.fn.__qualname__, self.template.name,
                                self.args, str(self.target)))


def _rebuild_task(module: str, qualname: str, name: str, args: tuple, target: str) -> Task:
    import importlib

    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    tmpl = obj if isinstance(obj, Template) else Template(name, obj)
    return Task(tmpl, tuple(args), Target.parse(target))


@functools.lru_cache(maxsize=64)
def _space_and_op(task: Task) -> tuple[ConfigSpace, Operator]:
    space = ConfigSpace(task.target)
    _, op = task.template(space, *task.args)
    return space, op


def _space(task: Task) -> ConfigSpace:
    return _space_and_op(task)[0]

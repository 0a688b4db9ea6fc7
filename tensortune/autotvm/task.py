"""Templates and tasks.

A ``Template`` is a plain function ``fn(cfg, **workload fields) -> (Schedule, Operator)`` plus a name and what it
serves (workload kind, layout, targets, dtypes): it declares knobs on ``cfg`` and schedules the operator with the
chosen values for ``cfg.target``. Every template registers itself in the one table ``TEMPLATES``. A ``Task`` is a
template with a typed workload (``workload.py``) and a target; its workload key identifies it in tuning logs.
"""
from __future__ import annotations

import functools
import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import ShapeError, TensortuneError
from ..ops import Operator
from ..schedule import Schedule
from ..target import Target, TargetKind
from .space import ConfigEntity, ConfigSpace
from .workload import Arguments, DefaultKernel, Workload


class TaskError(TensortuneError, ValueError):
    """A task cannot be created (unknown template, bad arguments)."""


@dataclass(frozen=True)
class Template:
    """A schedule template: ``fn(cfg, **workload fields)`` returns ``(schedule, operator)``, and what it serves:
    the ``workload`` kind it computes (a ``workload.Workload`` subclass, or None for a template of positional
    arguments), the ``layout`` of its input and output (``NCHW``; ``NCHWc``: channel-blocked, as a network keeps
    activations; "" where that does not apply), the target kinds and dtypes it schedules for, and whether it is the
    ``default`` for its operator on those targets. ``network``: a network's layers of its workload kind are tuned
    with it (where it ``applies`` to the workload: Winograd to 3x3, stride-1 convolutions only; the first such
    template registered is a layer's direct task, the others its alternatives). A template of channel-blocked
    layouts says how a config blocks
    channels (``channel_blocks(config, workload, lanes) -> (input block, output block)``), and any template which of
    its knobs decide how a kernel shares work among threads (``config_kind(config)``, which ``network.refine``
    compares inside a network); the knobs' names stay the template's own. A template computes a workload only where its
    function takes every field the workload sets away from its default (``untaken``: a grouped ``Conv2d`` only
    ``conv2d_nchwc_packed``); a ``Task`` of one it does not compute is a ``TaskError``."""

    name: str
    fn: Callable[..., tuple[Schedule, Operator]] = field(compare=False)
    doc: str = field(default="", compare=False)
    workload: type | None = field(default=None, compare=False)
    layout: str = field(default="", compare=False)
    targets: frozenset[TargetKind] = field(default=frozenset({TargetKind.C}), compare=False)
    dtypes: frozenset[str] = field(default=frozenset({"float32"}), compare=False)
    default: bool = field(default=False, compare=False)
    network: bool = field(default=False, compare=False)
    applies: Callable[[Any], bool] = field(default=lambda workload: True, compare=False)
    channel_blocks: Callable[[Mapping, Any, int], tuple[int, int]] | None = field(default=None, compare=False)
    config_kind: Callable[[Mapping], tuple] = field(default=lambda config: (), compare=False)
    parse: Callable[[tuple], Any] | None = field(default=None, compare=False)

    def __call__(self, cfg, *args, **kwargs) -> tuple[Schedule, Operator]:
        return self.fn(cfg, *args, **kwargs)

    @property
    def operator(self) -> str:
        """The operator kind it computes (``conv2d``...), "" for a template of positional arguments."""
        return self.workload.operator if self.workload is not None else ""

    def workload_of(self, args) -> Any:
        """The workload of the positional ``args`` a log stores (``TaskError`` for ones the kind cannot take)."""
        if isinstance(args, (Workload, DefaultKernel, Arguments)):
            return args
        args = tuple(args)
        try:
            if self.parse is not None:
                return self.parse(args)
            return Arguments(args) if self.workload is None else self.workload.from_args(args)
        except ShapeError as e:
            raise ShapeError(f"template '{self.name}': {e}") from None
        except (KeyError, TypeError) as e:
            raise TaskError(f"template '{self.name}' cannot take the arguments {list(args)}: {e}") from None

    def untaken(self, workload) -> tuple[str, ...]:
        """The fields of ``workload`` set away from their defaults that the template's function has no parameter for
        (a convolution's ``groups`` for a template of ungrouped ones): a template computes a workload only when
        there are none."""
        if isinstance(workload, DefaultKernel):  # the layer's template's
            of = TEMPLATES.get(workload.of)
            return of.untaken(workload.layer) if of is not None else ()
        takes = _parameters(self.fn) if isinstance(workload, Workload) else None
        return () if takes is None else tuple(k for k in workload.kwargs() if k not in takes)

    def computes(self, workload) -> bool:
        """Whether the template computes ``workload``: it takes all its fields (``untaken``) and ``applies``."""
        return not self.untaken(workload) and self.applies(workload)

    def instantiate(self, cfg, workload, **extra) -> tuple[Schedule, Operator]:
        """The template's schedule and operator for ``workload`` with the knobs of ``cfg`` (``extra``: hooks such
        as a network's ``declare``)."""
        return workload.call(self.fn, cfg, **extra)


@functools.cache
def _parameters(fn: Callable) -> frozenset[str] | None:
    """The names a function takes by keyword (None: any, it has ``**kwargs``)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params if p.kind is not inspect.Parameter.POSITIONAL_ONLY)


#: every template by name: the one table (filled by ``@template``; ``autotvm.templates`` imports them all)
TEMPLATES: dict[str, Template] = {}


def template(name: str, workload: type | None = None, layout: str = "", targets=(TargetKind.C,),
             dtypes=("float32",), default: bool = False, network: bool = False, applies=None, channel_blocks=None,
             config_kind=None, parse=None) -> Callable[[Callable], Template]:
    """Decorator: turn a function ``fn(cfg, **fields)`` into a ``Template`` called ``name`` and register it (see
    ``Template`` for the rest; a function registered again under its name replaces the earlier one)."""

    def wrap(fn: Callable) -> Template:
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        t = Template(name, fn, doc, workload, layout, frozenset(targets), frozenset(dtypes), default, network,
                     applies or (lambda workload: True), channel_blocks, config_kind or (lambda config: ()), parse)
        TEMPLATES[name] = t
        return t

    return wrap


@dataclass(frozen=True)
class Task:
    """A template applied to a workload, for one target. The workload may be given as the positional arguments a
    log stores (``Task(template, (1, 64, 56, 56, 64, 3, 1, 1), target)``); ``task.args`` is that form."""

    template: Template
    workload: Any
    target: Target

    def __post_init__(self):
        object.__setattr__(self, "workload", self.template.workload_of(self.workload))
        untaken = self.template.untaken(self.workload)
        if untaken:
            wl = self.workload
            layer = wl.layer if isinstance(wl, DefaultKernel) else wl
            fits = [t.name for t in TEMPLATES.values() if t.workload is type(layer) and not t.untaken(layer)]
            raise TaskError(f"template '{self.template.name}' does not compute {wl}: it takes no "
                            f"{', '.join(untaken)}" + (f"; templates that do: {', '.join(fits)}" if fits else ""))
        try:
            json.dumps(list(self.args))
        except TypeError as e:
            raise TaskError(f"task arguments must be JSON values (numbers, strings), got {self.args!r}") from e

    @property
    def args(self) -> tuple:
        """The workload's positional form (logs, workload keys)."""
        return self.workload.args()

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
        return self.template.instantiate(ConfigEntity(space, index, self.target), self.workload)

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
    tmpl = obj if isinstance(obj, Template) else TEMPLATES.get(name) or Template(name, obj)
    return Task(tmpl, tuple(args), Target.parse(target))


@functools.lru_cache(maxsize=64)
def _space_and_op(task: Task) -> tuple[ConfigSpace, Operator]:
    space = ConfigSpace(task.target)
    _, op = task.template.instantiate(space, task.workload)
    return space, op


def _space(task: Task) -> ConfigSpace:
    return _space_and_op(task)[0]

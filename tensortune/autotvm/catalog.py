"""Creating tuning tasks from operator names and shapes, or from the shipped workload tables.

Everything here is read from the template table (``task.TEMPLATES``: the operator kind, layout, targets and
default of each template) and from the workload kinds (``workload.OPERATORS``: their fields, with the names the
command line gives them).
"""
from __future__ import annotations

from dataclasses import fields

from .. import workloads
from ..target import Target, TargetKind
from .task import TEMPLATES, Task, TaskError
from . import templates  # noqa: F401 - importing the templates registers them
from .workload import OPERATORS as WORKLOADS

_DEFAULTS = {"N": 1, "stride": 1, "pad": 0}


def parameters(operator: str) -> tuple[str, ...]:
    """The shape parameters of an operator, in order, as the command line names them (``IC`` for ``C``...)."""
    kind = WORKLOADS[operator]
    names = {v: k for k, v in kind.parameters.items()}
    return tuple(names.get(f.name, f.name) for f in fields(kind)[:kind.always])


def options(operator: str) -> dict[str, int]:
    """The optional integer parameters of an operator (a convolution's ``groups``) with their defaults: given by
    name, they set the workload's field of that name."""
    kind = WORKLOADS[operator]
    return {f.name: f.default for f in fields(kind)[kind.always:] if f.type in ("int", int)}


#: operator -> (shape parameters in template-argument order, default CPU template)
OPERATORS: dict[str, tuple[tuple[str, ...], str]] = {
    op: (parameters(op), next(t.name for t in TEMPLATES.values() if t.workload is kind and t.default
                              and TargetKind.C in t.targets))
    for op, kind in WORKLOADS.items()}


def templates_of(operator: str) -> tuple[str, ...]:
    """The templates that compute ``operator``, in the table's order."""
    return tuple(t.name for t in TEMPLATES.values() if t.operator == operator)


def default_template(operator: str, target: Target) -> str:
    """The template ``tensortune tune OPERATOR`` uses for ``target`` when none is named."""
    for t in TEMPLATES.values():
        if t.operator == operator and t.default and target.kind in t.targets:
            return t.name
    fits = [n for n in templates_of(operator) if target.kind in TEMPLATES[n].targets]
    raise TaskError(f"no template computes '{operator}' on '{target}' by default; name one of {fits} "
                    f"(--template)" if fits else f"no template computes '{operator}' on '{target}'")


def alternatives(task: Task) -> list[Task]:
    """``task`` and the tasks of every other template for its target that computes its workload in the same layout
    (the same tensors in and out: a channel-blocked template is no alternative to an NCHW one, whose kernels
    include the layout transforms), in the table's order (the template-free one included)."""
    out = []
    for name in templates_of(task.template.operator):
        t = TEMPLATES[name]
        if name == task.name:
            out.append(task)
        elif task.target.kind in t.targets and t.layout == task.template.layout and t.computes(task.workload):
            try:
                out.append(Task(t, task.workload, task.target))
            except TaskError:
                continue
    return out


def operator_of(template: str) -> str | None:
    """The operator a template computes (``conv2d`` for ``conv2d_nchwc``), or None."""
    t = TEMPLATES.get(template)
    return t.operator or None if t is not None else None


def create_task(operator: str, shape: dict[str, int], template: str | None = None,
                target: Target | None = None) -> Task:
    """A task for ``operator`` (matmul, conv2d, depthwise_conv2d) with named shape parameters (and the optional
    ones, ``options``). With no ``template``: the operator's default for the target, or where that does not compute
    the workload (a grouped convolution), the first template for the target that does."""
    if operator not in WORKLOADS:
        raise TaskError(f"unknown operator '{operator}'; choose one of {sorted(WORKLOADS)}")
    names = parameters(operator)
    target = target or Target.host()
    named = template is not None
    template = template or default_template(operator, target)
    if template not in templates_of(operator):
        raise TaskError(f"template '{template}' does not compute {operator}; use one of {templates_of(operator)}")
    tmpl = TEMPLATES[template]
    if target.kind not in tmpl.targets:
        fits = [t for t in templates_of(operator) if target.kind in TEMPLATES[t].targets]
        gpu = TargetKind.CUDA in tmpl.targets
        raise TaskError(f"template '{template}' schedules for {'GPUs' if gpu else 'CPUs'}, "
                        f"but the target is '{target}'; for it use one of {fits}")
    optional = options(operator)
    unknown = set(shape) - set(names) - set(optional)
    if unknown:
        raise TaskError(f"{operator} has no shape parameter(s) {sorted(unknown)}; its parameters are "
                        f"{' '.join([*names, *optional])}")
    args = []
    for n in [*names, *optional]:
        if n in shape:
            v = shape[n]
        elif n in optional:
            continue
        elif n in _DEFAULTS:
            v = _DEFAULTS[n]
        else:
            raise TaskError(f"{operator} needs the shape parameter {n}= (parameters: {' '.join(names)})")
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if n == "pad" else 1):
            raise TaskError(f"shape parameter {n} must be a {'non-negative' if n == 'pad' else 'positive'} "
                            f"integer, got {v!r}")
        args.append(v)
    workload = WORKLOADS[operator](*args[:len(names)], **{n: shape[n] for n in optional if n in shape})
    if not named and tmpl.untaken(workload):
        tmpl = next((TEMPLATES[t] for t in templates_of(operator) if target.kind in TEMPLATES[t].targets
                     and not TEMPLATES[t].untaken(workload)), tmpl)
    return Task(tmpl, workload, target)


def task_from_workload(key: str, template: str | None = None, target: Target | None = None) -> Task:
    """A task for a shipped workload such as ``resnet18:C6`` or ``mobilenet:D3`` (batch 1)."""
    row = workloads.get(key)
    table = key.partition(":")[0]
    if table == "resnet18":
        shape = {"IC": row["ic"], "OC": row["oc"], "H": row["h"], "W": row["w"], "K": row["k"],
                 "stride": row["stride"], "pad": row["pad"]}
        return create_task("conv2d", shape, template, target)
    shape = {"C": row["c"], "H": row["h"], "W": row["w"], "K": row["k"], "stride": row["stride"], "pad": row["pad"]}
    return create_task("depthwise_conv2d", shape, template, target)


class WorkloadCatalog:
    """The shipped workloads, looked up backwards: which one (``resnet18:C6``) has a task's operator and shape.

    The tables are read on the first lookup and kept by this object; make one where names are needed
    (a command, a report) and drop it with its user. Any template of an operator matches, and so does
    any target: a workload is an operator and a shape.
    """

    def __init__(self) -> None:
        self._names: dict[tuple[str | None, tuple], str] | None = None

    def name_of(self, task: Task) -> str | None:
        """The shipped workload with the task's operator and shape (first table wins), or None."""
        return self._by_shape().get(_shape_key(task))

    def label(self, task: Task) -> str:
        """``resnet18:C6 conv2d_nchw_spatial_pack(...)``, or just the task when no workload matches."""
        name = self.name_of(task)
        return f"{name} {task}" if name else str(task)

    def matches(self, task: Task, key: str) -> bool:
        """Whether ``key`` names the task: its workload key, ``str(task)`` or its shipped workload name."""
        return key in (task.workload_key, str(task), self.name_of(task))

    def _by_shape(self) -> dict[tuple[str | None, tuple], str]:
        if self._names is None:
            names: dict[tuple[str | None, tuple], str] = {}
            for table in workloads.TABLES:
                for row in workloads.load(table):
                    key = f"{table}:{row}"
                    names.setdefault(_shape_key(task_from_workload(key)), key)
            self._names = names
        return self._names


def _shape_key(task: Task) -> tuple[str | None, tuple]:
    return operator_of(task.name), tuple(task.args)

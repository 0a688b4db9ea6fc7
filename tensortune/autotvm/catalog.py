"""Creating tuning tasks from operator names and shapes, or from the shipped workload tables."""
from __future__ import annotations

from .. import workloads
from ..target import Target
from .task import Task, TaskError
from .templates import TEMPLATES

#: operator -> (shape parameters in template-argument order, default template)
OPERATORS: dict[str, tuple[tuple[str, ...], str]] = {
    "matmul": (("M", "N", "K"), "matmul"),
    "conv2d": (("N", "IC", "H", "W", "OC", "K", "stride", "pad"), "conv2d_nchw_spatial_pack"),
    "depthwise_conv2d": (("N", "C", "H", "W", "K", "stride", "pad"), "depthwise_conv2d_nchwc"),
}
_DEFAULTS = {"N": 1, "stride": 1, "pad": 0}
#: templates that may serve each operator
OPERATOR_TEMPLATES = {
    "matmul": ("matmul",),
    "conv2d": ("conv2d_nchw_spatial_pack", "conv2d_nchwc", "conv2d_nchwc_packed"),
    "depthwise_conv2d": ("depthwise_conv2d_nchwc",),
}


def operator_of(template: str) -> str | None:
    """The operator a template computes (``conv2d`` for ``conv2d_nchwc``), or None."""
    return next((op for op, names in OPERATOR_TEMPLATES.items() if template in names), None)


def create_task(operator: str, shape: dict[str, int], template: str | None = None,
                target: Target | None = None) -> Task:
    """A task for ``operator`` (matmul, conv2d, depthwise_conv2d) with named shape parameters."""
    if operator not in OPERATORS:
        raise TaskError(f"unknown operator '{operator}'; choose one of {sorted(OPERATORS)}")
    names, default = OPERATORS[operator]
    template = template or default
    if template not in OPERATOR_TEMPLATES[operator]:
        raise TaskError(f"template '{template}' does not compute {operator}; use one of "
                        f"{OPERATOR_TEMPLATES[operator]}")
    unknown = set(shape) - set(names)
    if unknown:
        raise TaskError(f"{operator} has no shape parameter(s) {sorted(unknown)}; its parameters are "
                        f"{' '.join(names)}")
    args = []
    for n in names:
        if n in shape:
            v = shape[n]
        elif n in _DEFAULTS:
            v = _DEFAULTS[n]
        else:
            raise TaskError(f"{operator} needs the shape parameter {n}= (parameters: {' '.join(names)})")
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if n == "pad" else 1):
            raise TaskError(f"shape parameter {n} must be a {'non-negative' if n == 'pad' else 'positive'} "
                            f"integer, got {v!r}")
        args.append(v)
    return Task(TEMPLATES[template], tuple(args), target or Target.host())


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

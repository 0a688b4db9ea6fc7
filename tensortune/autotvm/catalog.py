"""Creating tuning tasks from operator names and shapes, or from the shipped workload tables."""
from __future__ import annotations

from .. import workloads
from ..target import Target, TargetKind
from .task import Task, TaskError
from .templates import GPU_TEMPLATES, TEMPLATES

#: operator -> (shape parameters in template-argument order, default template)
OPERATORS: dict[str, tuple[tuple[str, ...], str]] = {
    "matmul": (("M", "N", "K"), "matmul"),
    "conv2d": (("N", "IC", "H", "W", "OC", "K", "stride", "pad"), "conv2d_nchw_spatial_pack"),
    "depthwise_conv2d": (("N", "C", "H", "W", "K", "stride", "pad"), "depthwise_conv2d_nchwc"),
}
_DEFAULTS = {"N": 1, "stride": 1, "pad": 0}
#: operator -> its default template for a GPU (``cuda``) target
GPU_DEFAULT_TEMPLATES = {"matmul": "matmul_cuda", "conv2d": "conv2d_nchw_cuda",
                         "depthwise_conv2d": "depthwise_conv2d_nchw_cuda"}
#: templates that may serve each operator
OPERATOR_TEMPLATES = {
    "matmul": ("matmul", "matmul_cuda"),
    # the Winograd templates compute only 3x3, stride-1 convolutions (a ShapeError for others)
    "conv2d": ("conv2d_nchw_spatial_pack", "conv2d_nchwc", "conv2d_winograd_nchw", "conv2d_nchwc_packed",
               "conv2d_winograd_nchwc_packed", "conv2d_nchw_cuda"),
    "depthwise_conv2d": ("depthwise_conv2d_nchwc", "depthwise_conv2d_nchwc_packed", "depthwise_conv2d_nchw_cuda"),
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
    target = target or Target.host()
    gpu = target.kind is TargetKind.CUDA
    template = template or (GPU_DEFAULT_TEMPLATES[operator] if gpu else default)
    if template not in OPERATOR_TEMPLATES[operator]:
        raise TaskError(f"template '{template}' does not compute {operator}; use one of "
                        f"{OPERATOR_TEMPLATES[operator]}")
    if (template in GPU_TEMPLATES) != gpu:
        fits = [t for t in OPERATOR_TEMPLATES[operator] if (t in GPU_TEMPLATES) == gpu]
        raise TaskError(f"template '{template}' schedules for {'GPUs' if template in GPU_TEMPLATES else 'CPUs'}, "
                        f"but the target is '{target}'; for it use one of {fits}")
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
    return Task(TEMPLATES[template], tuple(args), target)


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

"""Typed workloads: what a tuning task computes, as a frozen object with named fields.

Each operator kind a template serves has a ``Workload`` subclass (``Matmul``, ``Conv2d``, ``DepthwiseConv2d``; a
layer's untuned kernel measured as a task of its own is a ``DefaultKernel`` of another workload). Its fields are the
shape, strides, padding and dtype (and a matrix product's fused epilogue: ``bias``, ``relu``), in the order of the
template functions' parameters, which receive them by name. ``args()`` is the positional form tuning logs store
(``[template, args]``): the leading fields always, the optional ones only up to the last that differs from its
default, so that a float32 workload keeps the key it had before workloads were typed and old logs still match.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping

from ..dtype import DType
from ..errors import DTypeError, ShapeError


@dataclass(frozen=True)
class Workload:
    """Base of the workload kinds (see the module docstring). ``operator`` names the kind (``tensortune tune
    OPERATOR``); ``always``: how many leading fields every ``args()`` holds; ``parameters``: the names the command
    line gives the fields (default: their own)."""

    operator: ClassVar[str] = ""
    always: ClassVar[int] = 0
    parameters: ClassVar[Mapping[str, str]] = {}

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(v, int) or isinstance(v, bool)):
                raise ShapeError(f"{self.operator}: {self._name(f.name)} must be an integer, got {v!r}")
        if hasattr(self, "dtype"):
            try:
                DType.of(self.dtype)
            except DTypeError as e:
                raise ShapeError(f"{self.operator}: {e}") from None

    @classmethod
    def _name(cls, field: str) -> str:
        return next((k for k, v in cls.parameters.items() if v == field), field)

    def args(self) -> tuple:
        """The positional form of logs and workload keys (see the module docstring)."""
        fs = fields(self)
        values = [getattr(self, f.name) for f in fs]
        last = max([k for k, f in enumerate(fs) if k < self.always or values[k] != f.default], default=-1)
        return tuple(_jsonable(v) for v in values[:last + 1])

    def kwargs(self) -> dict[str, Any]:
        """The fields by name, as template functions take them (the optional ones where they are not default)."""
        names = [f.name for f in fields(self)][:len(self.args())]
        return {n: getattr(self, n) for n in names}

    def call(self, fn, cfg, **extra):
        """``fn(cfg, field=value..., **extra)``: a template function of this workload kind."""
        return fn(cfg, **self.kwargs(), **extra)

    @classmethod
    def from_args(cls, args) -> "Workload":
        """The workload of a log's positional ``args``; a ``ShapeError`` naming the fields for a wrong count."""
        names = [f.name for f in fields(cls)]
        if not cls.always <= len(args) <= len(names):
            raise ShapeError(f"a {cls.operator} workload takes {cls.always} to {len(names)} arguments "
                             f"({', '.join(names)}), got {len(args)}: {list(args)}")
        return cls(*args)

    def __str__(self) -> str:
        return f"{self.operator}({', '.join(f'{self._name(k)}={v}' for k, v in self.kwargs().items())})"


def _jsonable(v: Any) -> Any:
    return v.args() if isinstance(v, Workload) else v


@dataclass(frozen=True)
class Matmul(Workload):
    """``C[M, N] = A[M, K] @ B[K, N]``, then the bias and ReLU when asked for (``transpose_b``: B stored ``[N, K]``)."""

    operator = "matmul"
    always = 3
    M: int
    N: int
    K: int
    dtype: str = "float32"
    bias: bool = False
    relu: bool = False
    transpose_b: bool = False


@dataclass(frozen=True)
class Conv2d(Workload):
    """Convolution of ``N`` images of ``C`` channels, ``H x W``, by ``O`` filters of ``K x K``: square kernel, equal
    strides and padding on every side; in ``groups`` groups (each output channel of a group reads that group's
    ``C / groups`` input channels; a layer of groups narrower than a channel block is measured as the fewer, wider
    groups it runs as, ``operators.conv_kernels.merged_groups``)."""

    operator = "conv2d"
    always = 8
    parameters = {"N": "N", "IC": "C", "H": "H", "W": "W", "OC": "O", "K": "K", "stride": "stride", "pad": "pad"}
    N: int
    C: int
    H: int
    W: int
    O: int  # noqa: E741 - the output channels, as the templates name them
    K: int
    stride: int = 1
    pad: int = 0
    dtype: str = "float32"
    groups: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.groups < 1 or self.C % self.groups or self.O % self.groups:
            raise ShapeError(f"{self.operator}: groups={self.groups} must be positive and divide both IC={self.C} "
                             f"and OC={self.O}")


@dataclass(frozen=True)
class DepthwiseConv2d(Workload):
    """Depthwise convolution: each of the ``C`` channels by its own ``K x K`` filter."""

    operator = "depthwise_conv2d"
    always = 7
    N: int
    C: int
    H: int
    W: int
    K: int
    stride: int = 1
    pad: int = 0
    dtype: str = "float32"


@dataclass(frozen=True)
class BatchMatmul(Workload):
    """``C[b] = A[b] @ B[b]`` for ``batch`` products of ``[M, K]`` by ``[K, N]`` (``transpose_b``: B stored
    ``[batch, N, K]``), as attention computes its scores and its weighted values."""

    operator = "batch_matmul"
    always = 4
    batch: int
    M: int
    N: int
    K: int
    dtype: str = "float32"
    transpose_b: bool = False


@dataclass(frozen=True)
class ConvTranspose2d(Workload):
    """Transposed convolution of ``N`` images of ``C`` channels, ``H x W``, into ``O`` channels by ``K x K``
    filters: equal strides and padding on every side, ``output_padding`` more rows and columns at the end."""

    operator = "conv2d_transpose"
    always = 8
    parameters = {"N": "N", "IC": "C", "H": "H", "W": "W", "OC": "O", "K": "K", "stride": "stride", "pad": "pad"}
    N: int
    C: int
    H: int
    W: int
    O: int  # noqa: E741
    K: int
    stride: int = 1
    pad: int = 0
    dtype: str = "float32"
    output_padding: int = 0


@dataclass(frozen=True)
class Softmax(Workload):
    """Softmax along each of ``M`` rows of ``N`` (attention's ``[heads, sequence, sequence]`` as ``heads x
    sequence`` rows)."""

    operator = "softmax"
    always = 2
    M: int
    N: int
    dtype: str = "float32"


@dataclass(frozen=True)
class LayerNorm(Workload):
    """Layer normalization along each of ``M`` rows of ``N``, with a scale and a shift of ``N`` (epsilon 1e-5)."""

    operator = "layer_norm"
    always = 2
    M: int
    N: int
    dtype: str = "float32"


@dataclass(frozen=True)
class Expression(Workload):
    """A computation given as its tensor-expression DAG (``te.serialize.dumps`` of its arguments: inputs, then the
    output), as a network's fused node computes it; ``schedule``: the JSON steps of its default schedule ("" for
    none). No template is written for it: the template-free search schedules it (``auto_expression``)."""

    operator = "expression"
    always = 2
    name: str
    dag: str
    schedule: str = ""

    @property
    def digest(self) -> str:
        """A short hash of the DAG: two nodes with equal digests compute the same."""
        return hashlib.sha1(self.dag.encode()).hexdigest()[:10]

    def __str__(self) -> str:
        return f"expression({self.name}, {self.digest})"


#: workload kinds by operator (``tensortune tune OPERATOR``)
OPERATORS: dict[str, type[Workload]] = {w.operator: w for w in (Matmul, Conv2d, DepthwiseConv2d, BatchMatmul,
                                                                 ConvTranspose2d, Softmax, LayerNorm)}


@dataclass(frozen=True)
class DefaultKernel:
    """The untuned kernel of a network layer whose task is template ``of`` on ``layer``: a workload of its own
    (positional form: the template's name, then the layer's arguments)."""

    of: str
    layer: Workload
    operator: ClassVar[str] = "default kernel"

    def args(self) -> tuple:
        return (self.of, *self.layer.args())

    def call(self, fn, cfg, **extra):
        return fn(cfg, self.of, self.layer, **extra)

    def __str__(self) -> str:
        return f"default kernel of {self.of} {self.layer}"


@dataclass(frozen=True)
class Arguments:
    """The workload of a template registered without a workload kind (a user's own template): its positional
    arguments as given."""

    values: tuple
    operator: ClassVar[str] = ""

    def args(self) -> tuple:
        return self.values

    def call(self, fn, cfg, **extra):
        return fn(cfg, *self.values, **extra)

    def __str__(self) -> str:
        return str(self.values)


"""Tensors and the operations that define them: placeholders (inputs) and computes."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Sequence

from ..dtype import DType
from ..errors import ExprError, ShapeError
from .expr import AxisKind, Expr, ExprLike, IterVar, Reduce, TensorRead, Var, as_expr, walk


@dataclass(frozen=True, eq=False)
class PlaceholderOp:
    """An input tensor supplied by the caller."""

    name: str


@dataclass(frozen=True, eq=False)
class ComputeOp:
    """``out[axes] = body``; ``body`` may be a top-level ``Reduce``. ``scan_axis``: a recurrence along that axis
    (``scan``), whose body reads the tensor itself."""

    name: str
    axes: tuple[IterVar, ...]
    body: Expr
    scan_axis: int | None = None

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    def inputs(self) -> list["Tensor"]:
        """Tensors read by the body, in order of first appearance (a scan's reads of itself are not inputs)."""
        seen: dict[int, Tensor] = {}
        for n in walk(self.body):
            if isinstance(n, TensorRead) and id(n.tensor) not in seen and n.tensor.name != self.name:
                seen[id(n.tensor)] = n.tensor
        return list(seen.values())


@dataclass(frozen=True, eq=False)
class Tensor:
    """A multi-dimensional array of ``dtype`` defined by ``op``. Index it to read an element."""

    shape: tuple[int, ...]
    dtype: DType
    op: PlaceholderOp | ComputeOp

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> TensorRead:
        if not isinstance(indices, tuple):
            indices = (indices,)
        return TensorRead(self, tuple(as_expr(i) for i in indices))

    def __repr__(self) -> str:
        return f"Tensor({self.name}, shape={self.shape}, dtype={self.dtype})"


def _check_shape(shape: Sequence[int], name: str) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    shape = tuple(shape)
    if not shape or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise ShapeError(f"tensor '{name}' needs a non-empty shape of positive integers, got {shape!r}")
    return shape


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not name or not (name[0].isalpha() or name[0] == "_") or \
            not all(c.isalnum() or c in "_." for c in name):
        raise ExprError(f"invalid tensor name {name!r}: use letters, digits, '_' and '.', starting with a letter")
    return name


def placeholder(shape: Sequence[int], dtype: DType | str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor of static ``shape``."""
    dt = DType.of(dtype)
    return Tensor(_check_shape(shape, name), dt, PlaceholderOp(_check_name(name)))


def compute(shape: Sequence[int], fcompute: Callable[..., ExprLike], name: str = "compute") -> Tensor:
    """Define ``out[i, j, ...] = fcompute(i, j, ...)``; axis names come from fcompute's parameters."""
    shape = _check_shape(shape, name)
    _check_name(name)
    params = list(inspect.signature(fcompute).parameters.values())
    if len(params) == 1 and params[0].kind is inspect.Parameter.VAR_POSITIONAL:
        names = [f"i{d}" for d in range(len(shape))]
    elif len(params) != len(shape):
        raise ShapeError(
            f"compute '{name}' has {len(shape)} dimensions {shape} but its function takes "
            f"{len(params)} indices ({', '.join(p.name for p in params)})"
        )
    else:
        names = [p.name for p in params]
    axes = tuple(IterVar(Var(n), e, AxisKind.SPATIAL) for n, e in zip(names, shape))
    body = as_expr(fcompute(*axes))
    for n in walk(body):
        if isinstance(n, Reduce) and n is not body:
            raise ExprError(
                f"compute '{name}': a reduction must be the whole body, not part of it; "
                "compute the reduction into its own tensor and combine in a second compute"
            )
    _check_axes(name, axes, body)
    return Tensor(shape, body.dtype, ComputeOp(name, axes, body))


def scan(shape: Sequence[int], dtype: DType | str, axis: int, fcompute: Callable[..., ExprLike],
         name: str = "scan") -> Tensor:
    """A recurrence along ``axis``: ``out[i, j, ...] = fcompute(out, i, j, ...)``, whose body may read ``out`` itself
    at its own index but for an earlier position along ``axis`` (a cumulative sum reads ``out[..., i - 1, ...]``;
    guard the first position with a ``select``, which evaluates only the branch it picks in generated code). The
    loops of ``axis`` run in increasing order: lowering refuses a schedule that runs them in parallel, as vectors or
    on GPU threads, and the stage stays at the root. The other axes are free: a cumulative sum is one pass over its
    input, parallel across its lines."""
    shape = _check_shape(shape, name)
    _check_name(name)
    dt = DType.of(dtype)
    if not 0 <= axis < len(shape):
        raise ShapeError(f"scan '{name}': axis {axis} is out of range for shape {shape}")
    own = Tensor(shape, dt, PlaceholderOp(name))
    axes = tuple(IterVar(Var(f"i{d}"), e, AxisKind.SPATIAL) for d, e in enumerate(shape))
    body = as_expr(fcompute(own, *axes))
    if body.dtype is not dt:
        raise ExprError(f"scan '{name}': the body is {body.dtype}, the tensor {dt}; cast the body")
    for n in walk(body):
        if isinstance(n, Reduce):
            raise ExprError(f"scan '{name}': a scan's body cannot reduce; reduce in a stage of its own")
        if isinstance(n, TensorRead) and n.tensor.name == name and (n.tensor is not own or any(
                i is not a.var for d, (i, a) in enumerate(zip(n.indices, axes)) if d != axis)):
            raise ExprError(f"scan '{name}': it may read itself only at its own index along every axis but {axis} "
                            f"(read {n})")
    _check_axes(name, axes, body)
    return Tensor(shape, dt, ComputeOp(name, axes, body, axis))


def _check_axes(name: str, axes: tuple[IterVar, ...], body: Expr) -> None:
    allowed = {a.var for a in axes}
    if isinstance(body, Reduce):
        allowed |= {a.var for a in body.axes}
        if len({a.name for a in body.axes} | {a.name for a in axes}) != len(body.axes) + len(axes):
            raise ExprError(f"compute '{name}': axis names must be unique, got "
                            f"{[a.name for a in axes + body.axes]}")
    for n in walk(body):
        if isinstance(n, Var) and n not in allowed:
            raise ExprError(
                f"compute '{name}' uses the variable '{n.name}' that is neither one of its axes nor one of "
                "its reduce axes (a reduce axis must be listed in the reduction that uses it)"
            )

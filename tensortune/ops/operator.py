"""An operator instance: its tensors (and their roles), FLOP count, numpy reference and default schedule."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Callable, Mapping

import numpy as np

from ..dtype import DType
from ..errors import TensortuneError
from ..target import Target
from ..schedule import Schedule
from ..te import Tensor


class OperatorError(TensortuneError, LookupError):
    """An operator's parts are declared wrongly, or it is asked for a part (a tensor with a role) it lacks."""


class Part(Enum):
    """The role of an intermediate tensor that schedules look up by handle: ``s[op.part(Part.ACCUMULATOR)]``."""

    PADDED_INPUT = "padded input"  # the input zero-padded in its own layout ("data_pad"); absent when pad is 0
    PACKED_INPUT = "packed input"  # the input padded and repacked into channel blocks ("data_pack")
    PACKED_WEIGHT = "packed weight"  # weights repacked inside the kernel into panels ("B_packed")
    ACCUMULATOR = "accumulator"  # the reduction; the output itself when nothing follows it


@dataclass(frozen=True)
class Operator:
    """A declared operator. ``args`` are the kernel's arrays: inputs, then the output.

    Inputs come in a *canonical* form (e.g. weights in OIHW) that ``reference`` takes and
    ``random_inputs`` makes. An operator whose kernel wants some inputs in another layout (packed
    weights) has ``prepare``, which turns canonical inputs into kernel inputs once, outside any
    timed region, as a deployed model would pre-pack its constant weights.
    """

    name: str
    inputs: tuple[Tensor, ...]
    output: Tensor
    flops: int
    reference: Callable[..., np.ndarray] = field(repr=False)
    _schedule: Callable[["Operator", Target], Schedule] = field(repr=False)
    prepare_fn: Callable[..., list[np.ndarray]] | None = field(default=None, repr=False)
    canonical_shapes: tuple[tuple[int, ...], ...] | None = None
    # Both are tensors of the output's graph (so they take no part in equality): the tensors a schedule
    # needs by role, and the elementwise stages between the accumulator and the output (a bias add
    # before a ReLU output), which schedules inline into the output.
    parts: Mapping[Part, Tensor] = field(default_factory=dict, compare=False, repr=False)
    epilogue: tuple[Tensor, ...] = field(default=(), compare=False, repr=False)
    #: the range of ``random_inputs``' floats (positive for an expression that may take a logarithm or a root)
    input_range: tuple[float, float] = (-1.0, 1.0)

    def __post_init__(self) -> None:
        for role, t in self.parts.items():
            if not isinstance(role, Part) or not isinstance(t, Tensor):
                raise OperatorError(f"operator '{self.name}': parts map a Part (such as Part.ACCUMULATOR) to a "
                                    f"Tensor, got {role!r}: {t!r}")
        object.__setattr__(self, "parts", MappingProxyType(dict(self.parts)))
        object.__setattr__(self, "epilogue", tuple(self.epilogue))

    @property
    def args(self) -> tuple[Tensor, ...]:
        return self.inputs + (self.output,)

    def part(self, role: Part) -> Tensor:
        """The tensor with ``role``; an ``OperatorError`` naming the parts there are if there is none."""
        if role not in self.parts:
            have = ", ".join(p.value for p in self.parts) or "none"
            raise OperatorError(f"operator '{self.name}' has no {role.value} (its parts: {have}); "
                                f"test `{role} in op.parts` before asking for an optional part")
        return self.parts[role]

    def default_schedule(self, target: Target | None = None) -> Schedule:
        """A reasonable hand-written schedule for ``target`` (default: this machine)."""
        return self._schedule(self, target or Target.host())

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Random canonical inputs (what ``reference`` and ``prepare`` take)."""
        rng = np.random.default_rng(seed)
        shapes = self.canonical_shapes or tuple(t.shape for t in self.inputs)
        out = []
        for t, shape in zip(self.inputs, shapes):
            if t.dtype.is_float:
                out.append(rng.uniform(*self.input_range, shape).astype(t.dtype.numpy))
            else:
                out.append(rng.integers(-8, 8, shape).astype(t.dtype.numpy))
        return out

    def prepare(self, *canonical: np.ndarray) -> list[np.ndarray]:
        """Kernel inputs from canonical ones (weight packing); the identity for most operators."""
        if self.prepare_fn is None:
            return list(canonical)
        return [np.ascontiguousarray(a) for a in self.prepare_fn(*canonical)]

    def empty_output(self) -> np.ndarray:
        return np.zeros(self.output.shape, self.output.dtype.numpy)


def check_output(out: np.ndarray, expected: np.ndarray) -> str | None:
    """None if a kernel's ``out`` matches the reference ``expected`` within the tolerance of its dtype
    (``DType.tolerance``), else what is wrong (NaN never matches)."""
    if out.shape != expected.shape:
        return f"wrong answer: output shape {out.shape}, expected {expected.shape}"
    tol = DType.of(expected.dtype).tolerance
    ok, allowed = tol.check(out, expected)
    if ok:
        return None
    worst = float(np.max(np.abs(out.astype(np.float64) - expected.astype(np.float64))))  # nan if any is nan
    return (f"wrong answer: output differs from the numpy reference: max abs error {worst:.3g} "
            f"(allowed {allowed:.3g} + {tol.rtol} * |expected|)")

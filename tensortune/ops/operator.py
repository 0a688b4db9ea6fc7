"""An operator instance: its tensors, FLOP count, numpy reference and default schedule."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..target import Target
from ..schedule import Schedule
from ..te import Tensor


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

    @property
    def args(self) -> tuple[Tensor, ...]:
        return self.inputs + (self.output,)

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
                out.append(rng.uniform(-1, 1, shape).astype(t.dtype.numpy))
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


#: tolerance of every check against a numpy reference (``atol`` scaled by the largest |expected|)
RTOL = ATOL = 1e-3


def check_output(out: np.ndarray, expected: np.ndarray) -> str | None:
    """None if a kernel's ``out`` matches the reference ``expected``, else what is wrong (NaN never matches)."""
    if out.shape != expected.shape:
        return f"wrong answer: output shape {out.shape}, expected {expected.shape}"
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    if np.allclose(out, expected, rtol=RTOL, atol=ATOL * scale):
        return None
    worst = float(np.max(np.abs(out.astype(np.float64) - expected)))  # nan if any is nan
    return (f"wrong answer: output differs from the numpy reference: max abs error {worst:.3g} "
            f"(allowed {ATOL * scale:.3g} + {RTOL} * |expected|)")


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit``."""
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)

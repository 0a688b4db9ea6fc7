"""An operator instance: its tensors, FLOP count, numpy reference and default schedule."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..runtime import Target
from ..schedule import Schedule
from ..te import Tensor


@dataclass(frozen=True)
class Operator:
    """A declared operator. ``args`` are the kernel's arrays: inputs, then the output."""

    name: str
    inputs: tuple[Tensor, ...]
    output: Tensor
    flops: int
    reference: Callable[..., np.ndarray] = field(repr=False)
    _schedule: Callable[["Operator", Target], Schedule] = field(repr=False)

    @property
    def args(self) -> tuple[Tensor, ...]:
        return self.inputs + (self.output,)

    def default_schedule(self, target: Target | None = None) -> Schedule:
        """A reasonable hand-written schedule for ``target`` (default: this machine)."""
        return self._schedule(self, target or Target.host())

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        out = []
        for t in self.inputs:
            if t.dtype.is_float:
                out.append(rng.uniform(-1, 1, t.shape).astype(t.dtype.numpy))
            else:
                out.append(rng.integers(-8, 8, t.shape).astype(t.dtype.numpy))
        return out

    def empty_output(self) -> np.ndarray:
        return np.zeros(self.output.shape, self.output.dtype.numpy)


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit``."""
    return max(d for d in range(1, min(n, limit) + 1) if n % d == 0)

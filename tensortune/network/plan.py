"""The plan of a compiled network, as its backend emits it and its module runs it: kernel calls in order, each
argument in a ``Slot`` (an input, an output, a byte offset into the constant arena or into the workspace), the
kernels' functions and what they compute, and the sizes of the arena and the workspace."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from ..runtime import ArgSpec


class Place(Enum):
    INPUT = "input"
    OUTPUT = "output"
    CONSTANT = "constant"
    WORKSPACE = "workspace"


@dataclass(frozen=True)
class Slot:
    """Where a kernel argument lives: input or output number, or a byte offset into the constants or workspace."""

    place: Place
    offset: int


@dataclass(frozen=True)
class Call:
    """One step of the network: ``function(slots...)`` for graph node ``node``."""

    function: str
    node: str
    slots: tuple[Slot, ...]


@dataclass(frozen=True)
class KernelInfo:
    """What the manifest and ``tasks`` report about one kernel function."""

    function: str
    kind: str
    nodes: tuple[str, ...]
    flops: int
    template: str | None = None


@dataclass
class Program:
    """A network ready to be built: the source its backend emitted (every kernel and the entry point), the calls,
    and the memory they use."""

    name: str
    inputs: tuple[ArgSpec, ...]
    outputs: tuple[ArgSpec, ...]
    source: str = field(repr=False)
    calls: list[Call]
    constants: list[tuple[int, np.ndarray]] = field(repr=False)  # (offset, array) in the arena
    constants_bytes: int
    workspace_bytes: int
    kernels: list[KernelInfo]
    buffers_bytes: int = 0  # what the workspace buffers would take without sharing memory

    def constant_arena(self) -> np.ndarray:
        """The constants packed into one array of bytes (laid out at their offsets)."""
        arena = np.zeros(self.constants_bytes, np.uint8)
        for off, a in self.constants:
            raw = np.ascontiguousarray(a).view(np.uint8).reshape(-1)
            arena[off:off + raw.size] = raw
        return arena

"""Memory planning: intermediate buffers in one workspace, buffers whose lifetimes do not overlap sharing memory.

Each buffer lives from the step that writes it to the last step that reads it (both included, so a kernel's
output never overlaps its own inputs). Offsets are assigned greedily, largest buffer first, at the lowest
64-byte-aligned offset that overlaps no placed buffer alive at the same time (the "greedy by size" planner
of TFLite and TVM).
"""
from __future__ import annotations

from dataclasses import dataclass

ALIGN = 64


@dataclass(frozen=True)
class Buffer:
    """``size`` bytes alive from step ``first`` to step ``last`` (inclusive)."""

    name: str
    size: int
    first: int
    last: int

    def __post_init__(self) -> None:
        assert self.size >= 0 and 0 <= self.first <= self.last, self

    def overlaps_in_time(self, other: "Buffer") -> bool:
        return self.first <= other.last and other.first <= self.last


@dataclass(frozen=True)
class MemoryPlan:
    offsets: dict[str, int]
    total: int  # bytes of the workspace

    def check(self, buffers: list[Buffer]) -> None:
        """Assert that no two buffers alive at the same time share a byte."""
        for i, a in enumerate(buffers):
            for b in buffers[i + 1:]:
                if a.overlaps_in_time(b) and a.size and b.size:
                    oa, ob = self.offsets[a.name], self.offsets[b.name]
                    assert oa + a.size <= ob or ob + b.size <= oa, f"{a} and {b} overlap"


def align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def plan_memory(buffers: list[Buffer]) -> MemoryPlan:
    """Offsets of ``buffers`` in one workspace."""
    placed: list[tuple[int, Buffer]] = []
    offsets: dict[str, int] = {}
    total = 0
    for buf in sorted(buffers, key=lambda b: (-b.size, b.first, b.name)):
        size = align(buf.size)
        busy = sorted((off, off + align(b.size)) for off, b in placed if b.overlaps_in_time(buf))
        offset = 0
        for lo, hi in busy:
            if offset + size <= lo:
                break
            offset = max(offset, hi)
        offsets[buf.name] = offset
        placed.append((offset, buf))
        total = max(total, offset + size)
    return MemoryPlan(offsets, total)

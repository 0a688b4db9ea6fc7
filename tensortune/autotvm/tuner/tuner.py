"""The tuner interface: propose configs (``next_batch``), learn from their results (``update``).

A tuner never proposes a config twice: every index it returned from ``next_batch`` or saw in
``update`` (including history loaded from a log) is *visited*. Proposals are valid per the space's
filters. ``has_next`` is False exactly when every valid config is visited, and ``next_batch``
returns fewer configs than asked only when fewer remain.
"""
from __future__ import annotations

import random
from typing import Iterable, Sequence

from ..measure.result import MeasureInput, MeasureResult
from ..record import Record
from ..task import Task

_NONE: frozenset[int] = frozenset()


class Tuner:
    """Base class: bookkeeping of visited configs and of the best one; subclasses implement ``_propose``."""

    def __init__(self, task: Task, seed: int | None = None):
        self.task = task
        self.space = task.space
        self.rng = random.Random(seed)
        self.visited: set[int] = set()
        self.best_index: int | None = None
        self.best_flops = 0.0  # FLOP/s of the best config seen so far
        self._invalid: set[int] = set()  # never overlaps ``visited``
        self._cursor = 0  # every index below it is visited, invalid or in a batch being proposed

    # -- the interface --------------------------------------------------------
    def next_batch(self, batch_size: int) -> list[int]:
        """Up to ``batch_size`` valid config indices this tuner has never proposed or seen measured."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        batch = self._propose(batch_size)
        assert len(set(batch)) == len(batch) <= batch_size, "a tuner proposed a config twice in one batch"
        assert not self.visited.intersection(batch), "a tuner proposed an already visited config"
        self.visited.update(batch)
        return batch

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from measured configs (failed ones count as zero FLOP/s)."""
        for inp, res in zip(inputs, results, strict=True):
            self.visited.add(inp.config_index)
            self._invalid.discard(inp.config_index)
            flops = self.flops_of(res)
            if flops > self.best_flops:
                self.best_flops, self.best_index = flops, inp.config_index

    def has_next(self) -> bool:
        """Whether some valid config is still unvisited (exact; cheap because the cursor only moves on)."""
        size = len(self.space)
        while self._cursor < size and not self._is_fresh(self._cursor, _NONE):
            self._cursor += 1
        return self._cursor < size

    def load_history(self, records: Iterable[Record]) -> int:
        """Mark the records of this task (e.g. from a log being resumed) as measured and learn from them.

        Records of other workloads or targets, or with an index outside the space, are ignored.
        Returns the number of records used.
        """
        used = [r for r in records if r.matches(self.task) and r.config_index < len(self.space)]
        self.update([MeasureInput(self.task, r.config_index) for r in used], [r.result() for r in used])
        return len(used)

    def close(self) -> None:
        """Release what the tuner holds (worker processes); it can still be used afterwards."""

    def __enter__(self) -> Tuner:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- for subclasses -------------------------------------------------------
    def _propose(self, n: int) -> list[int]:
        raise NotImplementedError

    def flops_of(self, res: MeasureResult) -> float:
        """FLOP/s of a result; 0 for a failure."""
        return self.task.flops / res.cost if res.ok and 0 < res.cost < float("inf") else 0.0

    def _is_fresh(self, index: int, taken: set[int] | frozenset[int]) -> bool:
        """Neither visited, nor already in the batch being built, nor invalid (remembered when checked)."""
        if index in self.visited or index in taken or index in self._invalid:
            return False
        if not self.space.is_valid(index):
            self._invalid.add(index)
            return False
        return True

    def _scan(self, n: int, taken: set[int]) -> list[int]:
        """Up to ``n`` fresh indices in index order, from the first one not yet passed."""
        out: list[int] = []
        size = len(self.space)
        while len(out) < n and self._cursor < size:
            if self._is_fresh(self._cursor, taken):
                out.append(self._cursor)
            self._cursor += 1
        return out

    def _fill(self, batch: list[int], n: int) -> list[int]:
        """Top ``batch`` up to ``n`` fresh indices: random ones, then (near exhaustion) in index order."""
        taken = set(batch)
        if len(batch) < n:
            for i in self.space.sample(n - len(batch), self.rng, exclude=self.visited | taken):
                if self._is_fresh(i, taken):
                    batch.append(i)
                    taken.add(i)
        if len(batch) < n:
            batch.extend(self._scan(n - len(batch), taken))
        return batch

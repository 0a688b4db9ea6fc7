"""A genetic algorithm over knob choice vectors.

The population is the last ``pop_size`` measured configs plus the ``elite_num`` best ever measured.
A child takes each knob from one of two parents drawn with probability proportional to fitness
(FLOP/s; 0 for failures), then each knob mutates to another value with probability ``mutation_prob``.
Children already measured are rejected; when too few new children appear (a converged population),
the batch is topped up with random configs.
"""
from __future__ import annotations

import heapq
from typing import Sequence

from ..measure.result import MeasureInput, MeasureResult
from ..task import Task
from .tuner import Tuner


class GATuner(Tuner):
    """Genetic algorithm: fitness-proportional selection, uniform crossover, per-knob mutation, elitism."""

    def __init__(self, task: Task, pop_size: int = 64, elite_num: int = 8, mutation_prob: float = 0.1,
                 seed: int | None = None):
        if pop_size < 2:
            raise ValueError(f"pop_size must be >= 2, got {pop_size}")
        if not 0 <= elite_num <= pop_size:
            raise ValueError(f"elite_num must be in [0, pop_size={pop_size}], got {elite_num}")
        if not 0.0 <= mutation_prob <= 1.0:
            raise ValueError(f"mutation_prob must be in [0, 1], got {mutation_prob}")
        super().__init__(task, seed)
        self.pop_size = pop_size
        self.elite_num = elite_num
        self.mutation_prob = mutation_prob
        self.fitness: dict[int, float] = {}
        self._generation: list[int] = []  # the last pop_size measured configs
        self._queue: list[int] = []  # children bred but not yet proposed

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        super().update(inputs, results)
        for inp, res in zip(inputs, results):
            self.fitness[inp.config_index] = self.flops_of(res)
            self._generation.append(inp.config_index)
        del self._generation[:-self.pop_size]

    def _propose(self, n: int) -> list[int]:
        batch: list[int] = []
        taken: set[int] = set()
        while len(batch) < n:
            if not self._queue:
                self._queue = self._breed(self.pop_size, taken)
                if not self._queue:
                    break
            i = self._queue.pop(0)
            if self._is_fresh(i, taken):  # it may have been measured since it was bred
                batch.append(i)
                taken.add(i)
        return self._fill(batch, n)

    def _parents(self) -> list[int]:
        elites = heapq.nlargest(self.elite_num, self.fitness, key=lambda i: (self.fitness[i], -i))
        return list(dict.fromkeys(self._generation + elites))

    def _breed(self, k: int, taken: set[int]) -> list[int]:
        """Up to ``k`` new children of the current population (none while no config has positive fitness)."""
        parents = self._parents()
        weights = [self.fitness[p] for p in parents]
        if sum(weights) <= 0:
            return []
        dims = self.space.dims
        children: list[int] = []
        seen = set(taken)
        for _ in range(10 * k):
            if len(children) >= k:
                break
            a, b = (self.space.index_to_choices(p) for p in self.rng.choices(parents, weights, k=2))
            child = [x if self.rng.random() < 0.5 else y for x, y in zip(a, b)]
            for pos, d in enumerate(dims):
                if d > 1 and self.rng.random() < self.mutation_prob:
                    v = self.rng.randrange(d - 1)
                    child[pos] = v if v < child[pos] else v + 1
            index = self.space.choices_to_index(child)
            if self._is_fresh(index, seen):
                children.append(index)
                seen.add(index)
        return children

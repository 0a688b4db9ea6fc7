"""Tuners that ignore results: configs at random, or every config in index order."""
from __future__ import annotations

from .tuner import Tuner


class RandomTuner(Tuner):
    """Uniformly random configs, without repetition."""

    def _propose(self, n: int) -> list[int]:
        return self._fill([], n)


class GridTuner(Tuner):
    """Every valid config once, in index order."""

    def _propose(self, n: int) -> list[int]:
        return self._scan(n, set())

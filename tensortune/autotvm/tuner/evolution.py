"""Evolutionary search under the learned cost model (Ansor's search policy), for spaces too large to anneal well.

Each plan, a population (kept across plans, seeded with the fastest measured configs and random ones) evolves for
a few generations: children come from crossover (each knob from one of two parents picked in proportion to their
predicted score) and mutation (one knob changed; a tile split moves a factor from one of its levels to another, so
the tile keeps its size and changes shape, as Ansor's tile-size mutation does). The cost model scores every child;
the best ``population`` configs survive. The best scored configs not yet measured form the plan, and the tuner
measures its best under the refit model plus a few random configs (epsilon-greedy), as ``XGBTuner`` does.
"""
from __future__ import annotations

import heapq

import numpy as np

from ..space import ConfigSpace, SplitEntity
from ..task import Task
from .xgb import ScoreFn, XGBTuner


class EvolutionarySearch:
    """Evolution of a population of configs, maximising a score function (the interface of
    ``xgb.SimulatedAnnealing``: ``points`` is the population)."""

    def __init__(self, space: ConfigSpace, rng, population: int = 128, generations: int = 4,
                 crossover: float = 0.5):
        self.space, self.rng = space, rng
        self.n_chains, self.generations, self.crossover = population, generations, crossover
        self.points: list[int] = []
        self._splits = {pos: {e.size: i for i, e in enumerate(k.entities)}
                        for pos, k in enumerate(space.knobs.values()) if k.kind == "split"}

    def find_maximums(self, score: ScoreFn, num: int, exclude: set[int]) -> list[int]:
        """The ``num`` best-scoring valid configs met on the way, none of them in ``exclude``."""
        pop = list(dict.fromkeys(self.points or self.space.sample(self.n_chains, self.rng)))
        scores = dict(zip(pop, score(pop)))
        for _ in range(self.generations):
            children = self._children(pop, [scores[p] for p in pop], set(scores))
            if not children:
                break
            scores.update(zip(children, score(children)))
            pop = heapq.nlargest(self.n_chains, set(pop) | set(children), key=lambda i: (scores[i], -i))
        self.points = pop
        fresh = [i for i in scores if i not in exclude]
        return heapq.nlargest(num, fresh, key=lambda i: (scores[i], -i))

    def _children(self, pop: list[int], fitness: list[float], seen: set[int]) -> list[int]:
        weights = np.asarray(fitness, np.float64)
        weights = weights - weights.min() + 1e-6  # scores may be negative (ranking margins)
        children: list[int] = []
        for _ in range(4 * self.n_chains):
            if len(children) >= self.n_chains:
                break
            a, b = self.rng.choices(pop, weights=weights.tolist(), k=2)
            child = list(self.space.index_to_choices(a))
            if self.rng.random() < self.crossover:
                other = self.space.index_to_choices(b)
                child = [x if self.rng.random() < 0.5 else y for x, y in zip(child, other)]
            self._mutate(child)
            index = self.space.choices_to_index(child)
            if index not in seen and self.space.is_valid(index):
                seen.add(index)
                children.append(index)
        return children

    def _mutate(self, choices: list[int]) -> None:
        """Change one knob: move a factor between two levels of a split (when the space has the result), else
        pick another value."""
        dims = self.space.dims
        movable = [k for k, d in enumerate(dims) if d > 1]
        if not movable:
            return
        k = self.rng.choice(movable)
        if k in self._splits:
            entity: SplitEntity = list(self.space.knobs.values())[k].entities[choices[k]]
            moved = _move_factor(entity.size, self.rng)
            if moved is not None and moved in self._splits[k]:
                choices[k] = self._splits[k][moved]
                return
        v = self.rng.randrange(dims[k] - 1)
        choices[k] = v if v < choices[k] else v + 1


def _move_factor(size: tuple[int, ...], rng) -> tuple[int, ...] | None:
    """``size`` with a prime factor of one level moved to another (None when no level has one)."""
    levels = [k for k, f in enumerate(size) if f > 1]
    if not levels:
        return None
    src = rng.choice(levels)
    p = rng.choice(_prime_factors(size[src]))
    dst = rng.choice([k for k in range(len(size)) if k != src])
    out = list(size)
    out[src] //= p
    out[dst] *= p
    return tuple(out)


def _prime_factors(n: int) -> list[int]:
    """The prime factors of ``n`` > 1, with multiplicity."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out + ([n] if n > 1 else [])


class EvolutionTuner(XGBTuner):
    """``evolution``: the model-based tuner whose plans come from evolutionary search rather than annealing."""

    def __init__(self, task: Task, seed: int | None = None, population: int = 128, generations: int = 4, **kw):
        super().__init__(task, seed, **kw)
        self.sa = EvolutionarySearch(self.space, self.rng, population=population, generations=generations)

"""Model-based tuning: a cost model learned from measurements steers simulated annealing.

After each measured batch the model is refit. Every ``plan_size`` measurements, simulated annealing
under the model (64 chains of up to 40 steps; chains persist across runs and a quarter restart from
the fastest measured configs) finds the best configs, of which a plan of ``plan_size`` is picked
greedily for diversity of knob values among the top scorers. Each batch takes the plan's best under
the refit model, plus a few random configs (epsilon-greedy); a plan made by the global model alone (below),
before any measurement of the task, is made again once the first ones train the task's model (the global model's
next-best guesses are worse than what a model that has seen the first batch finds). Annealing scores a few
thousand configs per plan; their features are extracted in worker processes (``n_jobs``, default: the usable cores),
which are otherwise idle between measured batches.
With ``history`` (records of other workloads), a global model on structure-invariant features
seeds the predictions, with a weight that decays as local measurements accumulate; without it, the
model shipped with the package for the target's ISA (``tensortune.autotvm.pretrained``), if any.
"""
from __future__ import annotations

import heapq
import math
from concurrent.futures import ProcessPoolExecutor
from typing import Callable, Iterable, Sequence

import numpy as np

from ...env import usable_cores
from ..cost_model import XGBCostModel
from ..features import FeatureExtractor
from ..measure.result import MeasureInput, MeasureResult
from ..pretrained import pretrained_model
from ..record import Record, task_records
from ..space import ConfigSpace
from ..task import Task
from .tuner import Tuner

ScoreFn = Callable[[Sequence[int]], np.ndarray]


class SimulatedAnnealing:
    """Parallel simulated annealing over a config space, maximising a score function."""

    def __init__(self, space: ConfigSpace, rng, n_chains: int = 64, n_steps: int = 40, early_stop: int = 10,
                 temperature: tuple[float, float] = (1.0, 0.0)):
        self.space, self.rng = space, rng
        self.n_chains, self.n_steps, self.early_stop = n_chains, n_steps, early_stop
        self.temperature = temperature
        self.points: list[int] = []  # chain states, kept across calls

    def find_maximums(self, score: ScoreFn, num: int, exclude: set[int]) -> list[int]:
        """The ``num`` best-scoring valid configs met on the way, none of them in ``exclude``."""
        if not self.points:
            self.points = self.space.sample(self.n_chains, self.rng)
        points = list(self.points)
        scores = score(points)
        heap: list[tuple[float, int]] = []
        in_heap: set[int] = set()

        def offer(idxs, scs):
            for i, s in zip(idxs, scs):
                if i in exclude or i in in_heap:
                    continue
                if len(heap) < num:
                    heapq.heappush(heap, (float(s), i))
                    in_heap.add(i)
                elif s > heap[0][0]:
                    _, old = heapq.heapreplace(heap, (float(s), i))
                    in_heap.discard(old)
                    in_heap.add(i)

        offer(points, scores)
        t0, t1 = self.temperature
        best, stale = -math.inf, 0
        for step in range(self.n_steps):
            temp = t0 + (t1 - t0) * step / max(1, self.n_steps - 1)
            new = [self.space.neighbour(p, self.rng) for p in points]
            valid = [self.space.is_valid(i) for i in new]
            new_scores = score(new)
            for k in range(len(points)):
                if not valid[k]:
                    continue
                delta = new_scores[k] - scores[k]
                if delta >= 0 or self.rng.random() < math.exp(delta / max(temp, 1e-9)):
                    points[k], scores[k] = new[k], new_scores[k]
            offer([i for i, v in zip(new, valid) if v], [s for s, v in zip(new_scores, valid) if v])
            top = max(scores)
            if top > best + 1e-9:
                best, stale = top, 0
            else:
                stale += 1
                if stale >= self.early_stop:
                    break
        self.points = points
        return [i for _, i in sorted(heap, reverse=True)]


def diverse_pick(candidates: list[int], scores: np.ndarray, n: int, space: ConfigSpace,
                 filter_ratio: float = 2.0) -> list[int]:
    """Greedy submodular pick among the ``n * filter_ratio`` best-scoring candidates: each pick covers
    the most knob values not yet in the batch (ties go to the higher score)."""
    order = np.argsort(-np.asarray(scores), kind="stable")[: max(n, int(n * filter_ratio))]
    pool = [candidates[j] for j in order]
    if len(pool) <= n:
        return pool
    choices = [space.index_to_choices(i) for i in pool]
    covered: set[tuple[int, int]] = set()
    picked: list[int] = []
    left = list(range(len(pool)))  # in score order, so max() keeps the best-scoring among equals
    while len(picked) < n and left:
        j = max(left, key=lambda j: sum((k, c) not in covered for k, c in enumerate(choices[j])))
        left.remove(j)
        picked.append(pool[j])
        covered.update(enumerate(choices[j]))
    return picked


class XGBTuner(Tuner):
    """The model-based tuner (``loss="rank"`` for the ``xgb`` tuner, ``"reg"`` for ``xgb-reg``)."""

    def __init__(self, task: Task, seed: int | None = None, loss: str = "rank", plan_size: int = 64,
                 epsilon: float = 0.05, history: Iterable[Record] | None = None, n_chains: int = 64,
                 n_steps: int = 40, n_jobs: int | None = None, pretrained: bool = True,
                 feature_pool: ProcessPoolExecutor | None = None):
        super().__init__(task, seed)
        self.features = FeatureExtractor(task, n_jobs=n_jobs or usable_cores(), pool=feature_pool)
        self.model = XGBCostModel(loss, seed=seed or 0)
        self.plan_size, self.epsilon = plan_size, epsilon
        self.sa = SimulatedAnnealing(self.space, self.rng, n_chains=n_chains, n_steps=n_steps)
        self.xs: list[int] = []
        self.ys: list[float] = []
        self.plan: list[int] = []  # configs picked by the last annealing run, best first
        self._measured_since_plan = 0
        self._plan_blind = False  # the plan was made before the task's own model was trained
        self.global_model: XGBCostModel | None = None
        self._seed = seed or 0
        #: the model shipped for the target's ISA (None: none shipped, or ``pretrained=False``)
        self.shipped_model = pretrained_model(task.target) if pretrained else None
        if history is not None:
            self.set_history(history)
        else:
            self.global_model = self.shipped_model

    def set_history(self, history: Iterable[Record]) -> None:
        """Learn (again) from other workloads' records: the global model that seeds the predictions.
        Records with nothing to learn from (none, or none successful) leave the shipped model in its place."""
        model = train_global_model(history, exclude=self.task.workload_key, seed=self._seed)
        self.global_model = model if model is not None else self.shipped_model

    def close(self) -> None:
        """Stop the feature-extraction workers (restarted if the tuner is used again; a ``feature_pool`` given is
        borrowed: it keeps running)."""
        self.features.close()

    # -- learning ------------------------------------------------------------
    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        super().update(inputs, results)
        for inp, res in zip(inputs, results):
            self.xs.append(inp.config_index)
            self.ys.append(self.flops_of(res))
        self._measured_since_plan += len(inputs)
        y = np.asarray(self.ys, np.float32)
        if len(y) and y.max() > 0:
            X = self.features(self.xs)
            self.model.fit(X, y / y.max(), self._margin(X))

    #: measurements of its own after which the task's model and the global one weigh the same
    GLOBAL_HALF_WEIGHT = 64

    def _global_weight(self) -> float:
        return self.GLOBAL_HALF_WEIGHT / (self.GLOBAL_HALF_WEIGHT + len(self.xs))

    def _margin(self, X: np.ndarray) -> np.ndarray | None:
        if self.global_model is None:
            return None
        return self._global_weight() * self.global_model.predict(X[:, self.features.relation_slice])

    def score(self, indices: Sequence[int]) -> np.ndarray:
        X = self.features(indices)
        return self.model.predict(X, self._margin(X))

    # -- proposing -------------------------------------------------------------
    def _seed_chains(self) -> None:
        """Restart a quarter of the annealing chains from the fastest measured configs, so that each
        plan also refines around what is known to be fast (the other chains keep exploring)."""
        k = self.sa.n_chains // 4
        best = [self.xs[j] for j in np.argsort(-np.asarray(self.ys), kind="stable")[:k] if self.ys[j] > 0]
        if not best:
            return
        if not self.sa.points:
            self.sa.points = self.space.sample(self.sa.n_chains, self.rng)
        self.sa.points[-len(best):] = best

    def _propose(self, n: int) -> list[int]:
        if not self.model.trained and self.global_model is None:
            return self._fill([], n)
        self.plan = [i for i in self.plan if self._is_fresh(i, set())]
        # a plan the global model made alone is replaced as soon as the task's own measurements train its model
        blind = self._plan_blind and self.model.trained
        if len(self.plan) < n or self._measured_since_plan >= self.plan_size or blind:
            # Re-plan: anneal under the current model, keep a diverse set of its best configs.
            self._seed_chains()
            exclude = self.visited | self._invalid
            found = self.sa.find_maximums(self.score, 2 * max(self.plan_size, n), exclude)
            self.plan = diverse_pick(found, self.score(found), max(self.plan_size, n), self.space) if found else []
            self._measured_since_plan = 0
            self._plan_blind = not self.model.trained
        elif self.plan:
            # The model was refit since the plan was made: re-rank what is left (features are cached).
            order = np.argsort(-self.score(self.plan), kind="stable")
            self.plan = [self.plan[j] for j in order]
        n_model = n - int(round(self.epsilon * n)) if n > 1 else n
        batch, self.plan = self.plan[:n_model], self.plan[n_model:]
        return self._fill(batch, n)


def relation_features(task: Task, indices: Sequence[int]) -> np.ndarray:
    """The relation features (structure-invariant, comparable across workloads) of ``task``'s configs."""
    fx = FeatureExtractor(task)
    return fx(indices)[:, fx.relation_slice]


def train_global_model(history: Iterable[Record], exclude: str | None = None, seed: int = 0,
                       max_per_workload: int = 300, num_rounds: int = 150, max_depth: int = 4,
                       base: XGBCostModel | None = None,
                       features: Callable[[Task, Sequence[int]], np.ndarray] = relation_features,
                       ) -> XGBCostModel | None:
    """A ranking model on relation features of other workloads' records (throughput ranked per workload).

    ``num_rounds`` and ``max_depth`` bound its size (the shipped pretrained models keep them small). With
    ``base``, the trees are boosted on top of that model's scores (predict with ``base``'s as the margin).
    ``features`` computes the relation features of a task's configs (a cache may stand in for it)."""
    by_workload: dict[tuple[str, str], list[Record]] = {}
    for r in history:
        if r.workload != exclude:
            by_workload.setdefault((r.workload, r.target), []).append(r)
    feats, labels, groups = [], [], []
    for recs in by_workload.values():
        try:
            task = recs[0].task()
        except Exception:  # a template this version no longer has: skip its records
            continue
        recs = task_records(recs, task)[:max_per_workload]  # indices into today's space (stale ones left out)
        if not recs:
            continue
        flops = np.array([task.flops / r.cost if r.ok else 0.0 for r in recs], np.float32)
        if flops.max() <= 0:
            continue
        feats.append(features(task, [r.config_index for r in recs]))
        labels.append(flops / flops.max())
        groups.append(len(recs))
    if not feats:
        return None
    model = XGBCostModel("rank", num_rounds=num_rounds, seed=seed)
    model.params["max_depth"] = max_depth
    X = np.concatenate(feats)
    model.fit_groups(X, np.concatenate(labels), groups, None if base is None else base.predict(X))
    return model


class XGBRegTuner(XGBTuner):
    """``xgb-reg``: the model-based tuner with a regression objective."""

    def __init__(self, task: Task, seed: int | None = None, **kw):
        super().__init__(task, seed, loss="reg", **kw)

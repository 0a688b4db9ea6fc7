"""Configuration spaces: the knobs a schedule template declares, enumerated by a mixed-radix index.

A template is a function ``template(cfg, *args)``. On the first run ``cfg`` is a ``ConfigSpace``
that records each ``define_*`` call (and answers ``cfg[name]`` with the knob's first value so the
template runs through); afterwards ``cfg`` is a ``ConfigEntity``, one point of the space, whose
``define_*`` calls are no-ops and whose ``cfg[name]`` is the chosen value. Both carry the target
the task is tuned for as ``cfg.target``, which templates read instead of assuming this machine.
"""
from __future__ import annotations

import itertools
import json
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from ..errors import TensortuneError
from ..ir.nodes import ForKind
from ..schedule import Axis, StageHandle
from ..target import Target


class SpaceError(TensortuneError, ValueError):
    """A knob is declared wrongly, or a config does not belong to its space."""


# ------------------------------------------------------------------------- knob values (entities)

@dataclass(frozen=True)
class SplitEntity:
    """Split factors, outermost first; ``-1`` in the first place means "whatever is left" (ceil)."""

    size: tuple[int, ...]

    def apply(self, stage: StageHandle, axis: Axis) -> list[Axis]:
        """Split ``axis`` into ``len(size)`` loops, outermost first."""
        out = []
        for f in reversed(self.size[1:]):
            axis, inner = stage.split(axis, factor=f)
            out.append(inner)
        out.append(axis)
        return out[::-1]

    @property
    def covered(self) -> int:
        """Elements the loops cover: the extent rounded up to whole tiles of the inner factors (the extent
        itself when the factors divide it). Needs an explicit outermost factor."""
        assert self.size[0] > 0, "a split with '-1' outermost does not say how much it covers"
        return math.prod(self.size)

    def to_json(self) -> list[int]:
        return list(self.size)


@dataclass(frozen=True)
class ReorderEntity:
    perm: tuple[int, ...]

    def apply(self, stage: StageHandle, axes: Sequence[Axis]) -> list[Axis]:
        ordered = [axes[i] for i in self.perm]
        stage.reorder(*ordered)
        return ordered

    def to_json(self) -> list[int]:
        return list(self.perm)


@dataclass(frozen=True)
class AnnotateEntity:
    """One loop kind per axis (``ForKind.SERIAL`` leaves the axis as it is)."""

    kinds: tuple[ForKind, ...]

    def apply(self, stage: StageHandle, axes: Sequence[Axis]) -> None:
        for ax, kind in zip(axes, self.kinds):
            if kind is not ForKind.SERIAL:
                stage.annotate(ax, kind)

    def to_json(self) -> list[str]:
        return [k.value for k in self.kinds]


@dataclass(frozen=True)
class OtherEntity:
    val: Any

    def to_json(self) -> Any:
        return self.val


# ------------------------------------------------------------------------- knobs

@dataclass(frozen=True)
class Knob:
    """One dimension of the space: a name and its list of candidate values; ``legacy``: the choice a config
    written before the knob existed had (None: such configs are not in this space)."""

    name: str
    kind: str
    entities: tuple
    legacy: int | None = None

    def __len__(self) -> int:
        return len(self.entities)


def _factorizations(n: int, parts: int) -> list[tuple[int, ...]]:
    """Ordered tuples of ``parts`` positive integers whose product is ``n``."""
    if parts == 1:
        return [(n,)]
    out = []
    for d in range(1, n + 1):
        if n % d == 0:
            for rest in _factorizations(n // d, parts - 1):
                out.append((d,) + rest)
    return out


def _power2_splits(n: int, parts: int) -> list[tuple[int, ...]]:
    """Inner factors are powers of two whose product is at most ``n``; the outer is -1."""
    pows = [1 << i for i in range(max(1, n.bit_length()))]
    out = []
    for inner in itertools.product(pows, repeat=parts - 1):
        if math.prod(inner) <= n:
            out.append((-1,) + inner)
    return out


def _tile_splits(extent: int, parts: int, inner: Sequence[int]) -> list[tuple[int, ...]]:
    """Splits whose innermost factor is one of ``inner``, divisor of ``extent`` or not: the outer factors
    split the number of tiles, ``ceil(extent / inner)``, exactly, so only the last tile is partial."""
    out = []
    for t in dict.fromkeys(inner):
        if not isinstance(t, int) or t < 1:
            raise SpaceError(f"inner tile sizes must be positive integers, got {t!r}")
        if t > extent:
            continue
        out += [rest + (t,) for rest in _factorizations(-(-extent // t), parts - 1)]
    return out


def split_candidates(extent: int, parts: int, policy: str = "factors", max_factor: int | None = None,
                     candidates: Sequence[Sequence[int]] | None = None,
                     filter: Callable[[SplitEntity], bool] | None = None,  # noqa: A002
                     inner: Sequence[int] | None = None) -> list[SplitEntity]:
    if parts < 2:
        raise SpaceError(f"a split needs num_outputs >= 2, got {parts}")
    if policy == "factors":
        sizes = _factorizations(extent, parts)
    elif policy == "tiles":
        if not inner:
            raise SpaceError("policy 'tiles' needs the inner tile sizes (inner=[...])")
        sizes = _tile_splits(extent, parts, inner)
    elif policy == "power2":
        sizes = _power2_splits(extent, parts)
    elif policy == "verbose":
        seen = dict.fromkeys(_factorizations(extent, parts))
        for s in _power2_splits(extent, parts):
            key = (extent // math.prod(s[1:]),) + s[1:]
            if extent % math.prod(s[1:]) != 0 or key not in seen:
                seen[s] = None
        sizes = list(seen)
    elif policy == "candidate":
        if not candidates:
            raise SpaceError("policy 'candidate' needs a list of candidates")
        sizes = [tuple(c) for c in candidates]
        for c in sizes:
            if len(c) != parts:
                raise SpaceError(f"split candidate {c} does not have {parts} factors")
    else:
        raise SpaceError(f"unknown split policy {policy!r}; use factors, tiles, power2, verbose or candidate")
    ents = [SplitEntity(tuple(s)) for s in sizes]
    if max_factor is not None:
        ents = [e for e in ents if e.size[-1] <= max_factor]
    if filter is not None:
        ents = [e for e in ents if filter(e)]
    if not ents:
        raise SpaceError(f"split of extent {extent} into {parts} parts with policy {policy!r} has no candidates")
    return ents


# ------------------------------------------------------------------------- spaces and entities

class ConfigSpace:
    """The space of a template for ``target`` (default: this machine): knobs in declaration order and
    cross-knob filters."""

    def __init__(self, target: Target | None = None) -> None:
        self.target = target or Target.host()
        self.knobs: dict[str, Knob] = {}
        self.filters: list[Callable[["ConfigEntity"], bool]] = []
        self._lookup: dict[str, dict[str, int]] = {}  # knob -> JSON of a value -> its choice (index_of)

    # -- declaration --------------------------------------------------------
    def _add(self, knob: Knob) -> None:
        if knob.name in self.knobs:
            raise SpaceError(f"knob '{knob.name}' is defined twice")
        self.knobs[knob.name] = knob

    def define_split(self, name: str, axis: Axis | int, num_outputs: int = 2, policy: str = "factors",
                     max_factor: int | None = None, candidate: Sequence[Sequence[int]] | None = None,
                     filter: Callable[[SplitEntity], bool] | None = None,  # noqa: A002
                     inner: Sequence[int] | None = None) -> None:
        """Ways to split an axis into ``num_outputs`` loops. ``policy``: ``factors`` (exact factorizations),
        ``tiles`` (innermost factor from ``inner``, dividing the extent or not: the loop nest then pads or
        guards the last tile), ``power2``, ``verbose`` or ``candidate`` (the ``candidate`` lists)."""
        extent = axis.extent if isinstance(axis, Axis) else int(axis)
        self._add(Knob(name, "split", tuple(split_candidates(extent, num_outputs, policy, max_factor, candidate,
                                                             filter, inner))))

    def define_reorder(self, name: str, axes: Sequence[Axis], policy: str = "all",
                       groups: Sequence[Sequence[int]] | None = None,
                       candidate: Sequence[Sequence[int]] | None = None) -> None:
        n = len(axes)
        if policy == "identity":
            perms = [tuple(range(n))]
        elif policy == "all":
            perms = list(itertools.permutations(range(n)))
        elif policy == "groups":
            if not groups or sorted(i for g in groups for i in g) != list(range(n)):
                raise SpaceError(f"reorder '{name}': groups must partition the axis positions 0..{n - 1}")
            perms = [tuple(i for grp in combo for i in grp)
                     for combo in itertools.product(*(itertools.permutations(g) for g in groups))]
        elif policy == "candidate":
            perms = [tuple(c) for c in candidate or ()]
            if not perms or any(sorted(p) != list(range(n)) for p in perms):
                raise SpaceError(f"reorder '{name}': candidates must be permutations of 0..{n - 1}")
        else:
            raise SpaceError(f"unknown reorder policy {policy!r}; use identity, all, groups or candidate")
        self._add(Knob(name, "reorder", tuple(ReorderEntity(p) for p in perms)))

    def define_annotate(self, name: str, axes: Sequence[Axis] | int,
                        options: Sequence[ForKind | str] = (ForKind.SERIAL, ForKind.UNROLLED),
                        candidate: Sequence[Sequence[ForKind | str]] | None = None) -> None:
        """A loop kind for each of ``axes``: every combination of ``options``, or the ``candidate`` lists."""
        n = axes if isinstance(axes, int) else len(axes)

        def kind(o: ForKind | str) -> ForKind:
            if isinstance(o, ForKind):
                return o
            try:
                return ForKind.parse(o)
            except ValueError as e:
                raise SpaceError(f"annotate '{name}': {e}") from None

        kinds = [kind(o) for o in options]
        combos = ([tuple(kind(o) for o in c) for c in candidate] if candidate
                  else list(itertools.product(kinds, repeat=n)))
        self._add(Knob(name, "annotate", tuple(AnnotateEntity(c) for c in combos)))

    def define_knob(self, name: str, values: Sequence[Any], legacy: Any = None) -> None:
        """A knob of ``values``. ``legacy``: the value every config had before the template gained this knob, so
        that logs written then still find their configs (``index_of``); it must be one of ``values``."""
        if not values:
            raise SpaceError(f"knob '{name}' needs at least one value")
        values = list(values)
        if legacy is not None and legacy not in values:
            raise SpaceError(f"knob '{name}': legacy value {legacy!r} is not one of {values}")
        self._add(Knob(name, "other", tuple(OtherEntity(v) for v in values),
                       None if legacy is None else values.index(legacy)))

    def add_filter(self, fn: Callable[["ConfigEntity"], bool]) -> None:
        """Keep only configs for which ``fn(config)`` is true (cross-knob constraints)."""
        self.filters.append(fn)

    # -- while the template is first run, cfg[name] is the knob's first value
    def __getitem__(self, name: str):
        if name not in self.knobs:
            raise SpaceError(f"knob '{name}' is used before it is defined")
        e = self.knobs[name].entities[0]
        return e.val if isinstance(e, OtherEntity) else e

    # -- enumeration --------------------------------------------------------
    def __len__(self) -> int:
        return math.prod(len(k) for k in self.knobs.values())

    @property
    def dims(self) -> list[int]:
        return [len(k) for k in self.knobs.values()]

    def index_to_choices(self, index: int) -> tuple[int, ...]:
        if not 0 <= index < len(self):
            raise SpaceError(f"config index {index} out of range [0, {len(self)})")
        out = []
        for d in self.dims:
            index, r = divmod(index, d)
            out.append(r)
        return tuple(out)

    def choices_to_index(self, choices: Sequence[int]) -> int:
        idx, mul = 0, 1
        for c, d in zip(choices, self.dims):
            if not 0 <= c < d:
                raise SpaceError(f"choice {c} out of range for a knob of {d} values")
            idx += c * mul
            mul *= d
        return idx

    def index_of(self, config: dict[str, Any]) -> int | None:
        """The index of the config whose knob values (as ``ConfigEntity.to_json`` writes them) are ``config``;
        None when a knob is missing (and has no legacy value) or a value is not in this space. Lets a log written
        before a template gained or lost candidates, or gained a knob with a legacy value, find its configs again."""
        missing = set(self.knobs) - set(config)
        if set(config) - set(self.knobs) or any(self.knobs[name].legacy is None for name in missing):
            return None
        choices = []
        for name, knob in self.knobs.items():
            if name in missing:
                choices.append(knob.legacy)
                continue
            key = json.dumps(config[name], sort_keys=True)
            lookup = self._lookup.get(name)
            if lookup is None:
                lookup = self._lookup[name] = {json.dumps(e.to_json(), sort_keys=True): i
                                               for i, e in enumerate(knob.entities)}
            if key not in lookup:
                return None
            choices.append(lookup[key])
        return self.choices_to_index(choices)

    def get(self, index: int) -> "ConfigEntity":
        return ConfigEntity(self, index)

    def is_valid(self, index: int) -> bool:
        return all(f(self.get(index)) for f in self.filters) if self.filters else True

    def sample(self, n: int, rng: random.Random, exclude: set[int] | None = None,
               max_tries: int = 100) -> list[int]:
        """Up to ``n`` distinct valid indices not in ``exclude``, uniformly at random."""
        exclude = exclude or set()
        out: list[int] = []
        seen = set(exclude)
        size = len(self)
        tries = 0
        while len(out) < n and tries < max_tries * n and len(seen) < size:
            tries += 1
            i = rng.randrange(size)
            if i in seen:
                continue
            seen.add(i)
            if self.is_valid(i):
                out.append(i)
        return out

    def neighbour(self, index: int, rng: random.Random) -> int:
        """A random walk step: change the value of one knob (chosen at random) to another value."""
        choices = list(self.index_to_choices(index))
        movable = [i for i, d in enumerate(self.dims) if d > 1]
        if not movable:
            return index
        k = rng.choice(movable)
        v = rng.randrange(self.dims[k] - 1)
        choices[k] = v if v < choices[k] else v + 1
        return self.choices_to_index(choices)

    def __iter__(self) -> Iterator["ConfigEntity"]:
        for i in range(len(self)):
            yield self.get(i)

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k.name}({k.kind}, {len(k)})" for k in self.knobs.values())
        return f"ConfigSpace(size={len(self)}: {knobs})"


class ConfigEntity:
    """One point of a space: ``cfg[name]`` is the chosen value of each knob; ``target`` is the space's
    unless given."""

    def __init__(self, space: ConfigSpace, index: int, target: Target | None = None):
        self.space = space
        self.index = index
        self.target = target or space.target
        self.choices = space.index_to_choices(index)

    def __getitem__(self, name: str):
        knobs = self.space.knobs
        if name not in knobs:
            raise SpaceError(f"config has no knob '{name}'; knobs are {list(knobs)}")
        pos = list(knobs).index(name)
        e = knobs[name].entities[self.choices[pos]]
        return e.val if isinstance(e, OtherEntity) else e

    # define_* calls are no-ops on a concrete config, so one template body serves both
    def define_split(self, *a, **k) -> None: ...
    def define_reorder(self, *a, **k) -> None: ...
    def define_annotate(self, *a, **k) -> None: ...
    def define_knob(self, *a, **k) -> None: ...
    def add_filter(self, *a, **k) -> None: ...

    def to_json(self) -> dict[str, Any]:
        return {name: knob.entities[c].to_json() for (name, knob), c in zip(self.space.knobs.items(), self.choices)}

    def __repr__(self) -> str:
        return f"ConfigEntity(index={self.index}, {self.to_json()})"

    def __eq__(self, other) -> bool:
        return isinstance(other, ConfigEntity) and other.index == self.index and other.space is self.space

    def __hash__(self) -> int:
        return hash(self.index)

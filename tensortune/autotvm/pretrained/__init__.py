"""Cost models trained on the project's own tuning logs, shipped with the package (one per vector ISA).

``benchmarks/pretrain.py`` trains them from the logs under ``data/logs/<isa>/`` (the data source, in the
repository) on the structure-invariant relation features, as a transfer model: the ``xgb`` tuner uses
one for the first batches of a task that has no history of its own, with a weight that decays as the
task's own measurements accumulate.
"""
from __future__ import annotations

import functools
from importlib import resources

from ...target import Target
from ..cost_model import XGBCostModel


def model_file(target: Target) -> str:
    """The package-data file name of ``target``'s pretrained model."""
    return f"{target.isa.value}.json"


@functools.cache
def _load(name: str) -> XGBCostModel | None:
    path = resources.files(__package__).joinpath(name)
    if not path.is_file():
        return None
    with resources.as_file(path) as real:
        return XGBCostModel.load(real)


def pretrained_model(target: Target) -> XGBCostModel | None:
    """The shipped model for ``target``'s ISA, or None when none was trained for it."""
    return _load(model_file(target))

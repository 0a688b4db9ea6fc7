"""Cost models trained on the project's own tuning logs, shipped with the package (one per vector ISA).

``benchmarks/pretrain.py`` trains them from the logs under ``data/logs/<isa>/`` (the data source, in the
repository) on the structure-invariant relation features, as a transfer model: the ``xgb`` tuner uses
one for the first batches of a task that has no history of its own, with a weight that decays as the
task's own measurements accumulate.

Each file records the feature version and width it was trained on (XGBoost booster attributes). A model
whose features do not match today's ``FeatureExtractor`` would score configs by the wrong columns, so it
is refused with a ``PretrainedModelWarning`` and the tuner starts without it, as it does for an ISA
that has no model.
"""
from __future__ import annotations

import functools
import warnings
from importlib import resources
from pathlib import Path

from ...target import Target
from ..cost_model import XGBCostModel
from ..features import FEATURE_VERSION, RELATION_LENGTH

#: what the shipped models are trained on: the relation part of the features (``relation_slice``)
FEATURE_SET = "relation"


class PretrainedModelWarning(UserWarning):
    """A shipped cost model exists but cannot be used (other feature version, unreadable file)."""


def model_file(target: Target) -> str:
    """The package-data file name of ``target``'s pretrained model."""
    return f"{target.isa.value}.json"


def model_metadata(target: Target, **extra) -> dict[str, str]:
    """What ``load_pretrained`` checks, to be saved with a model trained for ``target``'s ISA."""
    return {"tensortune_feature_version": str(FEATURE_VERSION), "feature_set": FEATURE_SET,
            "num_features": str(RELATION_LENGTH), "isa": target.isa.value, **{k: str(v) for k, v in extra.items()}}


def incompatibility(model: XGBCostModel) -> str | None:
    """Why ``model`` cannot score today's relation features, or None when it can."""
    meta = model.metadata
    version = meta.get("tensortune_feature_version")
    if version is None:
        return "it records no feature version"
    if version != str(FEATURE_VERSION):
        return f"it was trained on feature version {version}, this tensortune extracts version {FEATURE_VERSION}"
    if meta.get("feature_set") != FEATURE_SET:
        return f"it was trained on the {meta.get('feature_set')!r} features, not {FEATURE_SET!r}"
    if model.num_features != RELATION_LENGTH:
        return f"its trees read {model.num_features} features, the relation features are {RELATION_LENGTH} wide"
    return None


def load_pretrained(path: str | Path) -> XGBCostModel | None:
    """The model saved at ``path`` if its features match this version's, else None with a warning."""
    import xgboost

    try:
        model = XGBCostModel.load(path)
    except xgboost.core.XGBoostError as e:
        warnings.warn(f"pretrained cost model {path} is not used: it cannot be read ({e}); the xgb tuner "
                      "starts without it", PretrainedModelWarning, stacklevel=2)
        return None
    problem = incompatibility(model)
    if problem is not None:
        warnings.warn(f"pretrained cost model {path} is not used: {problem}. The xgb tuner starts without it; "
                      "retrain it with `python benchmarks/pretrain.py`", PretrainedModelWarning, stacklevel=2)
        return None
    return model


@functools.cache
def _load(name: str) -> XGBCostModel | None:
    path = resources.files(__package__).joinpath(name)
    if not path.is_file():
        return None
    with resources.as_file(path) as real:
        return load_pretrained(real)


def pretrained_model(target: Target) -> XGBCostModel | None:
    """The shipped model for ``target``'s ISA, or None when none was trained for it (or it does not fit)."""
    return _load(model_file(target))

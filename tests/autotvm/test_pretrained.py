"""The cost model shipped with the package: loading it, its feature-version check, the xgb tuner's use of it."""
from __future__ import annotations

import fnmatch
import random
import tomllib
import warnings
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from tensortune.autotvm import pretrained
from tensortune.autotvm.catalog import create_task, task_from_workload
from tensortune.autotvm.cost_model import XGBCostModel
from tensortune.autotvm.features import FEATURE_VERSION, RELATION_LENGTH, FeatureExtractor
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.pretrained import (PretrainedModelWarning, load_pretrained, model_file, model_metadata,
                                           pretrained_model)
from tensortune.autotvm.tuner import XGBTuner
from tensortune.target import Target

pytest.importorskip("xgboost")

AVX2 = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
AVX512 = Target.parse("c -isa=avx512 -cores=2 -arch=x86_64")
NEON = Target.parse("c -isa=neon -cores=2 -arch=aarch64")
ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(autouse=True)
def _fresh_load_cache():
    pretrained._load.cache_clear()  # each test sees the file as it is now (and leaves no patched result behind)
    yield
    pretrained._load.cache_clear()


def _fake_measure(task):
    """Made-up timings: a smooth landscape over the knob choices."""
    def gflops(i):
        ch = task.space.index_to_choices(i)
        return 1.0 + sum((c / max(1, d - 1)) ** 2 for c, d in zip(ch, task.space.dims))

    def measure(inputs):
        return [MeasureResult((task.flops / (gflops(i.config_index) * 1e9),), ErrorKind.NONE, "", 0.0)
                for i in inputs]
    return measure


def _small_model(n_features: int) -> XGBCostModel:
    rng = np.random.default_rng(0)
    m = XGBCostModel("rank", num_rounds=3)
    m.fit(rng.random((20, n_features)), rng.random(20))
    return m


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_the_shipped_models_load_with_the_features_of_this_version(target):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a compatible model loads without any warning
        model = pretrained_model(target)
    assert model is not None and model.trained
    meta = model.metadata
    assert meta["tensortune_feature_version"] == str(FEATURE_VERSION)
    assert meta["isa"] == target.isa.value and meta["feature_set"] == "relation"
    assert model.num_features == RELATION_LENGTH
    assert pretrained.incompatibility(model) is None
    path = resources.files("tensortune.autotvm.pretrained").joinpath(model_file(target))
    assert path.stat().st_size < 400_000  # a small file of package data
    task = task_from_workload("resnet18:C6", template="conv2d_nchwc_packed", target=target)
    fx = FeatureExtractor(task)
    scores = model.predict(fx(task.space.sample(50, random.Random(0)))[:, fx.relation_slice])
    assert np.isfinite(scores).all() and scores.std() > 0  # it tells configs apart


def test_the_model_files_are_package_data():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = conf["tool"]["setuptools"]["package-data"]["tensortune.autotvm.pretrained"]
    assert all(any(fnmatch.fnmatch(model_file(t), p) for p in patterns) for t in (AVX2, AVX512))


def test_a_model_of_another_feature_version_is_refused_with_a_warning(tmp_path):
    good = _small_model(RELATION_LENGTH)
    good.save(tmp_path / "good.json", model_metadata(AVX2))
    assert load_pretrained(tmp_path / "good.json") is not None

    _small_model(RELATION_LENGTH).save(tmp_path / "old.json", {**model_metadata(AVX2),
                                                               "tensortune_feature_version": FEATURE_VERSION + 1})
    with pytest.warns(PretrainedModelWarning, match=f"feature version {FEATURE_VERSION + 1}.*retrain"):
        assert load_pretrained(tmp_path / "old.json") is None

    _small_model(RELATION_LENGTH).save(tmp_path / "bare.json")  # saved without metadata
    with pytest.warns(PretrainedModelWarning, match="no feature version"):
        assert load_pretrained(tmp_path / "bare.json") is None

    _small_model(RELATION_LENGTH + 5).save(tmp_path / "wide.json", model_metadata(AVX2))
    with pytest.warns(PretrainedModelWarning, match=f"read {RELATION_LENGTH + 5} features"):
        assert load_pretrained(tmp_path / "wide.json") is None

    (tmp_path / "broken.json").write_text("{not a model")
    with pytest.warns(PretrainedModelWarning, match="cannot be read"):
        assert load_pretrained(tmp_path / "broken.json") is None


def test_the_tuner_falls_back_when_the_shipped_model_has_another_feature_version(monkeypatch):
    task = create_task("matmul", {"M": 64, "N": 64, "K": 64}, target=AVX2)
    monkeypatch.setattr(pretrained, "FEATURE_VERSION", FEATURE_VERSION + 1)  # as after a change of features
    with pytest.warns(PretrainedModelWarning, match="is not used"):
        tuner = XGBTuner(task, seed=0)
    assert tuner.global_model is None
    assert len(set(tuner.next_batch(8))) == 8 and tuner.plan == []  # random first batch, as without a model


@pytest.mark.slow
def test_the_xgb_tuner_proposes_its_first_batch_from_the_shipped_model_then_learns_online():
    task = create_task("matmul", {"M": 128, "N": 128, "K": 128}, target=AVX2)
    shipped = pretrained_model(AVX2)
    tuner = XGBTuner(task, seed=0, plan_size=16, n_jobs=1)
    assert tuner.global_model is shipped and not tuner.model.trained

    fx = FeatureExtractor(task)

    def shipped_score(idx):
        return shipped.predict(fx(idx)[:, fx.relation_slice])

    batch = tuner.next_batch(16)
    assert tuner.plan  # planned by annealing under the model (the random fill makes no plan)
    others = task.space.sample(300, random.Random(1))
    # 15 of 16 come from the model's maximums (one is the epsilon-greedy random pick)
    assert np.median(shipped_score(batch)) > np.percentile(shipped_score(others), 90)
    scratch = XGBTuner(task, seed=0, plan_size=16, n_jobs=1, pretrained=False)
    assert scratch.global_model is None and scratch.next_batch(16) != batch

    # online: after the first measurements the task's own model is fit, the shipped one's weight decays
    measure = _fake_measure(task)
    inputs = [MeasureInput(task, i) for i in batch]
    tuner.update(inputs, measure(inputs))
    assert tuner.model.trained
    weight = tuner._global_weight()
    assert weight == pytest.approx(64 / (64 + 16))
    X = fx(others)
    np.testing.assert_allclose(tuner.score(others),
                               tuner.model.predict(X, weight * shipped.predict(X[:, fx.relation_slice])), rtol=1e-5)
    rest = list(tuner.plan)  # what the shipped model alone planned beyond the first batch
    second = tuner.next_batch(16)
    assert not set(second) & set(batch)
    tuner.close()


@pytest.mark.slow
def test_the_shipped_models_plan_is_made_again_once_the_tasks_own_measurements_train_its_model():
    task = create_task("matmul", {"M": 128, "N": 128, "K": 128}, target=AVX2)
    tuner = XGBTuner(task, seed=0, plan_size=64, n_jobs=1)
    first = tuner.next_batch(16)
    rest = set(tuner.plan)  # the shipped model's 48 next guesses
    assert len(rest) >= 40
    inputs = [MeasureInput(task, i) for i in first]
    tuner.update(inputs, _fake_measure(task)(inputs))
    second = tuner.next_batch(16)
    # annealed again under the model that has seen the first batch, not the shipped model's next guesses
    assert len(set(second) - rest) >= 8
    tuner.close()


def test_no_shipped_model_for_the_isa_means_a_random_first_batch():
    task = create_task("matmul", {"M": 64, "N": 64, "K": 64}, target=NEON)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no model is not worth a warning
        assert pretrained_model(NEON) is None
        tuner = XGBTuner(task, seed=0, n_jobs=1)
    assert tuner.global_model is None
    batch = tuner.next_batch(16)
    assert len(set(batch)) == 16 and all(task.space.is_valid(i) for i in batch)
    assert tuner.plan == []  # no annealing without a model: the random fill


def test_a_history_with_nothing_to_learn_from_keeps_the_shipped_model():
    task = create_task("matmul", {"M": 64, "N": 64, "K": 64}, target=AVX2)
    tuner = XGBTuner(task, seed=0, history=[], n_jobs=1)  # e.g. a network's first round: no other task measured
    assert tuner.global_model is pretrained_model(AVX2) is not None
    assert XGBTuner(task, seed=0, history=[], n_jobs=1, pretrained=False).global_model is None

"""Features, the XGBoost cost model, simulated annealing and transfer learning."""
from __future__ import annotations

import random
import time

import numpy as np
import pytest

from tensortune.autotvm.cost_model import XGBCostModel, pairwise_accuracy, topk_peak
from tensortune.autotvm.features import FeatureExtractor
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import Record, append_records, load_records
from tensortune.autotvm.catalog import create_task, task_from_workload
from tensortune.autotvm.tune import tune
from tensortune.autotvm.tuner import RandomTuner, XGBTuner
from tensortune.autotvm.tuner.xgb import SimulatedAnnealing, diverse_pick

pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def matmul_task():
    return create_task("matmul", {"M": 128, "N": 128, "K": 128})


def test_features_are_deterministic_and_fixed_length(matmul_task):
    idx = matmul_task.space.sample(20, random.Random(1))
    a = FeatureExtractor(matmul_task)(idx)
    b = FeatureExtractor(matmul_task)(list(reversed(idx)))[::-1]
    assert a.shape == (20, FeatureExtractor(matmul_task).length)
    np.testing.assert_array_equal(a, b)
    assert np.isfinite(a).all()
    assert (a.std(axis=0) > 0).sum() > 20  # configs really differ in their features


def test_parallel_extraction_equals_serial_and_fills_the_cache():
    task = task_from_workload("resnet18:C6")  # a spatial-pack template: packed buffers, local stages
    idx = task.space.sample(40, random.Random(7)) + [0, 0]  # repeated configs are extracted once
    serial = FeatureExtractor(task)(idx)
    fx = FeatureExtractor(task, n_jobs=2)
    np.testing.assert_array_equal(fx(idx), serial)
    assert set(fx._cache) == set(idx)
    with pytest.raises(ValueError, match="n_jobs"):
        FeatureExtractor(task, n_jobs=0)


def test_feature_cache_is_bounded_and_evicted_configs_are_recomputed(matmul_task):
    idx = matmul_task.space.sample(30, random.Random(4))
    fx = FeatureExtractor(matmul_task, max_cache=10)
    out = fx(idx)
    assert len(fx._cache) <= 10
    np.testing.assert_array_equal(fx(idx), out)  # evicted configs come back identical
    np.testing.assert_array_equal(out, FeatureExtractor(matmul_task)(idx))


def test_failing_workers_fall_back_to_serial_extraction():
    class Broken:
        def submit(self, *a, **k):
            raise RuntimeError("no processes here")

    task = task_from_workload("resnet18:C6")
    idx = task.space.sample(20, random.Random(8))
    fx = FeatureExtractor(task, n_jobs=2, pool=Broken())
    with pytest.warns(RuntimeWarning, match="no processes here"):
        out = fx(idx)
    np.testing.assert_array_equal(out, FeatureExtractor(task)(idx))
    assert fx.n_jobs == 1


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux /proc)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def test_extractor_workers_live_until_close_and_a_borrowed_pool_is_left_running():
    from tensortune.autotvm.workers import spawn_pool

    task = task_from_workload("resnet18:C6")
    idx = task.space.sample(20, random.Random(3))
    with FeatureExtractor(task, n_jobs=2) as fx:
        fx(idx)
        pids = list(fx._pool._processes)
        assert pids and all(_running(pid) for pid in pids)
    assert fx._pool is None
    deadline = time.monotonic() + 20
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_running(pid) for pid in pids)
    pool = spawn_pool(2)
    try:
        fx = FeatureExtractor(task, n_jobs=2, pool=pool)
        fx(task.space.sample(20, random.Random(4)))
        fx.close()
        assert pool.submit(sum, [1, 2]).result(timeout=30) == 3  # still usable by its owner
    finally:
        pool.shutdown()


def test_relation_features_have_the_same_length_across_workloads():
    c6 = FeatureExtractor(task_from_workload("resnet18:C6"))
    c1 = FeatureExtractor(task_from_workload("resnet18:C1"))
    assert c6.relation_slice == c1.relation_slice
    assert c6.get(0)[c6.relation_slice].shape == c1.get(0)[c1.relation_slice].shape


def test_pairwise_accuracy_and_topk_peak():
    t = np.array([1.0, 2.0, 3.0, 4.0])
    assert pairwise_accuracy(t, t) == 1.0
    assert pairwise_accuracy(t, -t) == 0.0
    assert pairwise_accuracy(t, np.zeros(4)) == 0.5  # no opinion: a coin
    assert pairwise_accuracy(t, np.array([1.0, 1.0, 3.0, 4.0])) == pytest.approx(5.5 / 6)
    assert topk_peak(t, np.array([4, 3, 2, 1.0]), 1) == 0.25
    assert topk_peak(t, t, 1) == 1.0


def _fake_gflops(task, idx: int) -> float:
    """A smooth made-up performance landscape over the knob choices (unique optimum at the top choices)."""
    ch = task.space.index_to_choices(idx)
    return 1.0 + sum((c / max(1, d - 1)) ** 2 for c, d in zip(ch, task.space.dims))


def test_model_learns_a_landscape_and_ranks_held_out_configs(matmul_task):
    idx = matmul_task.space.sample(300, random.Random(0))
    X = FeatureExtractor(matmul_task)(idx)
    y = np.array([_fake_gflops(matmul_task, i) for i in idx])
    for loss in ("rank", "reg"):
        m = XGBCostModel(loss)
        m.fit(X[:200], y[:200] / y.max())
        acc = pairwise_accuracy(y[200:], m.predict(X[200:]))
        assert acc > 0.75, (loss, acc)


@pytest.mark.slow
def test_model_on_real_measurements_ranks_held_out_configs(matmul_task):
    """Measure random configs of a small matmul for real; the model must order held-out ones well."""
    from tensortune.autotvm.measure import MeasureOptions, Measurer, RunOptions

    idx = matmul_task.space.sample(72, random.Random(3))
    with Measurer(MeasureOptions(runner=RunOptions(repeat=5, min_repeat_ms=10.0))) as m:  # steadier under load
        res = m.measure([MeasureInput(matmul_task, i) for i in idx])
    ok = [(i, matmul_task.flops / r.cost) for i, r in zip(idx, res) if r.ok]
    assert len(ok) >= 60
    X = FeatureExtractor(matmul_task)([i for i, _ in ok])
    y = np.array([g for _, g in ok])
    model = XGBCostModel("rank")
    model.fit(X[:48], y[:48] / y.max())
    acc = pairwise_accuracy(y[48:], model.predict(X[48:]))
    assert acc > 0.6, acc


def test_simulated_annealing_never_returns_excluded_configs(matmul_task):
    space = matmul_task.space
    rng = random.Random(0)
    exclude = set(space.sample(2000, random.Random(5)))
    sa = SimulatedAnnealing(space, rng, n_chains=32, n_steps=20)

    def score(indices):
        return np.array([_fake_gflops(matmul_task, i) for i in indices])

    found = sa.find_maximums(score, 50, exclude)
    assert len(found) == 50 and len(set(found)) == 50
    assert not exclude.intersection(found)
    assert all(space.is_valid(i) for i in found)
    # the annealing climbs: its picks score well above random configs
    rand = score(space.sample(200, random.Random(9)))
    assert score(found).mean() > np.percentile(rand, 90)


def test_diverse_pick_prefers_new_knob_values(matmul_task):
    space = matmul_task.space
    base = space.sample(1, random.Random(2))[0]
    near = list(dict.fromkeys(space.neighbour(base, random.Random(k)) for k in range(8)))[:5]
    far = space.sample(5, random.Random(4))
    cands = near + far
    scores = np.linspace(1.0, 0.9, len(cands))  # the near-duplicates score slightly higher
    picked = diverse_pick(cands, scores, 5, space)
    assert len(picked) == 5 and len(set(picked)) == 5
    assert picked[0] == near[0]  # the best first
    assert sum(p in far for p in picked) >= 3  # then configs that cover new knob values
    # candidates below the score filter are never picked
    assert set(diverse_pick(cands, scores, 2, space, filter_ratio=2.0)) <= set(cands[:4])


def _fake_measure(task):
    def measure(inputs):
        return [MeasureResult((task.flops / (_fake_gflops(task, i.config_index) * 1e9),), ErrorKind.NONE, "", 0.0)
                for i in inputs]
    return measure


@pytest.mark.slow
def test_xgb_tuner_never_proposes_a_measured_config_and_beats_random(matmul_task):
    finals = {"xgb": [], "random": []}
    for seed in range(2):
        # pretrained=False: this made-up landscape has nothing in common with the shipped model's hardware
        for name, tuner in (("xgb", XGBTuner(matmul_task, seed=seed, pretrained=False)),
                            ("random", RandomTuner(matmul_task, seed=seed))):
            seen: set[int] = set()

            def cb(t, inputs, results, _seen=seen):
                idx = [i.config_index for i in inputs]
                assert not _seen.intersection(idx)
                _seen.update(idx)

            r = tune(matmul_task, 64, tuner=tuner, measure=_fake_measure(matmul_task), progress=False,
                     callbacks=[cb])
            finals[name].append(r.best_gflops)
    assert np.mean(finals["xgb"]) > np.mean(finals["random"])


@pytest.mark.slow
def test_transfer_from_a_log_changes_the_first_batch(tmp_path):
    src = create_task("matmul", {"M": 64, "N": 128, "K": 64})
    dst = create_task("matmul", {"M": 128, "N": 64, "K": 128})
    log = tmp_path / "history.json"
    idx = src.space.sample(64, random.Random(0))
    res = _fake_measure(src)([MeasureInput(src, i) for i in idx])
    append_records(log, zip([MeasureInput(src, i) for i in idx], res))
    history = load_records(log)
    assert all(isinstance(r, Record) for r in history)
    plain = XGBTuner(dst, seed=0, pretrained=False).next_batch(16)  # no history, no shipped model: random
    transfer_tuner = XGBTuner(dst, seed=0, history=history)
    assert transfer_tuner.global_model is not None
    transferred = transfer_tuner.next_batch(16)
    assert transferred != plain
    # the global model prefers configs that the (shared) landscape rates higher than random ones
    assert np.mean([_fake_gflops(dst, i) for i in transferred]) > np.mean([_fake_gflops(dst, i) for i in plain])


@pytest.mark.slow
def test_a_global_model_from_cached_features_and_one_boosted_on_a_base_model(tmp_path):
    from tensortune.autotvm.tuner.xgb import relation_features, train_global_model

    src = create_task("matmul", {"M": 64, "N": 128, "K": 64})
    dst = create_task("matmul", {"M": 128, "N": 64, "K": 128})
    idx = src.space.sample(96, random.Random(0))
    inputs = [MeasureInput(src, i) for i in idx]
    append_records(tmp_path / "h.json", zip(inputs, _fake_measure(src)(inputs)))
    history = load_records(tmp_path / "h.json")
    calls = []

    def cached(task, indices):  # what a benchmark's feature cache passes in
        calls.append(len(indices))
        return relation_features(task, indices)

    plain = train_global_model(history, seed=0, num_rounds=20)
    via_cache = train_global_model(history, seed=0, num_rounds=20, features=cached)
    assert calls == [96]
    X = relation_features(dst, dst.space.sample(200, random.Random(1)))
    np.testing.assert_allclose(via_cache.predict(X), plain.predict(X))  # the same features, the same model

    # boosted on a base: the trees learn a correction to the base's scores, so they are read with them. A base
    # that ranks the configs backwards (learned from inverted timings) is corrected by the records
    inverted = [MeasureResult((1.0 / r.costs[0],), ErrorKind.NONE, "", 0.0) for r in _fake_measure(src)(inputs)]
    append_records(tmp_path / "inverted.json", zip(inputs, inverted))
    backwards = train_global_model(load_records(tmp_path / "inverted.json"), seed=0, num_rounds=20)
    boosted = train_global_model(history, seed=0, num_rounds=20, base=backwards)
    Xs, ys = relation_features(src, idx), [_fake_gflops(src, i) for i in idx]
    base_scores = backwards.predict(Xs)
    assert not np.allclose(boosted.predict(Xs, base_scores), boosted.predict(Xs))
    assert pairwise_accuracy(ys, base_scores) < 0.5 < pairwise_accuracy(ys, boosted.predict(Xs, base_scores))


@pytest.mark.slow
def test_tune_with_history_from_a_log_file(tmp_path):
    src = create_task("matmul", {"M": 64, "N": 128, "K": 64})
    dst = create_task("matmul", {"M": 128, "N": 64, "K": 128})
    log = tmp_path / "history.json"
    tune(src, 32, tuner="random", measure=_fake_measure(src), log_file=log, progress=False, seed=0)
    r = tune(dst, 16, tuner="xgb", measure=_fake_measure(dst), progress=False, seed=0, history=log)
    assert r.best_gflops > 0 and len(r.history) == 16


@pytest.mark.slow
def test_tune_closes_the_tuners_worker_processes(matmul_task):
    tuner = XGBTuner(matmul_task, seed=0, plan_size=16, n_jobs=2)
    pools = []
    tune(matmul_task, 48, tuner=tuner, measure=_fake_measure(matmul_task), progress=False,
         callbacks=[lambda t, i, r: pools.append(t.features._pool)])
    assert any(p is not None for p in pools)  # annealing extracted features in worker processes
    assert tuner.features._pool is None  # stopped when tuning ended (started again if the tuner is reused)


def test_a_saved_model_predicts_the_same_after_loading(tmp_path, matmul_task):
    idx = matmul_task.space.sample(40, random.Random(11))
    X = FeatureExtractor(matmul_task)(idx)
    y = np.array([_fake_gflops(matmul_task, i) for i in idx], np.float32)
    model = XGBCostModel("rank", num_rounds=20)
    model.fit(X, y / y.max())
    model.save(tmp_path / "m.json")
    np.testing.assert_allclose(XGBCostModel.load(tmp_path / "m.json").predict(X), model.predict(X), rtol=1e-6)
    with pytest.raises(ValueError, match="nothing to save"):
        XGBCostModel().save(tmp_path / "empty.json")


def test_the_xgb_tuner_starts_from_the_shipped_model_of_its_isa(monkeypatch, matmul_task):
    import tensortune.autotvm.tuner.xgb as xgb_module
    from tensortune.autotvm.pretrained import model_file

    assert model_file(matmul_task.target) == f"{matmul_task.target.isa.value}.json"
    shipped = XGBCostModel("rank")
    monkeypatch.setattr(xgb_module, "pretrained_model", lambda target: shipped)
    assert XGBTuner(matmul_task).global_model is shipped
    assert XGBTuner(matmul_task, pretrained=False).global_model is None
    monkeypatch.setattr(xgb_module, "pretrained_model", lambda target: None)  # no model for this ISA
    assert XGBTuner(matmul_task).global_model is None

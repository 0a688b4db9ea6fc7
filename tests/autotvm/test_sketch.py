"""Template-free search: the sketches of random computations lower and match numpy under random configs; a record
replays to byte-identical C; evolutionary search finds what its score prefers; ``tune`` shares its trials."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import tensortune as tt
from tensortune import cli, te
from tensortune.autotvm.catalog import create_task
from tensortune.autotvm.measure.result import ErrorKind, MeasureInput, MeasureResult
from tensortune.autotvm.record import append_records, load_records
from tensortune.autotvm.sketch import derive, schedule_sketch
from tensortune.autotvm.space import ConfigEntity, ConfigSpace
from tensortune.autotvm.tuner.evolution import EvolutionarySearch, _move_factor
from tensortune.build import generate_source
from tensortune.lower import lower
from tensortune.ops import (batch_matmul, conv2d_nchw, conv2d_transpose_nchw, depthwise_conv2d_nchw, layer_norm,
                           matmul_nn, softmax)

HOST = tt.Target.host()
CONFIGS = 3  # random configs built per drawn computation


def check_sketch(output: te.Tensor, inputs: list[te.Tensor], reference, seed: int) -> ConfigSpace:
    """Build ``CONFIGS`` random configs of ``output``'s sketch and compare each with ``reference`` (numpy)."""
    space = ConfigSpace(HOST)
    schedule_sketch(space, output)
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, t.shape).astype(np.float32) for t in inputs]
    expected = reference(*arrays)
    for index in space.sample(CONFIGS, random.Random(seed)):
        config = ConfigEntity(space, index, HOST)
        module = tt.build(schedule_sketch(config, output), [*inputs, output])
        out = np.full(output.shape, np.nan, np.float32)
        module(*arrays, out)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4, err_msg=str(config.to_json()))
    return space


def op_case(op, seed: int) -> ConfigSpace:
    return check_sketch(op.output, list(op.inputs), op.reference, seed)


SLOW_DRAWS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW_DRAWS
@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 40), st.booleans(), st.booleans(), st.booleans(),
       st.integers(0, 99))
def test_matmul_sketches_match_numpy(M, N, K, bias, relu, transpose_b, seed):
    op_case(matmul_nn(M, N, K, bias=bias, relu=relu, transpose_b=transpose_b), seed)


@SLOW_DRAWS
@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 3), st.integers(3, 11), st.integers(3, 11),
       st.sampled_from([1, 3]), st.integers(1, 2), st.integers(0, 1), st.integers(1, 2), st.integers(0, 99))
def test_conv2d_sketches_match_numpy(N, cg, og, H, W, K, stride, pad, groups, seed):
    op_case(conv2d_nchw(N, cg * groups, H, W, og * groups, K, K, stride, pad, groups=groups), seed)


@SLOW_DRAWS
@given(st.integers(1, 8), st.integers(3, 12), st.integers(1, 2), st.integers(0, 1), st.integers(0, 99))
def test_depthwise_sketches_match_numpy(C, H, stride, pad, seed):
    op_case(depthwise_conv2d_nchw(1, C, H, H + 1, 3, 3, stride, pad), seed)


@SLOW_DRAWS
@given(st.integers(1, 9), st.integers(1, 33), st.sampled_from(["sum", "max"]), st.booleans(), st.integers(0, 99))
def test_reduction_with_an_elementwise_chain_matches_numpy(rows, cols, kind, epilogue, seed):
    """exp(x) * 0.5 inlined into a row reduction (which reads it once per output), then (when asked) a fused
    epilogue + 1."""
    x = te.placeholder((rows, cols), "float32", "x")
    e = te.compute((rows, cols), lambda i, j: te.exp(x[i, j]) * 0.5, "e")
    k = te.reduce_axis(cols, "k")
    red = te.compute((rows,), lambda i: getattr(te, kind)(e[i, k], axis=k), "red")
    out = te.compute((rows,), lambda i: red[i] + 1.0, "out") if epilogue else red
    reducer = np.sum if kind == "sum" else np.max
    sketch = derive(out)
    assert (sketch.anchor, sketch.fusable, sketch.producers, sketch.inlined) == ("red", True, (), ("e",))
    check_sketch(out, [x], lambda a: reducer(np.exp(a) * 0.5, axis=1) + (1.0 if epilogue else 0.0), seed)


@SLOW_DRAWS
@given(st.integers(1, 6), st.integers(2, 40), st.integers(0, 99))
def test_softmax_tiles_its_last_reduction_in_place(rows, cols, seed):
    """The sum's consumer (a division by it, over a wider shape) cannot take its tiles: the sum is tiled at the
    root, the row max runs at the root, the division elementwise."""
    x = te.placeholder((rows, cols), "float32", "x")
    k1, k2 = te.reduce_axis(cols, "k1"), te.reduce_axis(cols, "k2")
    mx = te.compute((rows,), lambda i: te.max(x[i, k1], axis=k1), "mx")
    ex = te.compute((rows, cols), lambda i, j: te.exp(x[i, j] - mx[i]), "ex")
    sm = te.compute((rows,), lambda i: te.sum(ex[i, k2], axis=k2), "sm")
    out = te.compute((rows, cols), lambda i, j: ex[i, j] / sm[i], "softmax")
    sketch = derive(out)
    assert (sketch.anchor, sketch.fusable, sketch.roots, sketch.inlined) == ("sm", False, ("mx",), ("ex",))

    def softmax(a):
        z = np.exp(a - a.max(axis=1, keepdims=True))
        return z / z.sum(axis=1, keepdims=True)

    space = check_sketch(out, [x], softmax, seed)
    assert "fuse" not in space.knobs


@SLOW_DRAWS
@given(st.integers(1, 5), st.integers(1, 40), st.integers(0, 99))
def test_elementwise_and_scan_stages_without_a_reduction(rows, cols, seed):
    """No anchor: a cumulative sum (a scan, at the root) and an elementwise output."""
    x = te.placeholder((rows, cols), "float32", "x")
    cs = te.scan((rows, cols), "float32", 1,
                 lambda own, i, j: te.select(j > 0, own[i, j - 1] + x[i, j], x[i, j]), "cs")
    out = te.compute((rows, cols), lambda i, j: te.maximum(cs[i, j], 0.0) * 2.0, "out")
    sketch = derive(out)
    assert (sketch.anchor, sketch.roots) == (None, ("cs",))
    check_sketch(out, [x], lambda a: np.maximum(np.cumsum(a, axis=1), 0) * 2.0, seed)


def test_a_record_replays_to_byte_identical_c(tmp_path):
    """A config measured and logged, read back into a fresh task (a fresh declaration), gives the same C."""
    task = create_task("conv2d", {"IC": 8, "OC": 16, "H": 10, "W": 10, "K": 3, "pad": 1}, "auto_conv2d")
    index = task.space.sample(1, random.Random(3))[0]

    def source(t, i):
        s, op = t.instantiate(i)
        return generate_source(lower(s, list(op.args)), HOST)

    result = MeasureResult((1e-3,), ErrorKind.NONE, "", 0.1)
    append_records(tmp_path / "log.json", [(MeasureInput(task, index), result)])
    (record,) = load_records(tmp_path / "log.json")
    again = record.task()
    assert again is not task and again.workload_key == task.workload_key
    assert source(again, record.config_index) == source(task, index)


def test_tile_mutation_moves_a_factor_and_keeps_the_tile():
    rng = random.Random(0)
    for size in [(1, 4, 2, 8), (3, 1, 5, 2), (7, 1, 1, 1)]:
        for _ in range(20):
            moved = _move_factor(size, rng)
            assert np.prod(moved) == np.prod(size) and moved != size
    assert _move_factor((1, 1, 1), rng) is None


def test_evolution_climbs_to_what_the_score_prefers():
    """Scored by closeness to one config of a large sketch space, evolution gets closer than the random configs it
    starts from, and proposes only valid configs outside ``exclude``."""
    space = ConfigSpace(HOST)
    schedule_sketch(space, matmul_nn(256, 256, 256).output)
    rng = random.Random(1)
    goal = np.array(space.index_to_choices(space.sample(1, rng)[0]))

    def score(indices):
        return np.array([-np.abs(np.array(space.index_to_choices(i)) - goal).sum() for i in indices], float)

    search = EvolutionarySearch(space, rng, population=64, generations=6)
    start = space.sample(64, random.Random(2))
    search.points = list(start)
    exclude = set(start[:8])
    found = search.find_maximums(score, 8, exclude)
    assert len(found) == 8 and not exclude.intersection(found) and all(space.is_valid(i) for i in found)
    assert score(found).max() > score(start).max()


def test_tune_shares_its_trials_among_templates_and_reports_which_won(tmp_path, capsys):
    log = tmp_path / "mm.json"
    argv = ["tune", "matmul", "--shape", "M=16", "N=24", "K=8", "--trials", "8", "--batch-size", "4", "--tuner",
            "random", "--quiet", "--seed", "0", "--log", str(log), "--json"]
    assert cli.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    rows = {r["template"]: r for r in summary["templates"]}
    assert set(rows) == {"matmul", "auto_matmul"} and sum(r["trials"] for r in rows.values()) == 8
    assert summary["trials"] == summary["new_trials"] == 8 == len(load_records(log))
    fastest = max(rows.values(), key=lambda r: r["best_gflops"])
    assert summary["template"] == fastest["template"] and summary["best_gflops"] == fastest["best_gflops"]
    assert cli.main(argv + ["--trials", "8"]) == 0  # resumed: nothing left to measure
    again = json.loads(capsys.readouterr().out)
    assert again["resumed_trials"] == 8 and again["new_trials"] == 0


def test_alternatives_are_the_templates_of_the_same_tensors_and_search_auto_takes_any_workload():
    def names(*argv):
        return [t.name for t in cli._tasks_from_args(cli.build_parser().parse_args(["tune", *argv, "--log", "x"]))]

    conv = ["conv2d", "--shape", "IC=64", "OC=64", "H=56", "W=56", "K=3", "pad=1"]
    assert names(*conv) == ["conv2d_nchwc", "conv2d_nchw_spatial_pack", "conv2d_winograd_nchw", "auto_conv2d"]
    assert names(*conv, "--search", "templates") == names(*conv)[:-1]
    assert names(*conv, "groups=4") == ["conv2d_nchwc_packed"]  # the only template of grouped ones (NCHWc)
    assert names(*conv, "groups=4", "--search", "auto") == ["auto_conv2d"]
    with pytest.raises(cli.CLIError, match="for CPUs"):
        names(*conv, "--search", "auto", "--target", "cuda -arch=sm_90")
    with pytest.raises(cli.CLIError, match="either --template or --search"):
        names(*conv, "--search", "auto", "--template", "conv2d_nchwc")


@SLOW_DRAWS
@given(st.integers(1, 3), st.integers(1, 17), st.integers(1, 17), st.integers(1, 9), st.booleans(),
       st.integers(0, 99))
def test_batch_matmul_sketches_match_numpy(batch, M, N, K, transpose_b, seed):
    op_case(batch_matmul(batch, M, N, K, transpose_b=transpose_b), seed)


@SLOW_DRAWS
@given(st.integers(1, 2), st.integers(1, 4), st.integers(1, 4), st.integers(1, 5), st.integers(1, 4),
       st.integers(1, 3), st.integers(0, 3), st.integers(0, 2), st.integers(0, 99))
def test_conv2d_transpose_sketches_match_numpy(N, C, O, H, K, stride, pad, output_padding, seed):
    pad, output_padding = min(pad, K - 1), min(output_padding, stride - 1)
    assume((H - 1) * stride - 2 * pad + K + output_padding >= 1)
    op_case(conv2d_transpose_nchw(N, C, H, H + 1, O, K, stride, pad, output_padding=output_padding), seed)


@SLOW_DRAWS
@given(st.integers(1, 9), st.integers(1, 70), st.integers(0, 99))
def test_row_normalization_sketches_match_numpy(M, N, seed):
    op_case(softmax(M, N), seed)
    op_case(layer_norm(M, N), seed)


@pytest.mark.parametrize("operator, shape", [
    ("batch_matmul", {"batch": 2, "M": 8, "N": 16, "K": 4}), ("softmax", {"M": 6, "N": 33}),
    ("layer_norm", {"M": 4, "N": 40}), ("conv2d_transpose", {"IC": 8, "OC": 4, "H": 4, "W": 4, "K": 4, "stride": 2,
                                                             "pad": 1})])
def test_operators_without_a_template_tune_template_free_and_their_peers_agree(operator, shape, tmp_path, capsys):
    """Their default is the template-free task; onnxruntime's kernel for the same operator computes what the
    reference does (the peer process refuses a wrong answer)."""
    pytest.importorskip("onnxruntime")
    from tensortune.benchmarking.peers import time_peers

    argv = ["tune", operator, "--shape", *(f"{k}={v}" for k, v in shape.items()), "--trials", "4", "--batch-size",
            "4", "--tuner", "random", "--quiet", "--log", str(tmp_path / "log.json"), "--json"]
    assert cli.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["template"] == f"auto_{operator}" and summary["trials"] == 4 and not summary["failures"]
    peers = time_peers(create_task(operator, shape), 1, 1, 0.1)
    assert "median_s" in peers["onnxruntime"], peers


@pytest.mark.parametrize("make", [lambda: softmax(7, 100), lambda: layer_norm(5, 77), lambda: softmax(1, 300)])
def test_rfactor_vectorizes_a_row_reduction_and_matches_numpy(make):
    """A reduction that reads each element once per output, along a long contiguous row, splits in two: vectors of
    partial results, then their total; widths that do not divide the row are guarded."""
    op = make()
    space = ConfigSpace(HOST)
    schedule_sketch(space, op.output)
    widths = [e.val for e in space.knobs["rfactor"].entities]
    lanes = HOST.lanes("float32")
    assert widths[0] == 1 and set(widths[1:]) <= {lanes, 2 * lanes} and len(widths) > 1
    canonical = op.random_inputs(0)
    for choice in range(1, len(widths)):
        choices = [0] * len(space.dims)
        choices[list(space.knobs).index("rfactor")] = choice
        s = schedule_sketch(ConfigEntity(space, space.choices_to_index(choices), HOST), op.output)
        module = tt.build(s, list(op.args))
        out = np.full(op.output.shape, np.nan, np.float32)
        module(*canonical, out)
        np.testing.assert_allclose(out, op.reference(*canonical), rtol=1e-4, atol=1e-5)
        assert "_rf" in module.source  # the partial results' stage


def test_the_evolution_tuner_tunes_a_template_free_task_and_resumes(tmp_path):
    """Two batches, the second proposed by evolution under the model trained on the first; a rerun measures
    nothing again."""
    pytest.importorskip("xgboost")
    from tensortune.autotvm.tune import tune

    task = create_task("matmul", {"M": 16, "N": 32, "K": 16}, "auto_matmul")
    log = tmp_path / "evo.json"
    result = tune(task, 8, tuner="evolution", batch_size=4, log_file=log, progress=False, seed=0)
    assert len(result.history) == 8 and result.best_gflops > 0
    assert len({r.config_index for r in load_records(log)}) == 8
    again = tune(task, 8, tuner="evolution", batch_size=4, log_file=log, progress=False, seed=0)
    assert again.n_measured == 0 and len(load_records(log)) == 8

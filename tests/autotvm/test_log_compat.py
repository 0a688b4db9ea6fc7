"""Tuning logs written by earlier versions stay readable.

``tests/autotvm/data/log_v1.jsonl`` was written by tensortune 0.1.0 (record format 1): ``tensortune tune --trials 8``
of a 16^3 matmul and of a small conv2d, then a few real build and run timeouts; the target field was
then set to a fixed string so that the file does not depend on the machine that made it.
"""
from __future__ import annotations

import dataclasses
import json
import warnings
from collections import Counter
from pathlib import Path

import pytest

from tensortune.autotvm.measure.result import ErrorKind
from tensortune.autotvm.record import (Record, RecordWarning, best_records, load_records, pick_best,
                                       task_records)
from tensortune.target import Target

# Never regenerate or edit this file: it stands for logs users already have. Add new files instead.
LOG_V1 = Path(__file__).parent / "data" / "log_v1.jsonl"
TARGET = "c -isa=avx512 -cores=2 -arch=x86_64 -native"
MATMUL = '["matmul",[16,16,16]]'
CONV = '["conv2d_nchw_spatial_pack",[1,8,8,8,16,3,1,1]]'
KNOBS = {"matmul": ["tile_y", "tile_x", "tile_k", "order", "unroll_k", "parallel"],
         "conv2d_nchw_spatial_pack": ["tile_oc", "tile_oh", "tile_ow", "reorder_outer", "parallel", "unroll_kw",
                                      "vectorize_unpack", "unroll_unpack", "tile_rc", "reorder_reduce"]}


def read_v1() -> list[Record]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not one line may be skipped
        return load_records(LOG_V1)


def test_every_line_parses_into_a_record_with_the_stored_fields():
    records = read_v1()
    assert len(records) == len(LOG_V1.read_text().splitlines()) == 20
    assert Counter((r.workload, r.error_kind) for r in records) == {
        (MATMUL, ErrorKind.NONE): 8, (MATMUL, ErrorKind.BUILD_TIMEOUT): 2,
        (CONV, ErrorKind.NONE): 8, (CONV, ErrorKind.RUN_TIMEOUT): 2}
    for r in records:
        assert r.target == TARGET and r.version == "0.1.0"
        assert list(r.config) == KNOBS[r.template]
        assert r.all_cost > 0 and r.timestamp > 1.7e9
        if r.ok:
            assert len(r.costs) == 3 and all(c > 0 for c in r.costs) and r.error_msg == ""
        else:
            assert r.costs == () and r.mean_cost == float("inf") and "longer than" in r.error_msg
    first = records[0]
    assert (first.config_index, first.config) == (12623, {"tile_y": [2, 8, 1], "tile_x": [1, 2, 8], "tile_k": [2, 8],
                                                          "order": [1, 0], "unroll_k": 4, "parallel": "outer_fused"})


def test_records_rebuild_their_tasks_and_configs():
    """Templates may gain or lose candidates after a log was written: each record is found again in
    today's space by its stored knob values (its index updated), and means the same schedule."""
    records = read_v1()
    for r in records:
        task = r.task()
        assert task.workload_key == r.workload and task.target == Target.parse(TARGET)
    for workload in (MATMUL, CONV):
        group = [r for r in records if r.workload == workload]
        task = group[0].task()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no record is stale
            found = task_records(group, task)
        assert len(found) == len(group)
        for old, new in zip(group, found):
            assert 0 <= new.config_index < len(task.space)
            assert task.config(new.config_index).to_json() == old.config
            assert dataclasses.replace(new, config_index=old.config_index) == old  # nothing else changes


def test_pick_best_and_best_records():
    records = read_v1()
    best = pick_best(records, TARGET)
    assert {w: r.config_index for w, r in best.items()} == {MATMUL: 13781, CONV: 67873}
    assert best[CONV].config == {"tile_oc": [2, 8], "tile_oh": [1, 8], "tile_ow": [2, 1, 4], "reorder_outer": [1, 0, 2],
                                 "parallel": "fuse2", "unroll_kw": True, "vectorize_unpack": False,
                                 "unroll_unpack": True, "tile_rc": [1, 8], "reorder_reduce": [1, 0, 2]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bests = best_records(LOG_V1)
    assert [(b.record.workload, b.record.config, b.n_records, b.n_ok) for b in bests] == [
        (MATMUL, best[MATMUL].config, 10, 8), (CONV, best[CONV].config, 10, 8)]
    for b in bests:
        assert b.task.config(b.record.config_index).to_json() == b.record.config
        b.task.instantiate(b.record.config_index)  # the stored best is still a valid schedule


def test_a_stale_config_is_a_warning_never_an_exception(tmp_path):
    """If a later template changes its space, the stored knob values no longer match the index: warn, skip."""
    lines = LOG_V1.read_text().splitlines()
    altered = []
    for line in lines:
        obj = json.loads(line)
        if obj["config_index"] == 13781:  # matmul's best: pretend the template now means other knobs by it
            obj["config"]["tile_y"] = [3, 3, 3]  # a split no version offers for 16 rows
        altered.append(json.dumps(obj, separators=(",", ":")))
    log = tmp_path / "stale.jsonl"
    log.write_text("\n".join(altered) + "\n")
    with pytest.warns(RecordWarning, match="no longer match"):
        bests = best_records(log)
    matmul = next(b for b in bests if b.record.workload == MATMUL)
    assert matmul.record.config["tile_y"] != [3, 3, 3] and matmul.record.ok
    assert matmul.n_records == 10  # counted in the log, left out of the choice

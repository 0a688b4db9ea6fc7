"""Misbehaving schedule templates for tests/autotvm/test_measure.py (module level, so worker processes can import them)."""
from __future__ import annotations

import os
import time

from tensortune.autotvm.task import template
from tensortune.ops import Part, matmul
from tensortune.schedule import create_schedule


@template("test_faulty")
def faulty_template(cfg, n: int):
    """A plain n^3 matmul whose ``mode`` knob can break the schedule, the result or the build."""
    cfg.define_knob("mode", ["ok", "invalid", "wrong_kernel", "slow", "crash"])
    mode = cfg["mode"]
    # The task's reference comes from the first config ("ok"): A @ B. The wrong kernel computes A @ B.T.
    op = matmul(n, n, n, transpose_b=(mode == "wrong_kernel"))
    if mode == "slow":
        time.sleep(60)  # a template that never finishes within the build timeout
    if mode == "crash":
        os._exit(3)  # kills the build worker process
    s = create_schedule(op.output)
    s[op.part(Part.PACKED_WEIGHT)].compute_inline()
    if mode == "invalid":
        s[op.output].split(s[op.output].axis[0], factor=0)  # raises ScheduleError
    return s, op


MODES = {"ok": 0, "invalid": 1, "wrong_kernel": 2, "slow": 3, "crash": 4}  # config index of each mode

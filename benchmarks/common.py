"""Helpers shared by the benchmark scripts: tuning curves read from logs, writing results, optional plots.

The scripts run as ``python benchmarks/NAME.py``, so this folder is on ``sys.path`` and they import
this module as ``common``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tensortune.cli import positive_int  # noqa: F401  (the CLI's argparse type, for the scripts' counts)


def best_curve(log: Path, task, trials: int | None = None) -> np.ndarray:
    """Best GFLOP/s after each of the first ``trials`` records of ``task`` in the log (failures count as 0)."""
    from tensortune.autotvm.record import load_records, task_records

    recs = task_records(load_records(log), task)[:trials]
    g = np.array([task.flops / r.cost / 1e9 if r.ok else 0.0 for r in recs])
    return np.maximum.accumulate(g) if len(g) else g


def trials_to_reach(curve: np.ndarray, level: float) -> int | None:
    """The number of trials after which ``curve`` first reaches ``level`` (None: never)."""
    hit = np.nonzero(curve >= level)[0]
    return int(hit[0]) + 1 if len(hit) else None


def save_zoo_model(work: Path, name: str) -> Path:
    """The zoo network ``name`` (batch 1, 224x224) saved as ``work/NAME.onnx``; returns the path."""
    import onnx

    from tensortune.network import zoo

    model = work / f"{name}.onnx"
    onnx.save(zoo.MODELS[name](batch=1, image=224), model)
    return model


def write_json(path: str | Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON, with a final newline."""
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def pyplot():
    """``matplotlib.pyplot`` drawing to files only, or None after a one-line note when matplotlib is missing.

    Call it after the results are written: a missing plotting library must never lose them.
    """
    try:
        import matplotlib
    except ImportError:
        print('no plot: matplotlib is not installed (pip install -e ".[bench]")', flush=True)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

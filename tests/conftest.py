"""Shared test helpers: lowering with the IR verifier after every pass, build-and-compare with numpy, and
the ``--update-golden`` option that rewrites the golden files of ``test_golden.py``, and ``script``, which imports
a benchmark script."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pytest

import tensortune as tt
from tensortune.ir import PrimFunc
from tensortune.lower import PASSES
from tensortune.schedule import Schedule
from tensortune.te import Tensor


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="rewrite tests/lower/golden/ from the current output instead of comparing with it")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    """Whether ``--update-golden`` was given: golden tests then write their files instead of comparing."""
    return request.config.getoption("--update-golden")


@pytest.fixture
def script(monkeypatch):
    """``script("vs_libraries")``: the benchmark module, imported from ``benchmarks/``."""
    monkeypatch.syspath_prepend(str(Path(__file__).parent.parent / "benchmarks"))
    return importlib.import_module


def lower_checked(sch: Schedule, args: Sequence[Tensor] | None = None, name: str = "kernel") -> PrimFunc:
    """Lower ``sch`` with the IR verifier after every pass; check that every pass ran and lowering is pure."""
    seen: list[str] = []
    func = tt.lower(sch, args, name, verify=True, trace=lambda pass_name, _f: seen.append(pass_name))
    assert seen == ["build_loop_nest"] + [n for n, _ in PASSES]
    # Lowering reads the schedule and never changes it: a second lowering prints the same loops.
    assert str(tt.lower(sch, args, name)) == str(func)
    return func


def run_checked(sch: Schedule, args: Sequence[Tensor], inputs: Sequence[np.ndarray], expected: np.ndarray,
                target: tt.Target | None = None, rtol: float = 1e-5, atol: float = 1e-6) -> tt.runtime.Module:
    """Lower (verified), build, run on ``inputs`` and compare the single output (last arg) with ``expected``."""
    lower_checked(sch, args)
    module = tt.build(sch, args, target=target)
    out_t = args[-1]
    out = np.full(out_t.shape, 123, dtype=out_t.dtype.numpy)  # not zero: a kernel must write every element
    module(*inputs, out)
    np.testing.assert_allclose(out, expected, rtol=rtol, atol=atol)
    return module


@pytest.fixture
def check_lowering() -> Callable[..., PrimFunc]:
    """``check_lowering(sch, args)``: the lowered ``PrimFunc``, verified after every pass."""
    return lower_checked


@pytest.fixture
def check_run() -> Callable[..., tt.runtime.Module]:
    """``check_run(sch, args, inputs, expected, target=None)``: build, run and compare with numpy."""
    return run_checked


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)

"""Golden files: the printed loop IR and the generated C of two fixed schedules, compared to the letter.

Any change to lowering, printing or C generation shows up here as a diff. When the change is
intended, rewrite the files with ``python -m pytest tests/lower/test_golden.py --update-golden`` and
review them in the commit. The target is fixed (never the host), so the files do not depend on the
machine; the C header names the tensortune version, so a version bump rewrites that line too.
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Callable

import pytest

import tensortune as tt
from tensortune import ops
from tensortune.codegen import codegen_c
from tensortune.schedule import Schedule
from tensortune.te import Tensor

GOLDEN = Path(__file__).parent / "golden"
TARGET = tt.Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")


def default_matmul() -> tuple[Schedule, list[Tensor]]:
    """The default schedule of a 64^3 matmul for TARGET: B packed into panels, a register block, parallel tiles."""
    op = ops.matmul(64, 64, 64, target=TARGET)
    return op.default_schedule(TARGET), list(op.args)


def default_conv2d() -> tuple[Schedule, list[Tensor]]:
    """The default schedule of a 3x3, pad 1 convolution, 16 -> 32 channels on 14x14, for TARGET."""
    op = ops.conv2d_nchw(1, 16, 14, 14, 32, 3, stride=1, pad=1)
    return op.default_schedule(TARGET), list(op.args)


CASES: dict[str, Callable[[], tuple[Schedule, list[Tensor]]]] = {
    "matmul_64_default": default_matmul,
    "conv2d_default_16x14x14_32x3": default_conv2d,
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("stage", ["ir", "c"])
def test_output_matches_golden_file(name: str, stage: str, update_golden: bool) -> None:
    sch, args = CASES[name]()
    func = tt.lower(sch, args)
    text = str(func) + "\n" if stage == "ir" else codegen_c(func, TARGET)
    path = GOLDEN / f"{name}.{'ir.txt' if stage == 'ir' else 'c'}"
    if update_golden:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"{path} is missing; create it with 'python -m pytest {__file__} --update-golden'")
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(keepends=True), text.splitlines(keepends=True),
                                            f"{path} (golden)", f"{name} {stage} (now)"))
        pytest.fail(f"the {stage} of {name} differs from {path}; if the change is intended, rerun with "
                    f"--update-golden and review the diff:\n{diff}", pytrace=False)

"""ARM NEON as a target: cross-compiled for aarch64 and, on any other machine, run under qemu.

Every operator's default schedule and random configs of every template equal numpy; the generated C
uses 128-bit vectors; the runner classifies crashes and hangs under emulation and marks timings as
meaningless, through to the tuning log and the CLI. Tests that run aarch64 code need Debian's
gcc-aarch64-linux-gnu and qemu-user (``.ci/run`` installs them); the error tests need nothing.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

import tensortune as tt
from measure_templates import MODES, faulty_template
from tensortune import cli, ops
from tensortune.arith import Analyzer
from tensortune.autotvm.catalog import create_task
from tensortune.autotvm.measure import (BuildOptions, BuildResult, ErrorKind, LocalRunner, MeasureInput,
                                        MeasureOptions, Measurer, RunOptions)
from tensortune.autotvm.record import load_records
from tensortune.autotvm.task import Task
from tensortune.autotvm.templates import GPU_TEMPLATES, TEMPLATES
from tensortune.build import Library, build_library, check_toolchain, generate_source
from tensortune.errors import CompilerNotFoundError, EmulatorNotFoundError
from tensortune.lower import lower
from tensortune.ops.operator import check_output
from tensortune.runtime import ArgSpec, KernelRuntimeError, c_flags, compile_shared, find_compiler
from tensortune.runtime.cross import CROSS_TOOLS
from tensortune.runtime.emulator import EmulatedModule, EmulatedTimingWarning, find_emulator
from tensortune.target import Target, TargetError

# the package's own templates (the tests register some of theirs too); the GPU ones schedule for cuda targets only
CPU_TEMPLATES = {n for n, t in TEMPLATES.items() if t.fn.__module__.startswith("tensortune.")} - GPU_TEMPLATES
from neon_tools import EMULATED, NEON, NEON_TEXT, TOOLS, needs_tools, only_emulated  # noqa: E402


def vector_widths(source: str) -> set[int]:
    """The widths in bytes of the vector types the C declares."""
    return {int(w) for w in re.findall(r"vector_size\((\d+)\)", source)}


# ------------------------------------------------------------------ operators and templates equal numpy

#: name -> (operator, whether its default schedule vectorizes); blocked layouts take blocks of one NEON vector
OPERATORS = {
    "matmul": (lambda: ops.matmul(12, 24, 20, target=NEON), True),
    "dense+bias+relu": (lambda: ops.dense(6, 20, 16, bias=True, relu=True, target=NEON), True),
    "conv2d_nchw": (lambda: ops.conv2d_nchw(1, 8, 8, 8, 8, 3, stride=1, pad=1, bias=True, relu=True), True),
    "conv2d_nchw stride 2": (lambda: ops.conv2d_nchw(1, 4, 16, 16, 8, 3, stride=2, pad=1), True),
    "depthwise_conv2d_nchw": (lambda: ops.depthwise_conv2d_nchw(1, 8, 8, 8, 3, stride=1, pad=1), True),
    "conv2d_nchwc": (lambda: ops.conv2d_nchwc(1, 8, 6, 6, 16, 3, pad=1, icb=4, target=NEON), True),
    "conv2d_nchwc_packed": (lambda: ops.conv2d_nchwc_packed(1, 16, 6, 6, 16, 3, pad=1, target=NEON), True),
    "conv2d_spatial_pack": (lambda: ops.conv2d_spatial_pack(1, 8, 6, 6, 16, 3, stride=2, pad=1, target=NEON), True),
    "depthwise_conv2d_nchwc": (lambda: ops.depthwise_conv2d_nchwc(1, 16, 7, 7, 3, pad=1, target=NEON), True),
    "conv2d_winograd_nchwc": (lambda: ops.conv2d_winograd_nchwc(1, 8, 7, 7, 8, pad=1, target=NEON), True),
    "conv2d_winograd_nchw": (lambda: ops.conv2d_winograd_nchw(1, 8, 7, 7, 8, pad=1, target=NEON), True),
}


@needs_tools
@pytest.mark.parametrize("name", OPERATORS)
def test_default_schedules_equal_numpy_under_emulation(name):
    make, vectorizes = OPERATORS[name]
    op = make()
    module = tt.build(op.default_schedule(NEON), list(op.args), target=NEON)
    assert isinstance(module, EmulatedModule) == EMULATED
    widths = vector_widths(module.source)
    assert max(widths, default=0) == 16 if vectorizes else not widths  # 128-bit vectors (and narrower only for remainders)
    canonical = op.random_inputs(seed=1)
    out = np.full(op.output.shape, np.nan, op.output.dtype.numpy)  # an element left unwritten fails the check
    module(*op.prepare(*canonical), out)
    assert check_output(out, np.asarray(op.reference(*canonical))) is None


TEMPLATE_TASKS = {
    "matmul": ("matmul", {"M": 8, "N": 32, "K": 12}),
    "conv2d_nchw_spatial_pack": ("conv2d", {"IC": 8, "OC": 16, "H": 6, "W": 6, "K": 3, "pad": 1}),
    "conv2d_nchwc": ("conv2d", {"IC": 16, "OC": 16, "H": 6, "W": 6, "K": 3, "stride": 2, "pad": 1}),
    "conv2d_nchwc_packed": ("conv2d", {"IC": 16, "OC": 16, "H": 5, "W": 5, "K": 3, "pad": 1}),
    "depthwise_conv2d_nchwc": ("depthwise_conv2d", {"C": 16, "H": 7, "W": 7, "K": 3, "pad": 1}),
    "conv2d_winograd_nchwc_packed": ("conv2d", {"IC": 8, "OC": 8, "H": 5, "W": 5, "K": 3, "pad": 1}),
    "conv2d_winograd_nchw": ("conv2d", {"IC": 8, "OC": 12, "H": 6, "W": 5, "K": 3, "pad": 1}),
    "depthwise_conv2d_nchwc_packed": ("depthwise_conv2d", {"C": 8, "H": 7, "W": 7, "K": 3, "stride": 2, "pad": 1}),
    # template-free: the sketch of each operator's plain declaration
    "auto_matmul": ("matmul", {"M": 8, "N": 32, "K": 12}),
    "auto_conv2d": ("conv2d", {"IC": 4, "OC": 8, "H": 6, "W": 6, "K": 3, "pad": 1}),
    "auto_depthwise_conv2d": ("depthwise_conv2d", {"C": 8, "H": 7, "W": 7, "K": 3, "pad": 1}),
    "auto_batch_matmul": ("batch_matmul", {"batch": 2, "M": 4, "N": 8, "K": 4}),
    "auto_conv2d_transpose": ("conv2d_transpose", {"IC": 4, "OC": 4, "H": 3, "W": 3, "K": 4, "stride": 2, "pad": 1}),
    "auto_softmax": ("softmax", {"M": 4, "N": 12}),
    "auto_layer_norm": ("layer_norm", {"M": 4, "N": 12}),
}


def _expression_args(op) -> tuple:
    """The arguments of a network node's expression task: ``op``'s DAG with its default schedule for NEON."""
    from tensortune.schedule.steps import step_to_json
    from tensortune.te.serialize import dumps

    steps = [step_to_json(s) for s in op.default_schedule(NEON).steps]
    return op.name, dumps(op.args), json.dumps(steps, separators=(",", ":"))


#: templates only a network's tuner makes tasks of (no operator of the catalog): their task arguments
NETWORK_TEMPLATE_ARGS = {"nchwc_default": ("conv2d_nchwc_packed", 1, 16, 6, 6, 16, 3, 2, 1),
                         "auto_expression": _expression_args(ops.layer_norm(6, 20)),
                         "expression_default": _expression_args(ops.conv2d_nchw(1, 4, 6, 6, 8, 3, 3, 1, 1))}
CONFIGS_PER_TEMPLATE = 3


def neon_tasks() -> list[Task]:
    return ([create_task(operator, shape, template, NEON) for template, (operator, shape) in TEMPLATE_TASKS.items()]
            + [Task(TEMPLATES[name], args, NEON) for name, args in NETWORK_TEMPLATE_ARGS.items()])


def test_every_template_has_a_neon_task():
    assert {t.name for t in neon_tasks()} == CPU_TEMPLATES


@pytest.mark.slow
@needs_tools
def test_random_configs_of_every_template_equal_numpy_under_emulation():
    """Measured by the tuner's runner, which checks each output against the operator's numpy reference."""
    inputs = []
    for task in neon_tasks():
        inputs += [MeasureInput(task, i) for i in task.space.sample(CONFIGS_PER_TEMPLATE, random.Random(7))]
    fast = RunOptions(number=1, repeat=1, min_repeat_ms=0.0)
    with Measurer(MeasureOptions(BuildOptions(n_parallel=2), fast)) as measure:
        results = measure(inputs)
    widths: dict[str, set[int]] = {t: set() for t in CPU_TEMPLATES}
    for inp, res in zip(inputs, results):
        assert res.error_kind in (ErrorKind.NONE, ErrorKind.INVALID_CONFIG), (inp, res.error_msg)
        if res.ok:
            assert res.emulated == EMULATED and res.costs
            sch, op = inp.task.instantiate(inp.config_index)
            analyzer = Analyzer()
            widths[inp.task.name] |= vector_widths(generate_source(lower(sch, list(op.args), analyzer=analyzer),
                                                                   NEON, analyzer))
    # 128-bit vectors in every hand-written template (narrower ones where a config's tile is narrower), never wider
    # ones; a template-free config may have no vector at all (a register tile one element wide)
    assert all(max(w, default=0) == 16 for t, w in widths.items() if not t.startswith("auto_")), widths
    assert all(max(w, default=0) <= 16 for w in widths.values()), widths


# ------------------------------------------------------------------ the emulated module

def hand_written(body: str, name: str = "hand") -> Library:
    """A NEON library of one hand-written kernel on a 16-float output (the calling convention of generated ones)."""
    source = f"#include <stdint.h>\n#include <omp.h>\nint32_t {name}(void** args, int32_t num_threads) {{ {body} }}\n"
    path = compile_shared(source, NEON)
    return Library(path.stem, path.read_bytes(), name, (ArgSpec("x", (16,), "float32"),
                                                        ArgSpec("out", (16,), "float32", True)), (), NEON_TEXT, source)


THREADS = """float* x = args[0]; float* out = args[1]; int threads = 0;
#pragma omp parallel num_threads(num_threads)
#pragma omp atomic
    threads++;
    for (int i = 0; i < 16; i++) out[i] = x[i] + threads;
    return 0;"""


@needs_tools
@only_emulated
def test_emulated_module_calls_checks_and_times_like_a_module():
    module = hand_written(THREADS).load(num_threads=3)
    assert isinstance(module, EmulatedModule) and module.entry == "hand" and module.lib_path.is_file()
    x, out = np.arange(16, dtype="float32"), np.zeros(16, "float32")
    module(x, out)
    np.testing.assert_array_equal(out, x + 3)  # three OpenMP threads ran under qemu
    module(x, out, num_threads=1)
    np.testing.assert_array_equal(out, x + 1)
    with pytest.raises(tt.errors.ArgumentError, match="dtype float32"):
        module(x.astype("float64"), out)
    with pytest.warns(EmulatedTimingWarning, match="mean|say nothing"):
        timing = module.time_evaluator(number=2, repeat=3, min_repeat_ms=0.5)(x, out)
    assert timing.emulated and len(timing.results) == 3 and min(timing.results) > 0


@needs_tools
@only_emulated
def test_emulated_crash_and_error_code_are_kernel_runtime_errors():
    x, out = np.zeros(16, "float32"), np.zeros(16, "float32")
    with pytest.raises(KernelRuntimeError, match="SIGSEGV"):
        hand_written("volatile int* p = 0; *p = 1; return 0;").load()(x, out)
    with pytest.raises(KernelRuntimeError, match="error code 7"):
        hand_written("return 7;").load()(x, out)


def drivers_running(lib: Path) -> list[int]:
    """Processes whose command line names ``lib`` (a driver left running would be one)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(lib).encode() in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


@pytest.mark.slow
@needs_tools
@only_emulated
def test_runner_classifies_crash_hang_and_wrong_answer_under_emulation():
    task = Task(faulty_template, (16,), NEON)
    n = task.args[0]
    specs = tuple(ArgSpec(name, (n, n), "float32", name == "C") for name in "ABC")

    def kernel(body: str) -> BuildResult:
        source = f"#include <stdint.h>\nint32_t bad(void** args, int32_t num_threads) {{ {body} }}\n"
        path = compile_shared(source, NEON)
        return BuildResult(Library(path.stem, path.read_bytes(), "bad", specs, (), NEON_TEXT), ErrorKind.NONE, "", 0.0)

    hang = kernel("volatile int spin = 1; while (spin) {} return 0;")
    sch, op = task.instantiate(MODES["ok"])
    good = BuildResult(build_library(lower(sch, list(op.args)), NEON), ErrorKind.NONE, "", 0.0)
    builds = [kernel("volatile int* p = 0; *p = 1; return 0;"), hang, kernel("return 0;"), good]
    options = RunOptions(number=1, repeat=1, min_repeat_ms=0.0, timeout=1.0, emulation_timeout_scale=3.0)
    with LocalRunner(options) as runner:
        results = runner.run([MeasureInput(task, MODES["ok"])] * 4, builds)
    assert [r.error_kind for r in results] == [ErrorKind.RUNTIME_CRASH, ErrorKind.RUN_TIMEOUT,
                                               ErrorKind.WRONG_ANSWER, ErrorKind.NONE]
    assert "SIGSEGV" in results[0].error_msg and "under emulation" in results[1].error_msg
    assert "3.0 s" in results[1].error_msg  # the timeout, scaled for emulation
    assert all(r.emulated for r in results)
    time.sleep(0.5)
    assert drivers_running(hang.library.path()) == [], "the hanging driver outlived its killed worker"


# ------------------------------------------------------------------ tuning end to end

@needs_tools
@only_emulated
def test_tune_cli_on_neon_records_emulated_results(tmp_path, capsys):
    log = tmp_path / "neon.json"
    argv = ["tune", "matmul", "--shape", "M=8", "N=8", "K=8", "--target", NEON_TEXT, "--tuner", "random",
            "--trials", "4", "--batch-size", "4", "--log", str(log)]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert "note      kernels ran under an emulator" in out and "timings mean nothing" in out
    assert "[emulated: timings mean" in err  # the progress display (rich cuts lines at 80 columns)
    records = load_records(log)
    assert len(records) == 4 and all(r.emulated and r.ok and r.target == NEON_TEXT for r in records)
    assert all(json.loads(line)["emulated"] is True for line in log.read_text().splitlines())
    assert cli.main(["best", str(log)]) == 0
    assert "timings mean nothing" in capsys.readouterr().out
    assert cli.main(["bench", str(log)]) == 2  # timings under emulation are not benchmarks
    assert "tuned for aarch64" in capsys.readouterr().err


# ------------------------------------------------------------------ choosing tools, and their absence

def test_neon_flags_are_portable():
    flags = c_flags(NEON)
    assert "-march=armv8-a" in flags and "-march=native" not in flags


@only_emulated
def test_a_native_target_is_this_machine():
    with pytest.raises(TargetError, match="drop -native"):
        find_compiler(dataclasses.replace(NEON, native=True))


@needs_tools
@only_emulated
def test_cross_compiler_is_chosen_by_the_target(monkeypatch):
    cross = find_compiler(NEON)
    assert "aarch64" in os.path.basename(cross.path) and cross != find_compiler()
    monkeypatch.setenv("TENSORTUNE_CC_AARCH64", cross.path)
    assert find_compiler(NEON) == cross
    assert find_compiler(Target.host()).path != cross.path  # CC and the cross compiler are separate settings
    source = "int f(void) { return 1; }\n"
    assert compile_shared(source, NEON) != compile_shared(source, Target.host())  # the compiler is in the key


@only_emulated
@pytest.mark.skipif(shutil.which(TOOLS.compiler) is None, reason=f"needs {TOOLS.compiler_package}")
def test_a_cross_compiler_without_its_c_library_is_a_typed_error(monkeypatch, tmp_path):
    """Debian installs the target's C library (crti.o, libm) only as a recommendation of the cross compiler; without
    it every kernel fails to link, so finding the compiler says what to install instead."""
    monkeypatch.delenv("TENSORTUNE_CC_AARCH64", raising=False)
    monkeypatch.setitem(CROSS_TOOLS, "aarch64", dataclasses.replace(TOOLS, sysroot=str(tmp_path)))
    with pytest.raises(CompilerNotFoundError, match=f"cannot link.*apt-get install {TOOLS.libc_package}"):
        find_compiler(NEON)


@only_emulated
def test_missing_cross_tools_are_typed_errors_naming_the_packages(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no cross compiler, no emulator
    monkeypatch.delenv("TENSORTUNE_CC_AARCH64", raising=False)
    with pytest.raises(CompilerNotFoundError, match="apt-get install gcc-aarch64-linux-gnu"):
        find_compiler(NEON)
    with pytest.raises(EmulatorNotFoundError, match="apt-get install qemu-user"):
        find_emulator(NEON)
    with pytest.raises(CompilerNotFoundError, match="gcc-aarch64-linux-gnu"):
        check_toolchain(NEON)
    monkeypatch.setenv("TENSORTUNE_CC_AARCH64", str(tmp_path / "no-such-gcc"))
    with pytest.raises(CompilerNotFoundError, match="TENSORTUNE_CC_AARCH64="):
        find_compiler(NEON)
    with pytest.raises(CompilerNotFoundError, match="cannot cross-compile for arch 'riscv64'"):
        find_compiler(Target(tt.target.ISA.SCALAR, 1, "riscv64"))
    # A library built elsewhere for aarch64 cannot be loaded here without the emulator.
    monkeypatch.setenv("TENSORTUNE_CACHE_DIR", str(tmp_path / "cache"))
    data = b"an aarch64 library"
    library = Library(hashlib.sha256(data).hexdigest(), data, "kernel", (), (), NEON_TEXT)
    with pytest.raises(EmulatorNotFoundError, match="qemu-user"):
        library.load()


@only_emulated
def test_tune_cli_without_cross_tools_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("TENSORTUNE_CC_AARCH64", raising=False)
    log = tmp_path / "log.json"
    assert cli.main(["tune", "matmul", "--shape", "M=8", "N=8", "K=8", "--target", NEON_TEXT, "--log", str(log)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "gcc-aarch64-linux-gnu" in err
    assert not log.exists()

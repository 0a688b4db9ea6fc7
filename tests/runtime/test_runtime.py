"""Tests of the runtime: settings, targets, the compiler cache, and calling and timing kernels."""
from __future__ import annotations

import ctypes
import os
import subprocess

import numpy as np
import pytest

import tensortune.runtime.compiler as compiler_module
from tensortune.dtype import DType
from tensortune.env import SettingsError, settings
from tensortune.errors import ArgumentError, CompileError, CompilerNotFoundError, CompileTimeoutError
from tensortune.runtime import (
    ArgSpec,
    KernelRuntimeError,
    Module,
    TimingResult,
    c_flags,
    compile_shared,
    find_compiler,
    load_library,
)
from tensortune.runtime.timer import MAX_CALIBRATIONS, time_repeats
from tensortune.target import ISA, Target, TargetError, TargetKind

ADD_ONE = r"""
#include <stdint.h>
int32_t add_one(void** args, int32_t nt) {
    float* a = (float*)args[0];
    float* b = (float*)args[1];
    for (int i = 0; i < 16; i++) b[i] = a[i] + 1;
    return 0;
}
"""

# Parallel scaled add over a 1000-element float64 vector; also counts its calls.
AXPY = r"""
#include <stdint.h>
static int64_t calls;
int64_t axpy_calls(void) { return calls; }
int32_t axpy(void** args, int32_t nt) {
    double* x = (double*)args[0];
    double* y = (double*)args[1];
    double* out = (double*)args[2];
    calls++;
    #pragma omp parallel for num_threads(nt)
    for (int i = 0; i < 1000; i++) out[i] = 2.0 * x[i] + y[i];
    return 0;
}
"""

# out = (a * 2) + 3, with a * 2 kept in a workspace; fails with code 7 when the workspace is misaligned.
WITH_WORKSPACE = r"""
#include <stdint.h>
int32_t two_step(void** args, int32_t nt) {
    int32_t* a = (int32_t*)args[0];
    int32_t* out = (int32_t*)args[1];
    int32_t* tmp = (int32_t*)args[2];
    if ((uintptr_t)tmp % 64 != 0) return 7;
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 8; j++) tmp[i * 8 + j] = a[i * 8 + j] * 2;
    for (int i = 0; i < 32; i++) out[i] = tmp[i] + 3;
    return 0;
}
"""

FAILING = r"""
#include <stdint.h>
int32_t fail(void** args, int32_t nt) { return 3; }
"""

SCALAR = Target(ISA.SCALAR, 2, Target.host().arch)


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    """All tests share one fresh cache dir (so kernels compile once per run); tests may override it."""
    path = tmp_path_factory.getbasetemp() / "cache"
    monkeypatch.setenv("TENSORTUNE_CACHE_DIR", str(path))
    for name in ("CC", "TENSORTUNE_CFLAGS", "TENSORTUNE_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    return path


def build(source: str, entry: str, args: tuple[ArgSpec, ...], **kwargs) -> Module:
    return Module(compile_shared(source, SCALAR), entry, args, source=source, **kwargs)


def add_one_module() -> Module:
    f32 = (ArgSpec("a", (16,), DType.float32), ArgSpec("b", (16,), DType.float32))
    return build(ADD_ONE, "add_one", f32)


def axpy_module() -> Module:
    vec = DType.float64
    args = (ArgSpec("x", (1000,), vec), ArgSpec("y", (1000,), vec), ArgSpec("out", (1000,), vec))
    return build(AXPY, "axpy", args)


# --- settings ---------------------------------------------------------------------------------


def test_settings_read_at_call_time(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORTUNE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("TENSORTUNE_NUM_THREADS", "3")
    monkeypatch.setenv("TENSORTUNE_CFLAGS", "-DX=1 '-DMSG=\"a b\"'")
    s = settings()
    assert s.cache_dir == tmp_path / "c" and s.cache_dir.is_dir()
    assert s.num_threads == 3
    assert s.cflags == ("-DX=1", '-DMSG="a b"')
    assert s.cc is None


@pytest.mark.parametrize("value", ["four", "0", "-2", "1.5"])
def test_bad_thread_count_is_a_typed_error(monkeypatch, value):
    monkeypatch.setenv("TENSORTUNE_NUM_THREADS", value)
    with pytest.raises(SettingsError, match="TENSORTUNE_NUM_THREADS"):
        settings()


def test_unwritable_cache_dir_falls_back_to_temp(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TENSORTUNE_CACHE_DIR", str(blocker / "cache"))
    with pytest.warns(UserWarning, match="not writable"):
        s = settings()
    assert s.cache_dir.is_dir() and blocker not in s.cache_dir.parents


# --- targets ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target",
    [
        Target(ISA.AVX512, 2, "x86_64", native=True),
        Target(ISA.AVX2, 16, "x86_64"),
        Target(ISA.NEON, 4, "aarch64", native=True),
        Target(ISA.SCALAR, 1, "riscv64"),
        Target.host(),
    ],
)
def test_target_string_round_trip(target):
    assert Target.parse(str(target)) == target


def test_target_string_form():
    assert str(Target(ISA.AVX512, 2, "x86_64", native=True)) == "c -isa=avx512 -cores=2 -arch=x86_64 -native"


@pytest.mark.parametrize(
    "text",
    ["", "llvm -isa=avx2 -cores=2 -arch=x86_64", "c -isa=sse -cores=2 -arch=x86_64", "c -isa=neon -arch=x86_64",
     "c -arch=riscv64",
     "c -isa=avx2 -cores=two -arch=x86_64", "c -isa=avx2 -cores=2 -arch=x86_64 -fast", "c -isa=avx2 -cores=0 -arch=x86_64"],
)
def test_target_parse_errors(text):
    with pytest.raises(TargetError):
        Target.parse(text)


def test_short_target_spellings_fill_in_this_machine_and_the_isas_arch():
    host = Target.host()
    assert Target.parse("native") == Target.parse("host") == host
    assert Target.parse("avx2") == Target(ISA.AVX2, host.num_cores, "x86_64")
    assert Target.parse("c -isa=neon -cores=4") == Target(ISA.NEON, 4, "aarch64")
    assert Target.parse("c -isa=avx512 -cores=2 -arch=amd64").arch == "x86_64"
    assert str(Target.parse("c -isa=avx2")) == f"c -isa=avx2 -cores={host.num_cores} -arch=x86_64"


@pytest.mark.parametrize("isa, regs, lanes, flops", [(ISA.AVX512, 32, 16, 64), (ISA.AVX2, 16, 8, 32),
                                                     (ISA.NEON, 32, 4, 16)])
def test_what_a_schedule_must_fit(isa, regs, lanes, flops):
    t = Target(isa, 2, "aarch64" if isa is ISA.NEON else "x86_64")
    assert t.vector_registers == regs and t.lanes("float32") == lanes and t.lanes(DType.float64) == lanes // 2
    assert t.flops_per_cycle() == flops
    assert t.accumulator_budget(2) == regs - 3  # two operand vectors and one broadcast
    # x86 FMAs read an operand from memory: a tile may keep only the broadcast and a scratch register free
    assert t.max_accumulators(2) == (regs - 2 if isa is not ISA.NEON else regs - 3)
    assert t.caches.l1d > 0 and t.caches.l2 > t.caches.l1d  # typical sizes for a target that is not the host


def test_host_cache_sizes_come_from_sysfs(tmp_path):
    from tensortune.target import _host_caches

    for i, (kind, level, size) in enumerate([("Data", 1, "48K"), ("Instruction", 1, "32K"), ("Unified", 2, "1024K"),
                                             ("Unified", 3, "32M")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "type").write_text(kind + "\n")
        (d / "level").write_text(f"{level}\n")
        (d / "size").write_text(size + "\n")
    caches = _host_caches.__wrapped__(tmp_path)
    assert (caches.l1d, caches.l2, caches.l3) == (48 << 10, 1 << 20, 32 << 20)
    assert _host_caches.__wrapped__(tmp_path / "missing") is None


def test_target_validation():
    with pytest.raises(TargetError, match="num_cores"):
        Target(ISA.AVX2, 0, "x86_64")
    with pytest.raises(TargetError, match="arch"):
        Target(ISA.NEON, 4, "x86_64")
    with pytest.raises(TargetError, match="ISA"):
        Target("avx2", 4, "x86_64")


def test_lanes_and_vector_bytes():
    avx512 = Target(ISA.AVX512, 2, "x86_64")
    assert avx512.vector_bytes == 64
    assert avx512.lanes(DType.float32) == 16 and avx512.lanes(DType.float64) == 8
    assert Target(ISA.AVX2, 2, "x86_64").lanes(DType.int32) == 8
    assert Target(ISA.NEON, 2, "aarch64").lanes(DType.float32) == 4
    assert SCALAR.vector_bytes == 0 and SCALAR.lanes(DType.float64) == 1


def test_cflags():
    host = Target.host()
    assert "-march=native" in c_flags(host)
    narrower = Target(ISA.SCALAR if host.isa is not ISA.SCALAR else ISA.AVX2, 2, host.arch, native=True)
    assert "-march=native" not in c_flags(narrower)  # this machine, but only the ISA the target names
    portable = c_flags(Target(ISA.AVX512, 2, "x86_64"))
    assert "-march=x86-64-v4" in portable and "-mprefer-vector-width=512" in portable
    assert "-march=x86-64-v3" in c_flags(Target(ISA.AVX2, 2, "x86_64"))
    assert not any(f.startswith("-march") for f in c_flags(SCALAR))


def test_target_kind_is_the_first_word():
    t = Target.parse("c -isa=avx2 -cores=2 -arch=x86_64")
    assert t.kind is TargetKind.C and str(t).split()[0] == "c"
    with pytest.raises(TargetError, match="target kind"):
        Target.parse("opencl -isa=avx2 -cores=2 -arch=x86_64")


# --- compiler and cache -----------------------------------------------------------------------


def test_cache_hit_does_not_recompile(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORTUNE_CACHE_DIR", str(tmp_path))
    path = compile_shared(ADD_ONE, SCALAR)
    assert path.is_file() and tmp_path in path.parents
    find_compiler()  # probe the version now, so only compiler runs would reach subprocess.run below

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled although the library was cached")

    monkeypatch.setattr(compiler_module.subprocess, "run", no_compiling)
    assert compile_shared(ADD_ONE, SCALAR) == path
    assert not list(tmp_path.rglob("*.tmp")), "temporary files were left behind"


def test_key_covers_flags_and_source(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORTUNE_CACHE_DIR", str(tmp_path))
    plain = compile_shared(ADD_ONE, SCALAR)
    assert compile_shared(ADD_ONE, SCALAR, extra_flags=("-DVARIANT=1",)) != plain
    assert compile_shared(ADD_ONE + "\n", SCALAR) != plain
    monkeypatch.setenv("TENSORTUNE_CFLAGS", "-DVARIANT=2")
    assert compile_shared(ADD_ONE, SCALAR) != plain


def test_compile_error_carries_compiler_output():
    bad = "int32_t broken(void** args, int32_t nt) { return undefined_name; }"
    with pytest.raises(CompileError, match="undefined_name") as info:
        compile_shared(bad, SCALAR)
    assert info.value.source == bad
    assert "undefined_name" in info.value.output


def test_compile_timeout(monkeypatch):
    def slow(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    find_compiler()
    monkeypatch.setattr(compiler_module.subprocess, "run", slow)
    with pytest.raises(CompileTimeoutError, match="timed out"):
        compile_shared(ADD_ONE + "// new key\n", SCALAR, timeout=0.5)


def test_missing_compiler(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", "")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(CompilerNotFoundError, match="CC="):
        find_compiler()
    monkeypatch.delenv("CC")
    with pytest.raises(CompilerNotFoundError, match="apt-get install gcc"):
        find_compiler()


def test_cc_setting_is_used(monkeypatch):
    path = find_compiler().path
    monkeypatch.setenv("CC", path)
    assert find_compiler().path == path


def test_libraries_load_once():
    path = compile_shared(ADD_ONE, SCALAR)
    assert load_library(path) is load_library(str(path))


# --- modules ----------------------------------------------------------------------------------


def test_add_one_matches_numpy():
    mod = add_one_module()
    a = np.arange(16, dtype=np.float32)
    b = np.zeros(16, dtype=np.float32)
    mod(a, b)
    np.testing.assert_array_equal(b, a + 1)
    a2 = np.random.default_rng(0).standard_normal(16).astype(np.float32)
    mod(a2, b)  # new arrays: the pointer table must be rebuilt
    np.testing.assert_array_equal(b, a2 + 1)
    assert mod.entry == "add_one" and mod.source == ADD_ONE and len(mod.args) == 2


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_parallel_kernel_matches_numpy(threads):
    mod = axpy_module()
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(1000), rng.standard_normal(1000)
    out = np.empty(1000)
    mod(x, y, out, num_threads=threads)
    np.testing.assert_allclose(out, 2 * x + y)


def test_workspace_is_aligned_and_reused():
    args = (ArgSpec("a", (4, 8), DType.int32), ArgSpec("out", (4, 8), DType.int32))
    mod = build(WITH_WORKSPACE, "two_step", args, workspaces=(ArgSpec("tmp", (4, 8), DType.int32),))
    workspace = mod._workspace_arrays[0]
    a = np.arange(32, dtype=np.int32).reshape(4, 8)
    out = np.empty_like(a)
    for _ in range(2):
        mod(a, out)  # a misaligned workspace would make the kernel return 7
        np.testing.assert_array_equal(out, a * 2 + 3)
    assert mod._workspace_arrays[0] is workspace
    np.testing.assert_array_equal(workspace, a * 2)


def test_nonzero_return_code_raises():
    mod = build(FAILING, "fail", ())
    with pytest.raises(KernelRuntimeError, match="error code 3"):
        mod()
    with pytest.raises(KernelRuntimeError, match="error code 3"):
        mod.time_evaluator(number=2)()


def test_missing_entry_point():
    with pytest.raises(KernelRuntimeError, match="no_such_entry"):
        Module(compile_shared(ADD_ONE, SCALAR), "no_such_entry", ())


def test_argument_errors():
    mod = add_one_module()
    a = np.zeros(16, dtype=np.float32)
    with pytest.raises(ArgumentError, match="takes 2 arrays"):
        mod(a)
    with pytest.raises(ArgumentError, match="numpy array"):
        mod(a, [0.0] * 16)
    with pytest.raises(ArgumentError, match=r"float32.*float64.*astype"):
        mod(a, np.zeros(16))
    with pytest.raises(ArgumentError, match="shape"):
        mod(a, np.zeros(17, dtype=np.float32))
    with pytest.raises(ArgumentError, match="ascontiguousarray"):
        mod(a, np.zeros(32, dtype=np.float32)[::2])
    with pytest.raises(ArgumentError, match="num_threads"):
        mod(a, a.copy(), num_threads=0)


def test_arrays_changed_in_place_are_checked_again():
    mod = add_one_module()
    a, b = np.zeros(16, dtype=np.float32), np.zeros(16, dtype=np.float32)
    mod(a, b)
    b.shape = (4, 4)
    with pytest.raises(ArgumentError, match="shape"):
        mod(a, b)


def test_num_threads_default_from_env(monkeypatch):
    monkeypatch.setenv("TENSORTUNE_NUM_THREADS", "3")
    assert add_one_module().num_threads == 3
    f32 = (ArgSpec("a", (16,), DType.float32), ArgSpec("b", (16,), DType.float32))
    assert Module(compile_shared(ADD_ONE, SCALAR), "add_one", f32, num_threads=1).num_threads == 1


# --- timing -----------------------------------------------------------------------------------


def calls(mod: Module) -> int:
    counter = load_library(mod.lib_path).axpy_calls
    counter.restype = ctypes.c_int64
    return counter()


def test_time_evaluator_returns_repeat_results():
    mod = axpy_module()
    x, y, out = np.ones(1000), np.ones(1000), np.empty(1000)
    before = calls(mod)
    result = mod.time_evaluator(number=5, repeat=4, num_threads=1)(x, y, out)
    assert isinstance(result, TimingResult) and len(result.results) == 4
    assert all(t > 0 for t in result.results)
    assert calls(mod) - before == 1 + 5 * 4  # warm-up, then repeat * number
    assert result.min <= result.median <= max(result.results) and result.std >= 0
    np.testing.assert_allclose(out, 3.0)


def test_min_repeat_ms_scales_number():
    mod = axpy_module()
    x, y, out = np.ones(1000), np.ones(1000), np.empty(1000)
    before = calls(mod)
    result = mod.time_evaluator(number=1, repeat=2, min_repeat_ms=5, num_threads=1)(x, y, out)
    per_repeat = (calls(mod) - before) / 2  # upper bound: includes warm-up and calibration calls
    assert per_repeat > 10
    assert len(result.results) == 2 and result.mean > 0


class FakeClock:
    """``run(count)`` of a callable that takes ``per_call`` seconds; remembers each count it was asked for."""

    def __init__(self, per_call: float):
        self.per_call = per_call
        self.counts: list[int] = []

    def __call__(self, count: int) -> float:
        self.counts.append(count)
        return count * self.per_call


def test_time_repeats_warms_up_then_times_number_calls_without_min_repeat_ms():
    clock = FakeClock(1e-3)
    assert time_repeats(clock, number=5, repeat=3) == pytest.approx([1e-3] * 3)
    assert clock.counts == [1, 5, 5, 5]  # warm-up, no calibration


def test_time_repeats_raises_the_count_until_a_repeat_lasts_min_repeat_ms():
    clock = FakeClock(1e-4)  # 0.1 ms per call: 200 calls make 20 ms
    assert time_repeats(clock, number=1, repeat=2, min_repeat_ms=20.0) == pytest.approx([1e-4] * 2)
    assert clock.counts == [1, 1, 201, 201, 201]  # warm-up, calibration (1 call: too short; 201: long enough)
    instant = FakeClock(0.0)  # never long enough: calibration gives up after MAX_CALIBRATIONS tries
    time_repeats(instant, number=1, repeat=1, min_repeat_ms=1.0)
    assert len(instant.counts) == 1 + MAX_CALIBRATIONS + 1


def test_timing_result_statistics():
    r = TimingResult((1.0, 2.0, 6.0))
    assert (r.mean, r.median, r.min) == (3.0, 2.0, 1.0)
    assert r.std == pytest.approx(np.std([1.0, 2.0, 6.0]))


def test_time_evaluator_rejects_bad_parameters():
    with pytest.raises(ArgumentError, match="repeat"):
        add_one_module().time_evaluator(repeat=0)


def test_compiled_with_host_target():
    """The native target's flags are accepted by the compiler on this machine."""
    mod = Module(compile_shared(ADD_ONE, Target.host()), "add_one",
                 (ArgSpec("a", (16,), DType.float32), ArgSpec("b", (16,), DType.float32)))
    b = np.zeros(16, dtype=np.float32)
    mod(np.ones(16, dtype=np.float32), b)
    np.testing.assert_array_equal(b, 2.0)


def test_cache_dir_respected(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORTUNE_CACHE_DIR", str(tmp_path / "mine"))
    path = compile_shared(ADD_ONE, SCALAR)
    assert (tmp_path / "mine") in path.parents
    assert path.with_suffix(".c").read_text() == ADD_ONE
    assert os.path.getsize(path) > 0


def test_unload_library_forgets_and_closes_it(tmp_path, monkeypatch):
    """A measuring worker unloads each candidate: thousands of loaded libraries exhaust the process's mappings."""
    from tensortune.runtime import compiler as comp

    monkeypatch.setenv("TENSORTUNE_CACHE_DIR", str(tmp_path))
    src = "#include <stdint.h>\nint32_t seven(void** a, int32_t n) { return 7; }\n"
    path = comp.compile_shared(src, Target.host())
    lib = comp.load_library(path)
    assert lib.seven(None, 1) == 7
    comp.unload_library(path)
    assert str(path.resolve()) not in comp._loaded
    comp.unload_library(path)  # unloading twice is harmless
    assert comp.load_library(path).seven(None, 1) == 7  # and it can be loaded again
    comp.unload_library(path)

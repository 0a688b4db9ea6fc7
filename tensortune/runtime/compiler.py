"""Find a C compiler (a cross compiler for another architecture), build shared libraries with a
content-addressed disk cache, and load them."""
from __future__ import annotations

import _ctypes
import ctypes
import ctypes.util
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ..version import __version__
from ..env import cross_cc_variable, settings
from ..errors import CompileError, CompilerNotFoundError, CompileTimeoutError
from ..target import ISA, Target, TargetError
from .cross import CROSS_TOOLS, is_foreign

CACHE_FORMAT = 1  # bump when the layout or meaning of cached files changes
CANDIDATES = ("cc", "gcc", "clang")
LINK_FLAGS = ("-lm",)
ERROR_LINES = 40
INSTALL_HINT = "install gcc or clang, e.g. `apt-get install gcc`, or set CC=/path/to/compiler"
# -fno-tree-loop-vectorize: loops are vectorized explicitly by our code generator (or by `omp simd`, which
# stays on); gcc 12's auto-vectorizer miscompiles some guarded reductions (see tests/schedule/test_random_schedules.py).
BASE_CFLAGS = ("-O3", "-fopenmp", "-fPIC", "-shared", "-std=gnu11", "-ffp-contract=fast", "-fno-tree-loop-vectorize")
PROGRAM_CFLAGS = ("-O2", "-std=gnu11")  # helper programs (the emulator's driver), not kernels
PROGRAM_LINK_FLAGS = ("-ldl",)
_PORTABLE_MARCH = {ISA.AVX512: "x86-64-v4", ISA.AVX2: "x86-64-v3", ISA.NEON: "armv8-a"}


@dataclass(frozen=True, slots=True)
class Compiler:
    """A C compiler: absolute path and the first line of its ``--version`` output."""

    path: str
    version: str


def find_compiler(target: Target | None = None) -> Compiler:
    """The C compiler that builds for ``target`` (default: this machine).

    For this machine's architecture: the compiler named by ``CC``, else the first of cc, gcc, clang on
    PATH. For another architecture: its cross compiler (``TENSORTUNE_CC_<ARCH>``, else the usual name).
    Raises ``CompilerNotFoundError`` naming what to install, or ``TargetError`` for a ``-native`` target
    of another architecture (native means this machine).
    """
    if target is not None and is_foreign(target):
        if target.native:
            raise TargetError(f"target '{target}' says -native (this machine), but this machine is "
                              f"{Target.host().arch}; drop -native to cross-compile for {target.arch}")
        return _find_cross_compiler(target.arch)
    cc = settings().cc
    if cc is not None:
        found = _on_path(cc)
        if found is None:
            raise CompilerNotFoundError(f"CC={cc!r} is not an executable; fix or unset CC, or {INSTALL_HINT}")
        return found
    for name in CANDIDATES:
        found = _on_path(name)
        if found is not None:
            return found
    raise CompilerNotFoundError(f"no C compiler ({', '.join(CANDIDATES)}) found on PATH; {INSTALL_HINT}")


def _find_cross_compiler(arch: str) -> Compiler:
    tools = CROSS_TOOLS.get(arch)
    if tools is None:
        raise CompilerNotFoundError(f"tensortune cannot cross-compile for arch {arch!r} from this "
                                    f"{Target.host().arch} machine (it knows {', '.join(CROSS_TOOLS)}); "
                                    f"build on a {arch} machine")
    variable = cross_cc_variable(arch)
    configured = settings().cross_cc.get(arch)
    found = _on_path(configured or tools.compiler)
    if found is not None and configured is None and not tools.can_link():
        raise CompilerNotFoundError(f"{tools.compiler} is installed but cannot link: the {arch} C library is missing "
                                    f"from {tools.sysroot}; install Debian's {tools.libc_package} (`apt-get install "
                                    f"{tools.libc_package}`)")
    if found is not None:
        return found
    install = f"install Debian's {tools.compiler_package} (`apt-get install {tools.compiler_package}`)"
    if configured is not None:
        raise CompilerNotFoundError(f"{variable}={configured!r} is not an executable; fix or unset it, or {install}")
    raise CompilerNotFoundError(f"cross-compiling for {arch} needs {tools.compiler}, which is not on PATH: "
                                f"{install}, or set {variable}=/path/to/compiler")


def _on_path(name: str) -> Compiler | None:
    """The compiler ``name`` (on PATH, or a path), probed; None if there is no such executable."""
    path = shutil.which(name)
    return None if path is None else _probe(os.path.realpath(path), os.stat(path).st_mtime_ns)


def version_lines(path: str, what: str, hint: str) -> list[str]:
    """The non-empty lines ``path --version`` prints; ``CompilerNotFoundError`` (with ``hint``) when it does not
    run or fails (``what``: the kind of tool expected, for the message)."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompilerNotFoundError(f"{path} does not run ({e}); {hint}") from e
    lines = [ln for ln in done.stdout.strip().splitlines() if ln.strip()]
    if done.returncode != 0 or not lines:
        raise CompilerNotFoundError(f"{path} --version failed; is it {what}? {hint}")
    return lines


@functools.lru_cache(maxsize=16)
def _probe(path: str, mtime_ns: int) -> Compiler:
    """Run ``--version`` once per compiler binary (the mtime makes an upgrade a new entry)."""
    return Compiler(path=path, version=version_lines(path, "a C compiler", INSTALL_HINT)[0])


def c_flags(target: Target) -> tuple[str, ...]:
    """Compiler flags for building a kernel library for ``target``."""
    flags = list(BASE_CFLAGS)
    host = Target.host()
    if target.isa is not ISA.SCALAR:
        if target.native and target.isa is host.isa and target.arch == host.arch:
            flags.append("-march=native")
        else:  # another machine, or this one restricted to a narrower ISA (e.g. AVX2 code on an AVX-512 host)
            flags.append(f"-march={_PORTABLE_MARCH[target.isa]}")
            if target.native and target.arch == host.arch:
                flags.append("-mtune=native")
    if target.isa is ISA.AVX512:
        # gcc 12 does not know newer CPUs: -march=native then tunes for an older core that
        # prefers 256-bit (or narrower) vectors, so ask for full-width vectors explicitly.
        flags.append("-mprefer-vector-width=512")
    return tuple(flags)


def compile_shared(
    source: str,
    target: Target,
    extra_flags: tuple[str, ...] = (),
    timeout: float | None = None,
    compiler: Compiler | None = None,
) -> Path:
    """Build ``source`` into a shared library for ``target`` and return its path.

    Libraries are cached in the settings cache directory under a hash of everything that can
    change the result, so a second call with the same inputs returns at once without compiling.
    """
    flags = (*c_flags(target), *settings().cflags, *extra_flags)
    return _compile_cached(source, compiler or find_compiler(target), flags, LINK_FLAGS, ".so", timeout)


def compile_program(source: str, target: Target, timeout: float | None = None) -> Path:
    """Build ``source`` (with a ``main``) into an executable for ``target``'s architecture, cached like libraries."""
    return _compile_cached(source, find_compiler(target), PROGRAM_CFLAGS, PROGRAM_LINK_FLAGS, "", timeout)


def _compile_cached(source: str, cc: Compiler, flags: tuple[str, ...], link_flags: tuple[str, ...], suffix: str,
                    timeout: float | None) -> Path:
    key = cache_key(source, cc, flags, link_flags)
    out_dir = settings().cache_dir / "kernels"
    out = out_dir / f"{key}{suffix}"
    if out.exists():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    c_file = _write_atomic(out_dir / f"{key}.c", source)  # kept next to the output for inspection
    fd, tmp = tempfile.mkstemp(prefix=f".{key}-", suffix=f"{suffix}.tmp", dir=out_dir)
    os.close(fd)
    try:
        _run_compiler([cc.path, *flags, "-o", tmp, str(c_file), *link_flags], source, timeout)
        os.replace(tmp, out)  # atomic: other processes see either no output or a complete one
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def cached_library(key: str, data: bytes, suffix: str = ".so") -> Path:
    """The path of the library ``key`` in this machine's cache, written from ``data`` if it is not there
    (a library compiled on another machine and sent as bytes; ``suffix``: ``.cubin`` for a GPU kernel)."""
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        raise ValueError(f"not a library content key: {key!r}")
    out_dir = settings().cache_dir / "kernels"
    lib = out_dir / f"{key}{suffix}"
    if not lib.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key}-", suffix=f"{suffix}.tmp", dir=out_dir)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, lib)
    return lib


def cache_key(source: str, compiler: Compiler, flags: tuple[str, ...],
              link_flags: tuple[str, ...] = LINK_FLAGS) -> str:
    """sha256 over every input that can change the compiled library (or program)."""
    parts = [CACHE_FORMAT, __version__, compiler.path, compiler.version, list(flags), list(link_flags), source]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _run_compiler(command: list[str], source: str, timeout: float | None) -> None:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        output = _text(e.stdout) + _text(e.stderr)
        raise CompileTimeoutError(f"compiler timed out after {timeout} s: {' '.join(command)}", source,
                                  output) from None
    if done.returncode != 0:
        output = done.stdout + done.stderr
        head = "\n".join(done.stderr.splitlines()[:ERROR_LINES])
        raise CompileError(
            f"C compilation failed (exit {done.returncode}): {' '.join(command)}\n{head}", source, output
        )


def _text(data: bytes | str | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def _write_atomic(path: Path, text: str) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


_loaded: dict[str, ctypes.CDLL] = {}
_loaded_lock = threading.Lock()


def unload_library(path: Path | str) -> None:
    """Forget and dlclose a library loaded by ``load_library`` (its functions must not be called again).

    A process that measures thousands of candidates must unload them: each loaded library holds memory
    mappings, and the kernel refuses new ones past ``vm.max_map_count``.
    """
    key = str(Path(path).resolve())
    with _loaded_lock:
        lib = _loaded.pop(key, None)
    if lib is not None:
        _pin_openmp_runtime()
        _ctypes.dlclose(lib._handle)


@functools.lru_cache(maxsize=1)
def _pin_openmp_runtime() -> None:
    """Keep the OpenMP runtime loaded for the life of the process: if closing the last kernel that
    uses it unloaded it, its idle pool threads would run unmapped code and crash the process."""
    for name in ("gomp", "omp", "iomp5"):
        found = ctypes.util.find_library(name)
        if found:
            ctypes.CDLL(found, mode=ctypes.RTLD_GLOBAL)


def load_library(path: Path | str) -> ctypes.CDLL:
    """Load a shared library once per process; later calls with the same path return the same handle."""
    key = str(Path(path).resolve())
    with _loaded_lock:
        lib = _loaded.get(key)
        if lib is None:
            lib = _loaded[key] = ctypes.CDLL(key)
        return lib

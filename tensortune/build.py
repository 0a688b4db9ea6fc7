"""The one build path: loop IR -> source -> shared library (``build_library``) -> callable ``Module``.

Each target kind has a backend: a code generator (``PrimFunc`` -> source) and a toolchain (source ->
library in this machine's cache). ``build`` (schedules), the measurement builder and the CLI all go
through ``build_library``. Its result, a ``Library``, carries the library's bytes and content key, so
it can be measured on another machine than the one that compiled it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .arith import Analyzer
from .codegen import codegen_c, codegen_cuda
from .ir import PrimFunc, Store
from .lower import lower
from .lower.gpu import Launch, gpu_launch
from .runtime import ArgSpec, Module, compile_shared
from .runtime.compiler import cached_library, find_compiler
from .runtime.cross import is_foreign
from .runtime.emulator import EmulatedModule, find_emulator
from .runtime.nvcc import compile_cubin, find_nvcc
from .runtime.module import BaseModule
from .schedule import Schedule
from .target import Target, TargetError, TargetKind
from .te import Tensor
from .te.expr import walk


@dataclass(frozen=True)
class Backend:
    """How one target kind builds: ``codegen(func, target, analyzer) -> source`` and
    ``compile(source, target, timeout) -> path`` of the library in the local cache (cached by content);
    a GPU backend also has ``launch(func, target)``, the grid and blocks its kernel is launched with."""

    codegen: Callable[[PrimFunc, Target, Analyzer], str]
    compile: Callable[..., Path]
    suffix: str = ".so"
    launch: Callable[[PrimFunc, Target], Launch] | None = None


def _compile_c(source: str, target: Target, timeout: float | None) -> Path:
    return compile_shared(source, target, timeout=timeout)


#: target kind -> backend
BACKENDS: dict[TargetKind, Backend] = {
    TargetKind.C: Backend(codegen_c, _compile_c),
    TargetKind.CUDA: Backend(codegen_cuda, compile_cubin, ".cubin", gpu_launch),
}


@dataclass(frozen=True)
class Library:
    """A compiled kernel: content key and bytes of the shared library, its entry point and arguments."""

    key: str
    data: bytes = field(repr=False)
    entry: str
    args: tuple[ArgSpec, ...]
    workspaces: tuple[ArgSpec, ...]
    target: str
    source: str = field(default="", repr=False, compare=False)
    launch: Launch | None = None  # a GPU kernel's grid and blocks; None for a CPU library

    def path(self) -> Path:
        """The library as a file in this machine's cache (written from ``data`` when absent)."""
        return cached_library(self.key, self.data, ".cubin" if self.launch is not None else ".so")

    def load(self, num_threads: int | None = None) -> BaseModule:
        """The kernel, callable on numpy arrays: a ``Module`` loaded into this process, for a target of
        another architecture an ``EmulatedModule`` (raises ``EmulatorNotFoundError`` naming what to install),
        for a GPU a ``CudaModule`` (raises ``CudaUnavailableError`` without a GPU and its Python binding)."""
        target = Target.parse(self.target)
        if target.kind is TargetKind.CUDA:
            from .runtime.cuda import CudaModule

            assert self.launch is not None, "a CUDA library carries its launch"
            return CudaModule(self.path(), self.entry, self.args, self.workspaces, self.source, num_threads, target,
                              launch=self.launch)
        kind = EmulatedModule if is_foreign(target) else Module
        return kind(self.path(), self.entry, self.args, self.workspaces, self.source, num_threads, target)


def backend_of(target: Target) -> Backend:
    backend = BACKENDS.get(target.kind)
    if backend is None:
        raise TargetError(f"no backend builds targets of kind '{target.kind.value}'; known kinds: "
                          f"{', '.join(k.value for k in BACKENDS)}")
    return backend


def arg_specs(func: PrimFunc) -> tuple[tuple[ArgSpec, ...], tuple[ArgSpec, ...]]:
    """The runtime's view of a kernel's arguments (outputs marked) and of its workspaces."""
    written = {n.buffer.name for n in walk(func.body) if isinstance(n, Store)}
    args = tuple(ArgSpec(b.name, b.shape, b.dtype, b.name in written) for b in func.args)
    return args, tuple(ArgSpec(b.name, b.shape, b.dtype) for b in func.workspaces)


def generate_source(func: PrimFunc, target: Target, analyzer: Analyzer | None = None) -> str:
    """The source code of ``func`` in the language of ``target``'s backend."""
    return backend_of(target).codegen(func, target, analyzer or Analyzer())


def build_library(func: PrimFunc, target: Target, timeout: float | None = None, analyzer: Analyzer | None = None,
                  source: str | None = None) -> Library:
    """Generate ``func``'s source for ``target`` (unless ``source`` is given) and compile it.

    Raises ``CodegenError``, ``CompileError`` (``CompileTimeoutError`` after ``timeout`` seconds) or
    ``CompilerNotFoundError``.
    """
    backend = backend_of(target)
    if source is None:
        source = backend.codegen(func, target, analyzer or Analyzer())
    launch = backend.launch(func, target) if backend.launch is not None else None
    path = backend.compile(source, target, timeout)
    args, work = arg_specs(func)
    return Library(path.stem, path.read_bytes(), func.name, args, work, str(target), source, launch)


def resolve_target(target: Target | str | None) -> Target:
    """``target`` as a ``Target`` (parsed from its string form); this machine when None."""
    return Target.parse(target) if isinstance(target, str) else (target or Target.host())


def check_toolchain(target: Target) -> None:
    """Raise now, saying what to install, if this machine cannot build kernels for ``target`` and run them
    (``CompilerNotFoundError``, ``EmulatorNotFoundError``); a tuning run calls it before its first build.
    For a GPU target only the compiler is checked here: running needs the GPU, which the runner reports."""
    if target.kind is TargetKind.CUDA:
        find_nvcc()
        return
    find_compiler(target)
    if is_foreign(target):
        find_emulator(target)


def build(sch: Schedule, args: Sequence[Tensor] | None = None, target: Target | str | None = None,
          name: str = "kernel", num_threads: int | None = None) -> BaseModule:
    """Compile a schedule for ``target`` (default: this machine) and load it.

    ``args`` orders the arrays the kernel takes (default: the inputs in declaration order, then the
    outputs). The returned module also carries the lowered IR as ``module.ir`` and the C as ``module.source``.
    A target of another architecture (``"c -isa=neon -cores=2 -arch=aarch64"`` on an x86 machine) is
    cross-compiled and runs under an emulator (``EmulatedModule``: right results, meaningless timings).
    """
    tgt = resolve_target(target)
    analyzer = Analyzer()
    func = lower(sch, args, name, analyzer=analyzer)
    module = build_library(func, tgt, analyzer=analyzer).load(num_threads)
    module.ir = func
    return module

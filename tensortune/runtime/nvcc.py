"""Find nvcc and build CUDA C into a cubin, cached by content like C libraries (``compiler._compile_cached``)."""
from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

from ..env import settings
from ..errors import CompilerNotFoundError
from ..target import Target, TargetError, TargetKind
from .compiler import Compiler, _compile_cached, version_lines

#: nvcc flags of every kernel (the arch comes from the target); -x cu: the cached source file ends in .c
NVCC_FLAGS = ("-cubin", "-O3", "-x", "cu")
INSTALL_HINT = ("install the CUDA toolkit (nvcc) and put it on PATH, or set TENSORTUNE_NVCC=/path/to/nvcc "
                "(e.g. /usr/local/cuda/bin/nvcc)")


def find_nvcc() -> Compiler:
    """nvcc from ``TENSORTUNE_NVCC``, else PATH, else ``/usr/local/cuda/bin``; ``CompilerNotFoundError`` naming
    what to install when there is none."""
    configured = settings().nvcc
    candidates = [configured] if configured else ["nvcc", "/usr/local/cuda/bin/nvcc"]
    for name in candidates:
        path = shutil.which(name)
        if path is not None:
            return _probe(os.path.realpath(path), os.stat(path).st_mtime_ns)
    where = f"TENSORTUNE_NVCC={configured!r} is not an executable" if configured else "nvcc is not on PATH"
    raise CompilerNotFoundError(f"{where}; building for a cuda target needs it: {INSTALL_HINT}")


@functools.lru_cache(maxsize=4)
def _probe(path: str, mtime_ns: int) -> Compiler:
    lines = version_lines(path, "nvcc", INSTALL_HINT)
    # The release line ("Cuda compilation tools, release 13.0, V13.0.88") names the version; the first does not.
    release = next((ln for ln in lines if "release" in ln), lines[-1])
    return Compiler(path=path, version=release.strip())


def nvcc_flags(target: Target) -> tuple[str, ...]:
    if target.kind is not TargetKind.CUDA:
        raise TargetError(f"nvcc builds for cuda targets, got '{target}'")
    return (*NVCC_FLAGS, f"-arch={target.arch}")


def compile_cubin(source: str, target: Target, timeout: float | None = None) -> Path:
    """Build CUDA C ``source`` into a cubin for ``target``'s arch; the path in the kernel cache."""
    return _compile_cached(source, find_nvcc(), nvcc_flags(target), (), ".cubin", timeout)

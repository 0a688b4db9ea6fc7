"""Settings read from the environment. This is the only module that reads environment variables.

| Variable                   | Meaning                                            | Default                   |
|----------------------------|----------------------------------------------------|---------------------------|
| ``CC``                     | C compiler (name on PATH or path)                  | first of cc/gcc/clang     |
| ``TENSORTUNE_CACHE_DIR``   | where compiled kernels are cached                  | ``~/.cache/tensortune``   |
| ``TENSORTUNE_NUM_THREADS`` | default thread count of kernels                    | number of usable cores    |
| ``TENSORTUNE_CFLAGS``      | extra compiler flags (shell-quoted)                | none                      |
| ``TENSORTUNE_CC_AARCH64``  | cross compiler for ``-arch=aarch64`` on other CPUs | ``aarch64-linux-gnu-gcc`` |
| ``TENSORTUNE_NVCC``        | nvcc for ``cuda`` targets (name on PATH or path)    | ``nvcc``, then CUDA's     |
"""
from __future__ import annotations

import os
import shlex
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from .errors import TensortuneError

DEFAULT_CACHE_DIR = Path("~/.cache/tensortune")
#: architectures whose cross compiler a setting names (``cross_cc_variable``)
CROSS_ARCHES = ("aarch64",)


class SettingsError(TensortuneError, ValueError):
    """An environment variable has a value tensortune cannot use."""


@dataclass(frozen=True, slots=True)
class Settings:
    """A snapshot of the environment settings."""

    cc: str | None
    cache_dir: Path
    num_threads: int
    cflags: tuple[str, ...]
    cross_cc: Mapping[str, str]  # arch -> cross compiler (name on PATH or path), for the arches set
    nvcc: str | None = None  # nvcc for cuda targets (name on PATH or path)


def settings() -> Settings:
    """Read the environment now (not at import time), so changes to ``os.environ`` take effect."""
    return Settings(
        cc=_get("CC"),
        cache_dir=_cache_dir(_get("TENSORTUNE_CACHE_DIR")),
        num_threads=_num_threads(_get("TENSORTUNE_NUM_THREADS")),
        cflags=_cflags(_get("TENSORTUNE_CFLAGS")),
        cross_cc={arch: cc for arch in CROSS_ARCHES if (cc := _get(cross_cc_variable(arch))) is not None},
        nvcc=_get("TENSORTUNE_NVCC"),
    )


def cross_cc_variable(arch: str) -> str:
    """The variable that names the cross compiler for ``arch``: ``TENSORTUNE_CC_AARCH64`` for aarch64."""
    return f"TENSORTUNE_CC_{arch.upper()}"


def usable_cores() -> int:
    """Cores this process may run on (respects CPU affinity, e.g. ``taskset`` or containers)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def _get(name: str) -> str | None:
    """An environment variable, with empty or blank values treated as unset."""
    value = os.environ.get(name, "").strip()
    return value or None


def _num_threads(raw: str | None) -> int:
    if raw is None:
        return usable_cores()
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise SettingsError(
            f"TENSORTUNE_NUM_THREADS={raw!r} is not a positive integer; "
            "set it to e.g. TENSORTUNE_NUM_THREADS=4 or unset it to use all cores"
        )
    return value


def _cflags(raw: str | None) -> tuple[str, ...]:
    if raw is None:
        return ()
    try:
        return tuple(shlex.split(raw))
    except ValueError as e:
        raise SettingsError(f"TENSORTUNE_CFLAGS={raw!r} cannot be split into flags ({e}); check its quoting") from e


def _cache_dir(raw: str | None) -> Path:
    """The requested cache directory if it is writable, else a per-user directory under the temp dir."""
    wanted = Path(raw if raw is not None else DEFAULT_CACHE_DIR).expanduser()
    if _writable(wanted):
        return wanted
    fallback = Path(tempfile.gettempdir()) / f"tensortune-{_user_id()}"
    if raw is not None:
        warnings.warn(f"TENSORTUNE_CACHE_DIR={raw!r} is not writable; caching kernels in {fallback} instead", stacklevel=3)
    if not _writable(fallback):
        raise SettingsError(
            f"no writable cache directory: tried {wanted} and {fallback}; "
            "set TENSORTUNE_CACHE_DIR to a writable directory"
        )
    return fallback


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(path, os.W_OK | os.X_OK)


def _user_id() -> str:
    return str(os.getuid()) if hasattr(os, "getuid") else "user"

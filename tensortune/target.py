"""The machine a kernel is compiled for: backend kind, vector ISA, core count, architecture.

A top-level concept: templates, code generation, features and the runtime all read it.
"""
from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from .dtype import DType
from .env import usable_cores
from .errors import TensortuneError

class TargetError(TensortuneError, ValueError):
    """A target is malformed, or its string form cannot be parsed."""


class TargetKind(Enum):
    """Which code generator and toolchain build for a target (the first word of its string form)."""

    C = "c"  # C99 with OpenMP and vector extensions, built by the system C compiler


class ISA(Enum):
    """The widest SIMD instruction set a target may use."""

    AVX512 = "avx512"
    AVX2 = "avx2"
    NEON = "neon"
    SCALAR = "scalar"

    @property
    def vector_bytes(self) -> int:
        """Width of one vector register in bytes; 0 means no SIMD."""
        return _VECTOR_BYTES[self]


_VECTOR_BYTES = {ISA.AVX512: 64, ISA.AVX2: 32, ISA.NEON: 16, ISA.SCALAR: 0}
_ISA_ARCHES = {ISA.AVX512: ("x86_64",), ISA.AVX2: ("x86_64",), ISA.NEON: ("aarch64",)}
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


@dataclass(frozen=True, slots=True)
class Target:
    """A CPU to compile for. ``native`` means "the machine we run on": compile with ``-march=native``."""

    isa: ISA
    num_cores: int
    arch: str
    native: bool = False
    kind: TargetKind = TargetKind.C

    def __post_init__(self) -> None:
        if not isinstance(self.kind, TargetKind):
            raise TargetError(f"kind must be a TargetKind member such as TargetKind.C, got {self.kind!r}")
        if not isinstance(self.isa, ISA):
            raise TargetError(f"isa must be an ISA member such as ISA.AVX2, got {self.isa!r}")
        if not isinstance(self.num_cores, int) or isinstance(self.num_cores, bool) or self.num_cores < 1:
            raise TargetError(f"num_cores must be an integer >= 1, got {self.num_cores!r}")
        if not self.arch or any(c.isspace() for c in self.arch):
            raise TargetError(f"arch must be a name without spaces such as 'x86_64', got {self.arch!r}")
        arches = _ISA_ARCHES.get(self.isa)
        if arches is not None and self.arch not in arches:
            raise TargetError(f"isa {self.isa.value} needs arch {' or '.join(arches)}, got {self.arch!r}")

    @property
    def vector_bytes(self) -> int:
        return self.isa.vector_bytes

    def lanes(self, dtype: DType) -> int:
        """Elements of ``dtype`` in one vector register (1 on scalar targets)."""
        return max(1, self.vector_bytes // dtype.bytes)

    def __str__(self) -> str:
        return f"{self.kind.value} -isa={self.isa.value} -cores={self.num_cores} -arch={self.arch}" + (" -native" if self.native else "")

    @staticmethod
    def parse(text: str) -> Target:
        """Inverse of ``str(target)``, e.g. ``Target.parse("c -isa=avx2 -cores=8 -arch=x86_64")``."""
        example = "for example 'c -isa=avx2 -cores=8 -arch=x86_64 -native'"
        words = text.split()
        kinds = {k.value: k for k in TargetKind}
        if not words or words[0] not in kinds:
            raise TargetError(f"target string must start with a target kind ({', '.join(kinds)}), got {text!r}; "
                              f"{example}")
        options: dict[str, str] = {}
        native = False
        for word in words[1:]:
            if word == "-native":
                native = True
                continue
            key, sep, value = word.partition("=")
            if not sep or key not in ("-isa", "-cores", "-arch") or key in options:
                raise TargetError(f"unexpected or repeated option {word!r} in target {text!r}; {example}")
            options[key] = value
        missing = [k for k in ("-isa", "-cores", "-arch") if k not in options]
        if missing:
            raise TargetError(f"target {text!r} lacks {', '.join(missing)}; {example}")
        try:
            isa = ISA(options["-isa"])
        except ValueError:
            names = ", ".join(i.value for i in ISA)
            raise TargetError(f"unknown isa {options['-isa']!r} in target {text!r}; use one of {names}") from None
        try:
            cores = int(options["-cores"])
        except ValueError:
            raise TargetError(f"-cores must be an integer in target {text!r}") from None
        return Target(isa=isa, num_cores=cores, arch=options["-arch"], native=native, kind=kinds[words[0]])

    @staticmethod
    @functools.cache
    def host() -> Target:
        """The machine we run on, detected once per process."""
        machine = platform.machine().lower()
        arch = _ARCH_ALIASES.get(machine, machine) or "unknown"
        return Target(isa=_host_isa(arch), num_cores=usable_cores(), arch=arch, native=True)


def _host_isa(arch: str) -> ISA:
    if arch == "aarch64":
        return ISA.NEON
    if arch != "x86_64":
        return ISA.SCALAR
    flags = _cpu_flags()
    if "avx512f" in flags:
        return ISA.AVX512
    if {"avx2", "fma"} <= flags:
        return ISA.AVX2
    return ISA.SCALAR


def _cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """CPU feature flags from the first ``flags`` line of /proc/cpuinfo (empty where there is none)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()

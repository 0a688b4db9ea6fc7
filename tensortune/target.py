"""The machine a kernel is compiled for: backend kind, vector ISA, core count, architecture, and
what a schedule must fit there (vector lanes and registers, FMA throughput, cache sizes).

A top-level concept: templates, code generation, features and the runtime all read it. Templates
ask the target (``target.lanes(dtype)``, ``target.vector_registers``) instead of hard-coding widths.
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
    CUDA = "cuda"  # CUDA C for NVIDIA GPUs, built by nvcc into a cubin


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


    @property
    def vector_registers(self) -> int:
        """Architectural vector registers (zmm0-31, ymm0-15, v0-31); scalar code: the float registers."""
        return _VECTOR_REGISTERS[self]

    @property
    def fma_units(self) -> int:
        """Fused multiply-add instructions a core can start per cycle on full-width vectors."""
        return 2


_VECTOR_BYTES = {ISA.AVX512: 64, ISA.AVX2: 32, ISA.NEON: 16, ISA.SCALAR: 0}
_VECTOR_REGISTERS = {ISA.AVX512: 32, ISA.AVX2: 16, ISA.NEON: 32, ISA.SCALAR: 16}
_ISA_ARCHES = {ISA.AVX512: ("x86_64",), ISA.AVX2: ("x86_64",), ISA.NEON: ("aarch64",)}
_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


@dataclass(frozen=True, slots=True)
class GpuLimits:
    """What one thread block of an NVIDIA GPU may use (``Target.gpu``)."""

    max_threads_per_block: int = 1024
    max_block_dims: tuple[int, int, int] = (1024, 1024, 64)
    max_grid_dims: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    shared_memory_per_block: int = 48 << 10  # without opting in (the default of every launch)
    max_shared_memory_per_block: int = 48 << 10  # with the opt-in attribute of the kernel
    registers_per_block: int = 64 << 10
    max_registers_per_thread: int = 255
    warp_size: int = 32
    num_sms: int = 132


#: compute capability -> shared memory a block may opt in to (bytes); every other arch: 48 KiB
_OPT_IN_SHARED = {"sm_70": 96 << 10, "sm_75": 64 << 10, "sm_80": 163 << 10, "sm_86": 99 << 10,
                  "sm_87": 163 << 10, "sm_89": 99 << 10, "sm_90": 227 << 10, "sm_100": 227 << 10,
                  "sm_120": 99 << 10}
_SMS = {"sm_90": 132, "sm_80": 108}


@dataclass(frozen=True, slots=True)
class Target:
    """A CPU to compile for. ``native`` means "the machine we run on": compile with ``-march=native``.

    A CUDA target (``kind=TargetKind.CUDA``, from ``"cuda -arch=sm_90"``) is an NVIDIA GPU of that
    compute capability: ``isa`` is ``SCALAR``, ``num_cores`` 1, and ``shared_memory`` the bytes of
    shared memory a thread block may use (0: the 48 KiB every launch gets; more needs the opt-in limit
    of the arch, up to 227 KiB on sm_90). Its limits are ``target.gpu``.
    """

    isa: ISA
    num_cores: int
    arch: str
    native: bool = False
    kind: TargetKind = TargetKind.C
    shared_memory: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.kind, TargetKind):
            raise TargetError(f"kind must be a TargetKind member such as TargetKind.C, got {self.kind!r}")
        if self.kind is TargetKind.CUDA:
            self._check_cuda()
            return
        if self.shared_memory:
            raise TargetError(f"shared_memory is a setting of CUDA targets, got {self.shared_memory} for a "
                              f"{self.kind.value} target")
        if not isinstance(self.isa, ISA):
            raise TargetError(f"isa must be an ISA member such as ISA.AVX2, got {self.isa!r}")
        if not isinstance(self.num_cores, int) or isinstance(self.num_cores, bool) or self.num_cores < 1:
            raise TargetError(f"num_cores must be an integer >= 1, got {self.num_cores!r}")
        if not self.arch or any(c.isspace() for c in self.arch):
            raise TargetError(f"arch must be a name without spaces such as 'x86_64', got {self.arch!r}")
        arches = _ISA_ARCHES.get(self.isa)
        if arches is not None and self.arch not in arches:
            raise TargetError(f"isa {self.isa.value} needs arch {' or '.join(arches)}, got {self.arch!r}")

    def _check_cuda(self) -> None:
        if not (self.arch.startswith("sm_") and self.arch[3:].isdigit()):
            raise TargetError(f"a cuda target's arch is a compute capability such as 'sm_90', got {self.arch!r}")
        if self.isa is not ISA.SCALAR or self.num_cores != 1 or self.native:
            raise TargetError("a cuda target has isa scalar, num_cores 1 and no -native; make it with "
                              "Target.parse('cuda -arch=sm_90') or Target.cuda('sm_90')")
        limit = _OPT_IN_SHARED.get(self.arch, 48 << 10)
        if not isinstance(self.shared_memory, int) or not 0 <= self.shared_memory <= limit:
            raise TargetError(f"-shared_memory must be between 0 and {limit >> 10} KiB on {self.arch} (its "
                              f"opt-in limit), got {self.shared_memory!r} bytes")

    @staticmethod
    def cuda(arch: str = "sm_90", shared_memory: int = 0) -> Target:
        """An NVIDIA GPU of compute capability ``arch`` (see the class docstring)."""
        return Target(ISA.SCALAR, 1, arch, kind=TargetKind.CUDA, shared_memory=shared_memory)

    @property
    def gpu(self) -> GpuLimits:
        """The limits of one thread block (a ``TargetError`` for CPU targets)."""
        if self.kind is not TargetKind.CUDA:
            raise TargetError(f"target '{self}' is not a GPU; GPU limits exist for 'cuda -arch=...' targets")
        return _gpu_limits(self.arch, self.shared_memory)

    @property
    def vector_bytes(self) -> int:
        return self.isa.vector_bytes

    def lanes(self, dtype: DType | str) -> int:
        """Elements of ``dtype`` in one vector register (1 on scalar targets)."""
        return max(1, self.vector_bytes // DType.of(dtype).bytes)

    @property
    def vector_registers(self) -> int:
        """Vector registers a register tile (accumulators and operands) must fit in."""
        return self.isa.vector_registers

    def flops_per_cycle(self, dtype: DType | str = DType.float32) -> int:
        """Peak floating-point operations per cycle and core (FMA units x lanes x 2)."""
        return self.isa.fma_units * self.lanes(dtype) * 2

    def accumulator_budget(self, operand_vectors: int = 1) -> int:
        """Vector registers left for accumulators when ``operand_vectors`` registers hold the operands of one
        step (the vectors loaded from the packed operand) and one more holds a broadcast scalar: what a
        hand-written register tile should use."""
        return max(1, self.vector_registers - operand_vectors - 1)

    def max_accumulators(self, operand_vectors: int = 1) -> int:
        """The most accumulator registers a register tile may use: on x86 an FMA reads one operand straight
        from memory, so only a broadcast and a scratch register must stay free (whether streaming the
        operands is faster is for measurement to tell); elsewhere the operands need registers too."""
        if self.isa in (ISA.AVX2, ISA.AVX512):
            return self.vector_registers - 2
        return self.accumulator_budget(operand_vectors)

    @property
    def caches(self) -> CacheSizes:
        """Data cache sizes: read from Linux sysfs for the host, typical values otherwise."""
        if self.native:
            host = _host_caches()
            if host is not None:
                return host
        return _DEFAULT_CACHES[self.isa]

    def __str__(self) -> str:
        if self.kind is TargetKind.CUDA:
            return f"cuda -arch={self.arch}" + (f" -shared_memory={self.shared_memory}" if self.shared_memory else "")
        return f"{self.kind.value} -isa={self.isa.value} -cores={self.num_cores} -arch={self.arch}" + (" -native" if self.native else "")

    @staticmethod
    def parse(text: str) -> Target:
        """A target from its string form (the inverse of ``str(target)``), or a shorter spelling.

        ``"c -isa=avx2 -cores=8 -arch=x86_64"``; omitted ``-cores`` means this machine's usable cores,
        omitted ``-arch`` the architecture of the ISA, omitted ``-isa`` this machine's. ``"native"`` (or
        ``"host"``) is this machine, and a bare ISA name such as ``"avx2"`` means ``"c -isa=avx2"``.
        ``"cuda -arch=sm_90"`` is an NVIDIA GPU (``-arch`` defaults to sm_90; ``-shared_memory=N`` bytes,
        or ``96K``, opts in to more shared memory per block than the default 48 KiB).
        """
        example = "for example 'c -isa=avx2 -cores=8 -arch=x86_64', 'avx2', 'native' or 'cuda -arch=sm_90'"
        words = text.split()
        if words and words[0] == TargetKind.CUDA.value:
            return _parse_cuda(text, words[1:])
        if len(words) == 1 and words[0] in ("native", "host"):
            return Target.host()
        if len(words) == 1 and words[0] in {i.value for i in ISA}:
            words = ["c", f"-isa={words[0]}"]
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
        host = Target.host()
        try:
            isa = ISA(options["-isa"]) if "-isa" in options else None
        except ValueError:
            names = ", ".join(i.value for i in ISA)
            raise TargetError(f"unknown isa {options['-isa']!r} in target {text!r}; use one of {names}") from None
        arch = options.get("-arch") or (_ISA_ARCHES.get(isa, (host.arch,))[0] if isa is not None else host.arch)
        arch = _ARCH_ALIASES.get(arch, arch)
        if isa is None:
            if arch != host.arch:
                raise TargetError(f"target {text!r} names arch {arch} but no -isa; add e.g. -isa=neon")
            isa = host.isa
        try:
            cores = int(options["-cores"]) if "-cores" in options else host.num_cores
        except ValueError:
            raise TargetError(f"-cores must be an integer in target {text!r}") from None
        return Target(isa=isa, num_cores=cores, arch=arch, native=native, kind=kinds[words[0]])

    @staticmethod
    @functools.cache
    def host() -> Target:
        """The machine we run on, detected once per process."""
        machine = platform.machine().lower()
        arch = _ARCH_ALIASES.get(machine, machine) or "unknown"
        return Target(isa=_host_isa(arch), num_cores=usable_cores(), arch=arch, native=True)


def _parse_cuda(text: str, words: list[str]) -> Target:
    options: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or key not in ("-arch", "-shared_memory") or key in options:
            raise TargetError(f"unexpected or repeated option {word!r} in target {text!r}; a cuda target takes "
                              "-arch=sm_XX and -shared_memory=BYTES, e.g. 'cuda -arch=sm_90 -shared_memory=96K'")
        options[key] = value
    shared = 0
    if "-shared_memory" in options:
        try:
            shared = _parse_size(options["-shared_memory"])
        except ValueError:
            raise TargetError(f"-shared_memory must be a byte count such as 98304 or 96K in {text!r}") from None
    return Target.cuda(options.get("-arch", "sm_90"), shared)


@functools.cache
def _gpu_limits(arch: str, shared_memory: int) -> GpuLimits:
    return GpuLimits(shared_memory_per_block=shared_memory or 48 << 10,
                     max_shared_memory_per_block=_OPT_IN_SHARED.get(arch, 48 << 10), num_sms=_SMS.get(arch, 132))


#: bytes of a cache line on the CPUs targeted (x86-64, and the Arm cores of Neoverse and Graviton)
CACHE_LINE = 64


@dataclass(frozen=True, slots=True)
class CacheSizes:
    """Per-core L1 data and L2 cache, and the shared last-level cache, in bytes."""

    l1d: int
    l2: int
    l3: int


_DEFAULT_CACHES = {ISA.AVX512: CacheSizes(48 << 10, 1 << 20, 32 << 20),
                   ISA.AVX2: CacheSizes(32 << 10, 512 << 10, 32 << 20),
                   ISA.NEON: CacheSizes(64 << 10, 1 << 20, 32 << 20),
                   ISA.SCALAR: CacheSizes(32 << 10, 256 << 10, 8 << 20)}


@functools.cache
def _host_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> CacheSizes | None:
    """Cache sizes of CPU 0 from sysfs (None where it does not say)."""
    sizes: dict[str, int] = {}
    try:
        entries = sorted(root.glob("index*"))
        for d in entries:
            kind = (d / "type").read_text().strip()
            level = (d / "level").read_text().strip()
            if kind == "Instruction":
                continue
            sizes[f"l{level}"] = _parse_size((d / "size").read_text().strip())
    except (OSError, ValueError):
        return None
    if not {"l1", "l2"} <= sizes.keys():
        return None
    return CacheSizes(sizes["l1"], sizes["l2"], sizes.get("l3", sizes["l2"]))


def _parse_size(text: str) -> int:
    """``"48K"`` -> 49152 (sysfs cache sizes)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text)


def _host_isa(arch: str) -> ISA:
    if arch == "aarch64":
        return ISA.NEON
    if arch != "x86_64":
        return ISA.SCALAR
    flags = cpu_flags()
    if "avx512f" in flags:
        return ISA.AVX512
    if {"avx2", "fma"} <= flags:
        return ISA.AVX2
    return ISA.SCALAR


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
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

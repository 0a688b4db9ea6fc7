"""Cap the ISA a peer library sees in this process: CPUID answers as on a machine of a narrower ISA.

Libraries that choose their kernels from CPUID have no switch for it (onnxruntime's MLAS); others have one
(``peers.ISA_CAPS``: ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA...), but capping CPUID gives every library of the
process the same view: that of an AVX2 machine, say, when tensortune's AVX2 code is compared with them on an
AVX-512 one. It uses Linux's CPUID faulting (``cpuid_cap.c``): x86-64 only, and only where the CPU (or the
hypervisor) has it; ``cpuid_cap_problem`` says why not elsewhere. The cap must be set before the library is
imported (it reads CPUID once), holds for this thread and the threads it starts afterwards, and ends at exec.
It answers CPUID from a SIGSEGV handler that passes every other fault to the handler installed before it (Python's
``faulthandler`` included); a SIGSEGV handler installed *after* the cap replaces it, and the next CPUID then ends
the process, so enable ``faulthandler`` before capping, not after.

A peer's child process sets it from its environment (``ENV_VAR``, written by ``peers.peer_environment``), with
``cap_from_environment`` called before the peer's import.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import sys
from importlib import resources

from ..errors import TensortuneError
from ..target import ISA, cpu_flags

#: environment variable naming the ISA a peer's child process caps its CPUID to
ENV_VAR = "TENSORTUNE_CPUID_ISA"


class CpuidCapError(TensortuneError, RuntimeError):
    """CPUID cannot be capped on this machine (not x86-64 Linux, or no CPUID faulting)."""


def _bits(*positions: int) -> int:
    return sum(1 << p for p in positions)


# Feature bits cleared for each cap: (leaf 1 ECX, leaf 7.0 EBX, leaf 7.0 ECX, leaf 7.0 EDX, leaf 7.1 EAX).
# AVX-512: F DQ IFMA PF ER CD BW VL; VBMI VBMI2 VNNI BITALG VPOPCNTDQ; 4VNNIW 4FMAPS VP2INTERSECT FP16; BF16.
_AVX512 = (0, _bits(16, 17, 21, 26, 27, 28, 30, 31), _bits(1, 6, 11, 12, 14), _bits(2, 3, 8, 23), _bits(5))
# AVX, FMA, F16C and AVX2, AVX-VNNI too for a machine of SSE4 at most.
_AVX = (_bits(12, 28, 29), _bits(5), 0, 0, _bits(4))
MASKS = {ISA.AVX2: _AVX512, ISA.SCALAR: tuple(a | b for a, b in zip(_AVX512, _AVX))}


@functools.lru_cache(maxsize=1)
def _library() -> ctypes.CDLL:
    from ..runtime.compiler import compile_shared, load_library
    from ..target import Target

    source = resources.files(__package__).joinpath("cpuid_cap.c").read_text()
    lib = load_library(compile_shared(source, Target.host()))
    lib.tt_cpuid_cap.argtypes = [ctypes.c_uint] * 5
    lib.tt_cpuid_cap.restype = ctypes.c_int
    lib.tt_cpuid_emulated.restype = ctypes.c_ulong
    lib.tt_cpuid_query.argtypes = [ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_uint)]
    lib.tt_cpuid_query.restype = None
    return lib


def cpuid_cap_problem() -> str | None:
    """Why CPUID cannot be capped in this process, or None when it can."""
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        return f"CPUID capping needs x86-64 Linux (this is {platform.machine()} {sys.platform})"
    if "cpuid_fault" not in cpu_flags():
        return "this CPU (or its hypervisor) has no CPUID faulting, which CPUID capping needs"
    return None


def cap_cpuid(isa: ISA) -> None:
    """From now on CPUID in this thread (and the threads it starts) reports no feature beyond ``isa``
    (``ISA.AVX2`` or ``ISA.SCALAR``, i.e. SSE4). Raises ``CpuidCapError`` when this machine cannot."""
    if isa not in MASKS:
        raise CpuidCapError(f"CPUID can be capped to {', '.join(i.value for i in MASKS)}, not {isa.value}")
    problem = cpuid_cap_problem()
    if problem:
        raise CpuidCapError(problem)
    if _library().tt_cpuid_cap(*MASKS[isa]) != 0:
        raise CpuidCapError("the kernel refused CPUID faulting (arch_prctl ARCH_SET_CPUID)")


def cpuid(leaf: int, sub: int = 0) -> tuple[int, int, int, int]:
    """(eax, ebx, ecx, edx) of CPUID ``leaf``.``sub`` as this thread sees it: capped after ``cap_cpuid``."""
    out = (ctypes.c_uint * 4)()
    _library().tt_cpuid_query(leaf, sub, out)
    return tuple(out)


def emulated_count() -> int:
    """How many CPUID instructions the cap has answered in this process (0 before ``cap_cpuid``)."""
    return int(_library().tt_cpuid_emulated()) if _library.cache_info().currsize else 0


def cap_from_environment() -> ISA | None:
    """Cap CPUID to the ISA named by ``TENSORTUNE_CPUID_ISA`` when it is set (in a peer's child process);
    the ISA, or None when it is not set."""
    name = os.environ.get(ENV_VAR)
    if not name:
        return None
    try:
        isa = ISA(name)
    except ValueError:
        raise CpuidCapError(f"{ENV_VAR}={name!r} names no ISA; use one of {', '.join(i.value for i in MASKS)}") \
            from None
    cap_cpuid(isa)
    return isa


__all__ = ["ENV_VAR", "CpuidCapError", "cap_cpuid", "cap_from_environment", "cpuid", "cpuid_cap_problem",
           "emulated_count"]

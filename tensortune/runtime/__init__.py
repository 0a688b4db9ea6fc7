"""Runtime: targets, the C compiler and its cache, and callable compiled kernels."""
from .compiler import Compiler, cache_key, compile_shared, find_compiler, load_library
from .module import ArgSpec, KernelRuntimeError, Module, TimingResult
from .target import ISA, Target, TargetError

__all__ = [
    "ArgSpec",
    "Compiler",
    "ISA",
    "KernelRuntimeError",
    "Module",
    "Target",
    "TargetError",
    "TimingResult",
    "cache_key",
    "compile_shared",
    "find_compiler",
    "load_library",
]

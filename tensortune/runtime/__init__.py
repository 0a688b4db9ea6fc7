"""Runtime: the C compiler and its cache, loading compiled kernels, calling and timing them."""
from .compiler import Compiler, c_flags, cache_key, compile_shared, find_compiler, load_library
from .module import ArgSpec, KernelRuntimeError, Module, TimingResult

__all__ = ["ArgSpec", "Compiler", "KernelRuntimeError", "Module", "TimingResult", "c_flags", "cache_key",
           "compile_shared", "find_compiler", "load_library"]

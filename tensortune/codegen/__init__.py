"""Code generation: loop IR -> C source, or CUDA C source."""
from .c import codegen_c, codegen_c_unit
from .cuda import codegen_cuda

__all__ = ["codegen_c", "codegen_c_unit", "codegen_cuda"]

"""Code generation: loop IR -> C source."""
from .c import codegen_c, codegen_c_unit

__all__ = ["codegen_c", "codegen_c_unit"]

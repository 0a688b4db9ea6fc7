"""Code generation: loop IR -> C source."""
from .c import codegen_c

__all__ = ["codegen_c"]

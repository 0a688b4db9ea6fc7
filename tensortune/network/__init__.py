"""Whole networks compiled into one module: kernels per graph node, memory planning, one native entry point."""
from .compile_model import compile, optimized_graph
from .module import ExportError, NetworkLoadError, NetworkModule, load
from .refine import RefineResult, refine

__all__ = ["ExportError", "NetworkLoadError", "NetworkModule", "compile", "load", "optimized_graph", "refine",
           "RefineResult"]

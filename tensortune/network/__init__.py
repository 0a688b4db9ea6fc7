"""Whole networks compiled into one module: kernels per graph node, memory planning, one native entry point."""
from .compile_model import compile, optimized_graph
from .module import ExportError, NetworkLoadError, NetworkModule, load
from .profiling import NetworkProfile, profile_network
from .refine import RefineResult, refine

__all__ = ["ExportError", "NetworkLoadError", "NetworkModule", "NetworkProfile", "compile", "load", "optimized_graph",
           "profile_network", "refine", "RefineResult"]

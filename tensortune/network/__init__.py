"""Whole networks compiled into one module: kernels per graph node, memory planning, one native entry point."""
from .buckets import BucketedModule, BucketError, compile_buckets, load
from .compile_model import compile, optimized_graph
from .module import ExportError, NetworkLoadError, NetworkModule
from .profiling import NetworkProfile, profile_network
from .refine import RefineResult, refine

__all__ = ["BucketedModule", "BucketError", "ExportError", "NetworkLoadError", "NetworkModule", "NetworkProfile",
           "compile", "compile_buckets", "load", "optimized_graph", "profile_network", "refine", "RefineResult"]

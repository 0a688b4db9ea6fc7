"""Whole networks compiled into one module: kernels per graph node, memory planning, one native entry point."""

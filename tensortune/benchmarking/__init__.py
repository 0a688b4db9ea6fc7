"""Comparing tuned kernels with their baseline and with other libraries (``tensortune bench``, ``benchmarks/``).

``peers``: the libraries a kernel is compared with, timed in a child process; ``compare``: a tuned
config against the default schedule and the peers. Only the command line and the benchmark scripts
use this package; the compiler and the tuner never import it.
"""

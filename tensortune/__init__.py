"""tensortune: declare tensor operators, schedule them, generate C, and tune them."""

__version__ = "0.1.0"

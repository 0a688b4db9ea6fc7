"""Lowering: schedule -> loop IR, through named pure passes."""
from .lower import PASSES, lower

__all__ = ["PASSES", "lower"]

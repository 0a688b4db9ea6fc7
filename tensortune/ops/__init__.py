"""Operators with FLOP counts, numpy references and default schedules."""
from .conv import conv2d_nchw, depthwise_conv2d_nchw, pad_nchw
from .matmul import dense, matmul
from .operator import Operator

__all__ = ["Operator", "conv2d_nchw", "dense", "depthwise_conv2d_nchw", "matmul", "pad_nchw"]

"""Operators with FLOP counts, numpy references and default schedules."""
from .conv import conv2d_nchw, depthwise_conv2d_nchw
from .conv_packed import (block_choices, conv2d_nchwc, conv2d_nchwc_packed, conv2d_spatial_pack, default_block,
                          depthwise_conv2d_nchwc, group_block_choices, grouped_blocks, packed_blocks)
from .matmul import dense, matmul, matmul_nn
from .operator import Operator, OperatorError, Part
from .pad import pad_nchw
from .winograd import conv2d_winograd_nchw, conv2d_winograd_nchwc

__all__ = ["Operator", "OperatorError", "Part", "block_choices", "conv2d_nchw", "conv2d_nchwc", "conv2d_nchwc_packed",
           "conv2d_spatial_pack", "conv2d_winograd_nchw", "conv2d_winograd_nchwc", "default_block", "dense",
           "depthwise_conv2d_nchw", "depthwise_conv2d_nchwc", "group_block_choices", "grouped_blocks", "matmul",
           "matmul_nn", "packed_blocks", "pad_nchw"]

"""Operators with FLOP counts, numpy references and default schedules."""
from .batch_matmul import batch_matmul
from .conv import conv2d_nchw, depthwise_conv2d_nchw
from .conv_transpose import conv2d_transpose_nchw
from .conv_packed import (block_choices, conv2d_nchwc, conv2d_nchwc_packed, conv2d_spatial_pack, default_block,
                          depthwise_conv2d_nchwc, group_block_choices, grouped_blocks, packed_blocks)
from .matmul import dense, matmul, matmul_nn
from .normalize import layer_norm, softmax
from .operator import Operator, OperatorError, Part
from .pad import pad_nchw
from .winograd import conv2d_winograd_nchw, conv2d_winograd_nchwc

__all__ = ["Operator", "OperatorError", "Part", "batch_matmul", "block_choices", "conv2d_nchw", "conv2d_nchwc",
           "conv2d_nchwc_packed", "conv2d_transpose_nchw", "layer_norm", "softmax",
           "conv2d_spatial_pack", "conv2d_winograd_nchw", "conv2d_winograd_nchwc", "default_block", "dense",
           "depthwise_conv2d_nchw", "depthwise_conv2d_nchwc", "group_block_choices", "grouped_blocks", "matmul",
           "matmul_nn", "packed_blocks", "pad_nchw"]

"""Template-free tasks: each workload kind's plain declaration, scheduled by the sketch its computation yields.

``auto_<operator>`` (``auto_matmul``, ``auto_conv2d``, ``auto_depthwise_conv2d``) declares the operator as written
(row-major matrices, NCHW images: no layout chosen by hand) and hands it to ``sketch.schedule_sketch``, which derives
the schedule's structure and its knobs from the computation itself (``tensortune tune OPERATOR --search auto``).
"""
from __future__ import annotations

from ...ops import Operator, conv2d_nchw, depthwise_conv2d_nchw, matmul_nn
from ..sketch import schedule_sketch
from ..task import template
from ..workload import Conv2d, DepthwiseConv2d, Matmul

#: the template-free template of each workload kind, by operator
AUTO_TEMPLATES = {"matmul": "auto_matmul", "conv2d": "auto_conv2d", "depthwise_conv2d": "auto_depthwise_conv2d"}


def _sketched(cfg, op: Operator):
    return schedule_sketch(cfg, op.output), op


@template("auto_matmul", workload=Matmul)
def auto_matmul_template(cfg, M: int, N: int, K: int, dtype: str = "float32", bias: bool = False,
                         relu: bool = False, transpose_b: bool = False):
    """Matmul with no template: the sketch of its computation"""
    return _sketched(cfg, matmul_nn(M, N, K, dtype, bias=bias, relu=relu, transpose_b=transpose_b))


@template("auto_conv2d", workload=Conv2d, layout="NCHW")
def auto_conv2d_template(cfg, N: int, C: int, H: int, W: int, O: int, K: int, stride: int = 1,  # noqa: E741
                         pad: int = 0, dtype: str = "float32", groups: int = 1):
    """NCHW convolution (grouped too) with no template: the sketch of its computation"""
    return _sketched(cfg, conv2d_nchw(N, C, H, W, O, K, K, stride, pad, dtype, groups=groups))


@template("auto_depthwise_conv2d", workload=DepthwiseConv2d, layout="NCHW")
def auto_depthwise_conv2d_template(cfg, N: int, C: int, H: int, W: int, K: int, stride: int = 1, pad: int = 0,
                                   dtype: str = "float32"):
    """NCHW depthwise convolution with no template: the sketch of its computation"""
    return _sketched(cfg, depthwise_conv2d_nchw(N, C, H, W, K, K, stride, pad, dtype))

"""Template-free tasks: each workload kind's plain declaration, scheduled by the sketch its computation yields.

``auto_<operator>`` (``auto_matmul``, ``auto_conv2d``, ``auto_depthwise_conv2d``; and for the operators no template
computes, ``auto_batch_matmul``, ``auto_conv2d_transpose``, ``auto_softmax``, ``auto_layer_norm``) declares the
operator as written
(row-major matrices, NCHW images: no layout chosen by hand) and hands it to ``sketch.schedule_sketch``, which derives
the schedule's structure and its knobs from the computation itself (``tensortune tune OPERATOR --search auto``).

A network's fused node is tuned as the expression it computes (an ``Expression`` workload: the text of its DAG and
of its default schedule): ``auto_expression`` sketches it, ``expression_default`` is its untuned kernel (one config:
the default schedule replayed), which the network's tuner measures too, so that a sketch is applied only where it
beat the default.
"""
from __future__ import annotations

from ...ops.expression import expression
from ...ops import (Operator, batch_matmul, conv2d_nchw, conv2d_transpose_nchw, depthwise_conv2d_nchw, layer_norm,
                    matmul_nn, softmax)
from ..sketch import schedule_sketch
from ..task import template
from ..workload import BatchMatmul, Conv2d, ConvTranspose2d, DepthwiseConv2d, Expression, LayerNorm, Matmul, Softmax

#: the template-free template of each workload kind, by operator
AUTO_TEMPLATES = {"matmul": "auto_matmul", "conv2d": "auto_conv2d", "depthwise_conv2d": "auto_depthwise_conv2d",
                  "batch_matmul": "auto_batch_matmul", "conv2d_transpose": "auto_conv2d_transpose",
                  "softmax": "auto_softmax", "layer_norm": "auto_layer_norm", "expression": "auto_expression"}


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


# Operators no template computes: the template-free search is their default.

@template("auto_batch_matmul", workload=BatchMatmul, default=True)
def auto_batch_matmul_template(cfg, batch: int, M: int, N: int, K: int, dtype: str = "float32",
                               transpose_b: bool = False):
    """Batched matmul: the sketch of its computation"""
    return _sketched(cfg, batch_matmul(batch, M, N, K, dtype, transpose_b))


@template("auto_conv2d_transpose", workload=ConvTranspose2d, layout="NCHW", default=True)
def auto_conv2d_transpose_template(cfg, N: int, C: int, H: int, W: int, O: int, K: int,  # noqa: E741
                                   stride: int = 1, pad: int = 0, dtype: str = "float32", output_padding: int = 0):
    """NCHW transposed convolution: the sketch of its computation"""
    return _sketched(cfg, conv2d_transpose_nchw(N, C, H, W, O, K, stride, pad, dtype, output_padding))


@template("auto_softmax", workload=Softmax, default=True)
def auto_softmax_template(cfg, M: int, N: int, dtype: str = "float32"):
    """Softmax along rows: the sketch of its computation"""
    return _sketched(cfg, softmax(M, N, dtype))


@template("auto_layer_norm", workload=LayerNorm, default=True)
def auto_layer_norm_template(cfg, M: int, N: int, dtype: str = "float32"):
    """Layer normalization along rows: the sketch of its computation"""
    return _sketched(cfg, layer_norm(M, N, dtype))


@template("auto_expression", workload=Expression, default=True)
def auto_expression_template(cfg, name: str, dag: str, schedule: str = ""):
    """A computation given as its tensor-expression DAG (a network's fused node): the sketch of it"""
    return _sketched(cfg, expression(name, dag, schedule))


@template("expression_default", workload=Expression)
def expression_default_template(cfg, name: str, dag: str, schedule: str = ""):
    """A computation given as its tensor-expression DAG, with its default schedule (one config)"""
    op = expression(name, dag, schedule)
    return op.default_schedule(cfg.target), op

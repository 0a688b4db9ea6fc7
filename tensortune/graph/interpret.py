"""A numpy reference executor of the graph IR: the meaning of every operator, independent of code generation.

Tests run a graph here before and after each pass (a pass must not change results), and constant folding
evaluates nodes with ``evaluate``. Layouts change where elements are stored, not what they are, so this
executor ignores them.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np

from .errors import GraphError
from .ir import Graph
from .ops import (BatchNorm, Binary, BinaryFn, Cast, Concat, Conv, Dense, EpilogueStep, Gather, Identity, LRN,
                  Math, MatMul, Op, Pad, Pool, PoolKind, Relayout, Reshape, Slice, Softmax, TensorType, Transpose,
                  Unary, binary_formula, conv_out, unary_formula)


def interpret(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``inputs`` (by input name); returns its outputs by name."""
    env: dict[str, np.ndarray] = dict(graph.constants)
    for name in graph.inputs:
        if name not in inputs:
            raise GraphError(f"interpret: no array for graph input '{name}'")
        a = np.asarray(inputs[name])
        if a.shape != graph.values[name].shape:
            raise GraphError(f"interpret: input '{name}' has shape {a.shape}, expected {graph.values[name].shape}")
        env[name] = a
    for node in graph.nodes:
        results = evaluate(node.op, [env[i] for i in node.inputs])
        for o, r in zip(node.outputs, results):
            env[o] = np.asarray(r).astype(graph.values[o].dtype, copy=False)
    return {o: env[o] for o in graph.outputs}


def evaluate(op: Op, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The outputs of ``op`` applied to ``args``."""
    fn = _EVAL.get(type(op))
    if fn is None:  # pragma: no cover - every operator kind has an entry
        raise AssertionError(f"interpret: no rule for {op.kind}")
    out = fn(op, *args)
    return list(out) if isinstance(out, (list, tuple)) else [out]


# ------------------------------------------------------------------------------------------- elementwise

class NumpyMath(Math):
    """Numpy functions on arrays of one dtype (constants take that dtype)."""

    def __init__(self, dtype: np.dtype):
        self.dtype = np.dtype(dtype)

    def const(self, value: float):
        return self.dtype.type(value)

    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    exp = staticmethod(np.exp)
    tanh = staticmethod(np.tanh)


def unary(op: Unary, x: np.ndarray) -> np.ndarray:
    return np.asarray(unary_formula(op, x, NumpyMath(x.dtype)), x.dtype)


def binary(op: Binary, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if op.fn is BinaryFn.DIV and not np.issubdtype(a.dtype, np.floating):
        return _int_div(a, b)
    return binary_formula(op, a, b, NumpyMath(np.result_type(a, b)))


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ONNX integer division truncates toward zero."""
    return (np.trunc(a / b)).astype(np.result_type(a, b))


def apply_epilogue(steps: Sequence[EpilogueStep], acc: np.ndarray, operands: Sequence[np.ndarray]) -> np.ndarray:
    """The fused steps after a convolution or dense layer, each binary step taking the next operand."""
    rest = iter(operands)
    for step in steps:
        if isinstance(step.op, Unary):
            acc = unary(step.op, acc)
        else:
            other = next(rest)
            acc = binary(step.op, other, acc) if step.operand_left else binary(step.op, acc, other)
        acc = acc.astype(np.float32, copy=False) if acc.dtype == np.float64 else acc
    return acc


# ------------------------------------------------------------------------------------------- windows

def _windows(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int],
             out_hw: tuple[int, int]) -> np.ndarray:
    """``[N, C, OH, OW, KH, KW]`` view of the (already padded) input's windows."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    win = np.lib.stride_tricks.sliding_window_view(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw]
    return win[:, :, :out_hw[0], :out_hw[1]]


def conv2d(op: Conv, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The convolution of ``op`` without bias and epilogue."""
    t, l, b, r = op.pads
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    o, cg, kh, kw = w.shape
    oh = conv_out(x.shape[2], kh, op.strides[0], t, b, op.dilations[0], op)
    ow = conv_out(x.shape[3], kw, op.strides[1], l, r, op.dilations[1], op)
    win = _windows(xp, (kh, kw), op.strides, op.dilations, (oh, ow))
    g = op.groups
    og = o // g
    parts = [np.einsum("ncyxhw,ochw->noyx", win[:, k * cg:(k + 1) * cg], w[k * og:(k + 1) * og], optimize=True)
             for k in range(g)]
    return np.concatenate(parts, axis=1).astype(x.dtype, copy=False)


def _type(a: np.ndarray) -> TensorType:
    return TensorType(a.shape, a.dtype.name)


def _conv(op: Conv, x: np.ndarray, w: np.ndarray, *rest: np.ndarray) -> np.ndarray:
    y = conv2d(op, x, w)
    if op.has_bias:
        y = y + rest[0][None, :, None, None]
    return apply_epilogue(op.epilogue, y, rest[op.num_base_inputs - 2:])


def _dense(op: Dense, x: np.ndarray, w: np.ndarray, *rest: np.ndarray) -> np.ndarray:
    y = x @ w.T
    if op.has_bias:
        y = y + rest[0]
    return apply_epilogue(op.epilogue, y, rest[op.num_base_inputs - 2:])


def pool_divisor(op: Pool, h: int, w: int, out_hw: tuple[int, int]) -> np.ndarray:
    """``[OH, OW]``: how many elements each average-pooling window divides by (ONNX's rule: the padded
    positions count with ``count_include_pad``; positions past the padding never count)."""
    t, l, b, r = op.pads
    inside = np.zeros((1, 1, h + t + b, w + l + r), np.float64)
    if op.count_include_pad:
        inside[...] = 1
    else:
        inside[:, :, t:t + h, l:l + w] = 1
    extra_h = max(0, (out_hw[0] - 1) * op.strides[0] + op.dilations[0] * (op.kernel[0] - 1) + 1 - inside.shape[2])
    extra_w = max(0, (out_hw[1] - 1) * op.strides[1] + op.dilations[1] * (op.kernel[1] - 1) + 1 - inside.shape[3])
    inside = np.pad(inside, ((0, 0), (0, 0), (0, extra_h), (0, extra_w)))
    return _windows(inside, op.kernel, op.strides, op.dilations, out_hw).sum(axis=(-1, -2))[0, 0]


def _pool(op: Pool, x: np.ndarray) -> np.ndarray:
    (out,) = op.infer([_type(x)])
    oh, ow = out.shape[2:]
    t, l, b, r = op.pads
    eh = max(0, (oh - 1) * op.strides[0] + op.dilations[0] * (op.kernel[0] - 1) + 1 - (x.shape[2] + t + b))
    ew = max(0, (ow - 1) * op.strides[1] + op.dilations[1] * (op.kernel[1] - 1) + 1 - (x.shape[3] + l + r))
    fill = -np.inf if op.mode is PoolKind.MAX else 0
    xp = np.pad(x, ((0, 0), (0, 0), (t, b + eh), (l, r + ew)), constant_values=fill)
    win = _windows(xp, op.kernel, op.strides, op.dilations, (oh, ow))
    if op.mode is PoolKind.MAX:
        return win.max(axis=(-1, -2))
    total = win.sum(axis=(-1, -2), dtype=np.float64)
    return (total / pool_divisor(op, x.shape[2], x.shape[3], (oh, ow))).astype(x.dtype)


def _lrn(op: LRN, x: np.ndarray) -> np.ndarray:
    c = x.shape[1]
    lo, hi = (op.size - 1) // 2, -(-(op.size - 1) // 2)
    sq = np.pad(x.astype(np.float64) ** 2, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    total = sum(sq[:, k:k + c] for k in range(op.size))
    return (x / (op.bias + op.alpha / op.size * total) ** op.beta).astype(x.dtype)


def _softmax(op: Softmax, x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=op.axis, keepdims=True))
    return (e / e.sum(axis=op.axis, keepdims=True)).astype(x.dtype)


def _batchnorm(op: BatchNorm, x, scale, bias, mean, var) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    k = scale / np.sqrt(var + np.asarray(op.epsilon, var.dtype))
    return (x * k.reshape(shape) + (bias - mean * k).reshape(shape)).astype(x.dtype)


def _slice(op: Slice, x: np.ndarray) -> np.ndarray:
    index = []
    for start, step, size in zip(op.starts, op.steps, op.sizes):
        stop = start + size * step
        index.append(slice(start, stop if stop >= 0 else None, step))
    return x[tuple(index)]


def _pad(op: Pad, x: np.ndarray) -> np.ndarray:
    r = x.ndim
    widths = [(op.pads[i], op.pads[i + r]) for i in range(r)]
    if op.mode.value == "constant":
        return np.pad(x, widths, constant_values=np.asarray(op.value, x.dtype))
    return np.pad(x, widths, mode=op.mode.value)


_EVAL: dict[type, Callable[..., np.ndarray | list[np.ndarray]]] = {
    Unary: unary,
    Binary: binary,
    Conv: _conv,
    Dense: _dense,
    BatchNorm: _batchnorm,
    MatMul: lambda op, a, b: np.matmul(a, b),
    Pool: _pool,
    LRN: _lrn,
    Softmax: _softmax,
    Reshape: lambda op, x: x.reshape(op.shape),
    Identity: lambda op, x: x,
    Relayout: lambda op, x: x,
    Transpose: lambda op, x: np.transpose(x, op.perm),
    Concat: lambda op, *xs: np.concatenate(xs, axis=op.axis),
    Slice: _slice,
    Pad: _pad,
    Gather: lambda op, data, idx: np.take(data, idx, axis=op.axis),
    Cast: lambda op, x: x.astype(op.to),
}

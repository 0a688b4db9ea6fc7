"""Recurrent layers (ONNX LSTM, GRU and RNN) imported as the computation they unroll to, with no operator of their
own: one dense layer projects the input of every time step at once, then each step is a dense layer of the hidden
state (the projection of its step added as its epilogue) and the cell's gate math, whose slices, activations and
products the fusion passes make a few kernels. The time steps are the input's static sequence length.

Supported: every opset (7, 14 with ``layout``, up to tensortune's newest), forward, reverse and bidirectional
layers, biases, initial states (constants or run-time inputs), LSTM peepholes, ``clip``, GRU's
``linear_before_reset``, and constant ``sequence_lens`` (steps past a sequence's length keep its state and write
zeros). Rejected with the reason: weights or sequence lengths computed at run time, ``input_forget``, activation
functions other than Sigmoid, Tanh, Relu, Softplus, HardSigmoid, LeakyRelu, Elu and Softsign (Affine,
ThresholdedRelu and ScaledTanh), and activation parameters.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..graph.op import Op
from .elementwise import Add, Clip, HardSigmoid, LeakyRelu, Mul, Relu, Sigmoid, Sub, Tanh
from .matmul import MatMul
from .movement import Concat, Slice, Transpose
from .onnx_convert import ImportContext, OnnxNode, Reject, converter
from .reshape import Reshape
from .softplus import Softplus
from .unary_math import Elu, Softsign

#: activation functions by their ONNX names (no parameters: ``activation_alpha``/``beta`` are rejected)
ACTIVATIONS: dict[str, type[Op]] = {"Sigmoid": Sigmoid, "Tanh": Tanh, "Relu": Relu, "Softplus": Softplus,
                                    "HardSigmoid": HardSigmoid, "LeakyRelu": LeakyRelu, "Elu": Elu,
                                    "Softsign": Softsign}


@dataclass(frozen=True)
class Cell:
    """What differs between the three layers: gates per step, default activations, attributes of their own."""

    gates: int
    activations: tuple[str, ...]
    attrs: tuple[str, ...] = ()


CELLS = {"LSTM": Cell(4, ("Sigmoid", "Tanh", "Tanh"), ("input_forget",)),
         "GRU": Cell(3, ("Sigmoid", "Tanh"), ("linear_before_reset",)),
         "RNN": Cell(1, ("Tanh",))}
_ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "layout")


@dataclass
class _Emit:
    """Emits the nodes of one recurrent layer (names after the ONNX node's)."""

    ctx: ImportContext
    name: str
    count: int = field(default=0)

    def __call__(self, op: Op, *inputs: str, out: str | None = None) -> str:
        return self.ctx.emit(op, list(inputs), [out] if out else None, self.name)[0]

    def const(self, array: np.ndarray, hint: str) -> str:
        return self.ctx.constant(np.ascontiguousarray(array, dtype=np.float32), f"{self.name}_{hint}")

    def cols(self, x: str, start: int, n: int) -> str:
        rows, width = self.ctx.shape(x)
        return x if (start, n) == (0, width) else self(Slice((0, start), (1, 1), (rows, n)), x)

    def rows(self, x: str, start: int, n: int) -> str:
        rows, width = self.ctx.shape(x)
        return x if (start, n) == (0, rows) else self(Slice((start, 0), (1, 1), (n, width)), x)

    def reshape(self, x: str, shape, out: str | None = None) -> str:
        return self(Reshape(tuple(int(d) for d in shape)), x, out=out)

    def stack(self, parts: list[str], axis: int, out: str | None = None) -> str:
        """The values (already with a unit axis at ``axis``) concatenated along it."""
        if len(parts) == 1:
            return parts[0] if out is None else self(Reshape(self.ctx.shape(parts[0])), parts[0], out=out)
        return self(Concat(axis), *parts, out=out)


def _activations(node: OnnxNode, cell: Cell, directions: int) -> list[list[Op]]:
    """The activation operators per direction (f, g[, h])."""
    if node.attr("activation_alpha") is not None or node.attr("activation_beta") is not None:
        raise Reject("activation_alpha/activation_beta are not supported (activations take their defaults)")
    names = [a.decode() if isinstance(a, bytes) else a for a in node.attr("activations", ())]
    names = names or list(cell.activations) * directions
    if len(names) != len(cell.activations) * directions:
        raise Reject(f"activations {names}: {len(cell.activations)} per direction expected")
    unknown = [a for a in names if a not in ACTIVATIONS]
    if unknown:
        raise Reject(f"activation(s) {unknown} are not supported; supported: {', '.join(ACTIVATIONS)}")
    per = len(cell.activations)
    return [[ACTIVATIONS[a]() for a in names[d * per:(d + 1) * per]] for d in range(directions)]


@dataclass
class _Layer:
    """One direction's parameters and state, and what the cell math needs."""

    e: _Emit
    hidden: int
    batch: int
    w: np.ndarray          # [G*H, I]
    r: np.ndarray          # [G*H, H]
    wb: np.ndarray         # [G*H]
    rb: np.ndarray         # [G*H]
    acts: list[Op]
    clip: float | None
    peep: np.ndarray | None = None  # [3*H]: i, o, f

    def act(self, k: int, x: str, clip: bool = True) -> str:
        """Activation ``k`` of ``x``, clipped first (``clip``: gate inputs are, the LSTM's cell state is not, as in
        onnxruntime)."""
        if clip and self.clip is not None:
            x = self.e(Clip(-self.clip, self.clip), x)
        return self.e(self.acts[k], x)

    def recur(self, h: str, rows: slice, bias: np.ndarray | None = None) -> str:
        """``h @ R[rows].T`` (+ ``bias``): a dense layer of the hidden state."""
        y = self.e(MatMul(), h, self.e.const(self.r[rows].T, "R"))
        return y if bias is None or not bias.any() else self.e(Add(), y, self.e.const(bias, "Rb"))


def _lstm_step(layer: _Layer, x: str, h: str, c: str) -> tuple[str, str]:
    e, n = layer.e, layer.hidden
    g = e(Add(), layer.recur(h, slice(None)), x)  # gates i, o, f, c

    def gate(k: int, peep: str | None = None) -> str:
        pre = e.cols(g, k * n, n)
        if peep is not None:
            pre = e(Add(), pre, e(Mul(), peep, c))
        return pre

    peeps = [None] * 3 if layer.peep is None else [e.const(layer.peep[k * n:(k + 1) * n], "P") for k in range(3)]
    i = layer.act(0, gate(0, peeps[0]))
    f = layer.act(0, gate(2, peeps[2]))
    c_new = e(Add(), e(Mul(), f, c), e(Mul(), i, layer.act(1, gate(3))))
    o_pre = e.cols(g, n, n)
    if layer.peep is not None:
        o_pre = e(Add(), o_pre, e(Mul(), peeps[1], c_new))
    return e(Mul(), layer.act(0, o_pre), layer.act(2, c_new, clip=False)), c_new


def _gru_step(layer: _Layer, x: str, h: str, before_reset: bool) -> str:
    e, n = layer.e, layer.hidden
    if before_reset:  # r * (h @ Rh.T + Rbh): one dense layer for all three gates
        hr = layer.recur(h, slice(None), np.concatenate([np.zeros(2 * n, np.float32), layer.rb[2 * n:]]))
        z = layer.act(0, e(Add(), e.cols(x, 0, n), e.cols(hr, 0, n)))
        r = layer.act(0, e(Add(), e.cols(x, n, n), e.cols(hr, n, n)))
        hh = layer.act(1, e(Add(), e.cols(x, 2 * n, n), e(Mul(), r, e.cols(hr, 2 * n, n))))
    else:  # (r * h) @ Rh.T: the reset gate first
        hzr = layer.recur(h, slice(0, 2 * n))
        z = layer.act(0, e(Add(), e.cols(x, 0, n), e.cols(hzr, 0, n)))
        r = layer.act(0, e(Add(), e.cols(x, n, n), e.cols(hzr, n, n)))
        hh = layer.act(1, e(Add(), e.cols(x, 2 * n, n), layer.recur(e(Mul(), r, h), slice(2 * n, 3 * n))))
    return e(Add(), hh, e(Mul(), z, e(Sub(), h, hh)))  # (1 - z) * hh + z * h


def _initial(e: _Emit, ctx: ImportContext, value: str | None, d: int, batch: int, hidden: int, layout: int) -> str:
    """Direction ``d``'s initial state ``[batch, hidden]`` of ``value`` (``[dirs, batch, hidden]``, layout 1:
    ``[batch, dirs, hidden]``): zeros, a constant's slice or a run-time input's."""
    if value is None:
        return e.const(np.zeros((batch, hidden), np.float32), "zeros")
    static = ctx.static(value)
    if static is not None:
        return e.const(np.asarray(static)[:, d] if layout else np.asarray(static)[d], "init")
    start, size = ((0, d, 0), (batch, 1, hidden)) if layout else ((d, 0, 0), (1, batch, hidden))
    return e.reshape(e(Slice(start, (1, 1, 1), size), value), (batch, hidden))


def _convert(ctx: ImportContext, node: OnnxNode) -> None:
    kind = node.op_type
    cell = CELLS[kind]
    e = _Emit(ctx, node.name or kind)
    x = node.input(0)
    w, r = ctx.need_static(node, 1, "W"), ctx.need_static(node, 2, "R")
    b = ctx.need_static(node, 3, "B")
    lens = ctx.need_static(node, 4, "sequence_lens")
    layout = int(node.attr("layout", 0))
    if ctx.type(x).dtype != "float32":
        raise Reject(f"only float32 inputs are supported, got {ctx.type(x).dtype}")
    if layout:
        x = e(Transpose((1, 0, 2)), x)
    steps, batch, inputs = ctx.shape(x)
    direction = node.str_attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise Reject(f"direction {direction!r} is not forward, reverse or bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = int(node.attr("hidden_size", r.shape[-1]))
    g = cell.gates * hidden
    if w.shape != (dirs, g, inputs) or r.shape != (dirs, g, hidden) or (b is not None and b.shape != (dirs, 2 * g)):
        raise Reject(f"W {list(w.shape)}, R {list(r.shape)} and B do not fit {dirs} direction(s), hidden size "
                     f"{hidden} and input size {inputs}")
    if kind == "LSTM" and node.attr("input_forget", 0):
        raise Reject("input_forget=1 (coupled input and forget gates) is not supported")
    lens = None if lens is None else np.asarray(lens, np.int64).reshape(-1)
    if lens is not None and (lens.shape != (batch,) or lens.min() < 1 or lens.max() > steps):
        raise Reject(f"sequence_lens {lens.tolist()} must give each of the {batch} sequences 1 to {steps} steps")
    masked = lens is not None and bool((lens < steps).any())
    clip = node.attr("clip")
    acts = _activations(node, cell, dirs)
    b = np.zeros((dirs, 2 * g), np.float32) if b is None else np.asarray(b, np.float32)
    peep = ctx.need_static(node, 7, "P") if kind == "LSTM" else None
    flat = e.reshape(x, (steps * batch, inputs))
    ys, hs, cs = [], [], []
    for d in range(dirs):
        layer = _Layer(e, hidden, batch, np.asarray(w[d], np.float32), np.asarray(r[d], np.float32), b[d, :g],
                       b[d, g:], acts[d], None if clip is None else float(clip),
                       None if peep is None else np.asarray(peep, np.float32)[d])
        # the recurrent biases join the input projection's, but GRU's Rbh inside r * (...) with linear_before_reset
        bias = layer.wb + layer.rb
        if kind == "GRU" and node.attr("linear_before_reset", 0):
            bias[2 * hidden:] = layer.wb[2 * hidden:]
        proj = e(Add(), e(MatMul(), flat, e.const(layer.w.T, "W")), e.const(bias, "b"))
        h = _initial(e, ctx, node.input(5), d, batch, hidden, layout)
        c = _initial(e, ctx, node.input(6), d, batch, hidden, layout) if kind == "LSTM" else None
        out: dict[int, str] = {}
        order = range(steps) if (direction == "forward" or (direction == "bidirectional" and d == 0)) \
            else range(steps - 1, -1, -1)
        for t in order:
            xt = e.rows(proj, t * batch, batch)
            if kind == "LSTM":
                h_new, c_new = _lstm_step(layer, xt, h, c)
            elif kind == "GRU":
                h_new, c_new = _gru_step(layer, xt, h, bool(node.attr("linear_before_reset", 0))), None
            else:
                h_new, c_new = layer.act(0, e(Add(), layer.recur(h, slice(None)), xt)), None
            if masked:  # past a sequence's end: the state stays, the output is zero
                live = e.const((t < lens).astype(np.float32).reshape(batch, 1), "live")
                out[t] = e(Mul(), h_new, live)
                h = e(Add(), out[t], e(Mul(), h, e.const((t >= lens).astype(np.float32).reshape(batch, 1), "dead")))
                if c is not None:
                    c = e(Add(), e(Mul(), c_new, live), e(Mul(), c, e.const((t >= lens).astype(np.float32)
                                                                             .reshape(batch, 1), "dead")))
            else:
                out[t], h, c = h_new, h_new, c_new
        ys.append([out[t] for t in range(steps)])
        hs.append(h)
        cs.append(c)
    _outputs(e, node, ys, hs, cs, steps, batch, hidden, layout)


def _outputs(e: _Emit, node: OnnxNode, ys, hs, cs, steps: int, batch: int, hidden: int, layout: int) -> None:
    """Y ``[seq, dirs, batch, hidden]`` (layout 1: ``[batch, seq, dirs, hidden]``), Y_h and Y_c ``[dirs, batch,
    hidden]`` (``[batch, dirs, hidden]``), each only where the node names it."""
    names = list(node.outputs) + [""] * 3
    if names[0]:
        per_dir = [e.stack([e.reshape(y, (1, 1, batch, hidden)) for y in d], 0) for d in ys]
        if layout:
            e(Transpose((2, 0, 1, 3)), e.stack(per_dir, 1), out=names[0])
        else:
            e.stack(per_dir, 1, out=names[0])
    for name, states in ((names[1], hs), (names[2], cs)):
        if name and states[0] is not None:
            parts = [e.reshape(s, (1, batch, hidden)) for s in states]
            if layout:
                e(Transpose((1, 0, 2)), e.stack(parts, 0), out=name)
            else:
                e.stack(parts, 0, out=name)
        elif name:
            raise Reject("Y_c is an output of LSTM only")


for _kind, _cell in CELLS.items():
    converter(_kind, attrs=_ATTRS + _cell.attrs)(_convert)

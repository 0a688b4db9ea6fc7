"""LSTM, GRU and RNN layers imported as the dense layers and gate math they unroll to: every direction, layout,
bias, initial state, peephole, clip, reset variant and constant sequence length equals onnxruntime, interpreted and
compiled; what is not supported is rejected with its reason."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, note, settings, strategies as st

import tensortune.network as nw
from onnx_models import assert_close, model, node, ort_run, rand
from tensortune.frontend import import_onnx
from tensortune.graph import UnsupportedModelError, interpret

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _batch_first(a: np.ndarray, rank_of_y: bool = False) -> np.ndarray:
    """A time-major tensor in layout 1: x ``[T, B, I] -> [B, T, I]``, Y ``[T, D, B, H] -> [B, T, D, H]``, states
    ``[D, B, H] -> [B, D, H]``."""
    return a.transpose(2, 0, 1, 3) if rank_of_y else a.transpose(1, 0, 2)


@st.composite
def layers(draw):
    """A random layer: its time-major (layout 0) model, the same layer batch-first (layout 1, opset 14) or None,
    the time-major feeds."""
    kind = draw(st.sampled_from(sorted(GATES)))
    steps, batch, inputs, hidden = (draw(st.integers(1, 5)), draw(st.integers(1, 3)), draw(st.integers(1, 5)),
                                    draw(st.integers(1, 5)))
    direction = draw(st.sampled_from(["forward", "reverse", "bidirectional"]))
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[kind] * hidden
    seed = draw(st.integers(0, 1000))
    inits = {"W": rand((dirs, g, inputs), seed), "R": rand((dirs, g, hidden), seed + 1)}
    names = ["x", "W", "R", "B" if draw(st.booleans()) else ""]
    if names[3]:
        inits["B"] = rand((dirs, 2 * g), seed + 2)
    names.append("lens" if draw(st.booleans()) else "")  # some sequences shorter than the input
    if names[4]:
        inits["lens"] = np.array([draw(st.integers(1, steps)) for _ in range(batch)], np.int32)
    inputs_ = {"x": (steps, batch, inputs)}
    initial = draw(st.sampled_from(["none", "constant", "input"]))
    states = ["h0", "c0"] if kind == "LSTM" else ["h0"]
    for s in states:
        if initial == "constant":
            inits[s] = rand((dirs, batch, hidden), seed + 3)
        elif initial == "input":
            inputs_[s] = (dirs, batch, hidden)
    names += [s if initial != "none" else "" for s in states]
    if kind == "LSTM" and draw(st.booleans()):
        inits["P"] = rand((dirs, 3 * hidden), seed + 4)
        names.append("P")
    attrs = {"hidden_size": hidden, "direction": direction}
    if draw(st.booleans()):
        attrs["clip"] = draw(st.sampled_from([0.5, 2.0]))
    if kind == "GRU":
        attrs["linear_before_reset"] = draw(st.integers(0, 1))
    if kind == "RNN" and draw(st.booleans()):
        attrs["activations"] = [draw(st.sampled_from(["Relu", "Elu", "Softsign", "Sigmoid"]))] * dirs
    outputs = ["y", "y_h"] + (["y_c"] if kind == "LSTM" else [])
    wanted = [o for o in outputs if draw(st.booleans())] or ["y"]
    onnx_outputs = [o if o in wanted else "" for o in outputs]
    while not onnx_outputs[-1]:
        onnx_outputs.pop()
    while not names[-1]:
        names.pop()
    m = model([node(kind, names, onnx_outputs, **attrs)], inputs_, wanted, inits, opset=7)
    first = None
    if draw(st.booleans()):
        moved = {k: _batch_first(v) if k in states else v for k, v in inits.items()}
        first = model([node(kind, names, onnx_outputs, layout=1, **attrs)],
                      {k: tuple(_batch_first(np.empty(s)).shape) for k, s in inputs_.items()}, wanted, moved, opset=14)
    feeds = {k: rand(s, seed + 5 + i, -2, 2) for i, (k, s) in enumerate(inputs_.items())}
    return m, first, feeds


@settings(max_examples=40, deadline=None)
@given(layers())
def test_a_recurrent_layer_equals_onnxruntime(case):
    """Batch-first layers (onnxruntime runs none) against onnxruntime's time-major run of the same layer."""
    m, first, feeds = case
    note(f"{m.graph.node[0]}; initializers {[(i.name, list(i.dims)) for i in m.graph.initializer]}")
    expected = ort_run(m, feeds)
    got = interpret(import_onnx(m), feeds)
    compiled = nw.compile(m).run(feeds)
    for out, want in zip(m.graph.output, expected):
        assert_close(got[out.name], want, f"{out.name} interpreted")
        assert_close(compiled[out.name], want, f"{out.name} compiled")
    if first is not None:
        moved = nw.compile(first).run({k: _batch_first(v) for k, v in feeds.items()})
        for out, want in zip(m.graph.output, expected):
            assert_close(moved[out.name], _batch_first(want, want.ndim == 4), f"{out.name} batch-first")


def _lstm_language_model(steps: int, hidden: int, layers_: int = 2):
    """The AutoTVM paper's LSTM language model in small: stacked LSTMs over embedded tokens, then a decoder."""
    nodes, inits, x = [], {}, "x"
    for k in range(layers_):
        inputs = hidden
        inits |= {f"W{k}": rand((1, 4 * hidden, inputs), 10 * k), f"R{k}": rand((1, 4 * hidden, hidden), 10 * k + 1),
                  f"B{k}": rand((1, 8 * hidden), 10 * k + 2)}
        nodes += [node("LSTM", [x, f"W{k}", f"R{k}", f"B{k}"], [f"y{k}"], hidden_size=hidden),
                  node("Squeeze", [f"y{k}", "axis1"], [f"s{k}"])]
        x = f"s{k}"
    inits |= {"axis1": np.array([1], np.int64), "dec": rand((hidden, 50), 99)}
    nodes.append(node("MatMul", [x, "dec"], ["logits"]))
    return model(nodes, {"x": (steps, 1, hidden)}, ["logits"], inits)


def test_a_two_layer_lstm_language_model_compiles_and_matches():
    m = _lstm_language_model(steps=6, hidden=16)
    x = rand((6, 1, 16), 7)
    assert_close(nw.compile(m)(x), ort_run(m, {"x": x})[0])


@pytest.mark.parametrize("steps", [3, 24])
def test_the_unrolled_steps_store_each_weight_once(steps):
    """Every step's kernel packs the recurrent weights for itself; the network keeps one copy (by content), so its
    constants do not grow with the steps (they did 44-fold for a GRU of 100 steps, and each step read its own copy
    from memory: 3x slower than the same kernel alone)."""
    hidden = 32
    m = _lstm_language_model(steps=steps, hidden=hidden)
    module = nw.compile(m)
    weights = sum(a.nbytes for a in (np.zeros((4 * hidden, hidden), np.float32),) * 4) + hidden * 50 * 4
    assert module.manifest.constants_bytes < 2 * weights + 64 * 1024, module.manifest.constants_bytes
    x = rand((steps, 1, hidden), 7)
    assert_close(module(x), ort_run(m, {"x": x})[0])


def test_the_gate_math_of_a_step_fuses_into_few_kernels():
    """Per LSTM step: the hidden state's dense layer (the step's input projection its epilogue), then the cell
    state and the hidden state, each one fused kernel of the gates' slices, activations and products."""
    steps = 4
    m = _lstm_language_model(steps=steps, hidden=8, layers_=1)
    module = nw.compile(m)
    kinds = [k.kind for k in module.manifest.kernels]
    per_step = module.manifest.calls / steps
    assert per_step <= 6, (module.manifest.calls, kinds)


@pytest.mark.parametrize("attrs, inputs, message", [
    ({"input_forget": 1}, {}, "input_forget"),
    ({"activations": ["ScaledTanh", "Tanh", "Tanh"]}, {}, "ScaledTanh"),
    ({"activation_alpha": [0.5]}, {}, "activation_alpha"),
])
def test_unsupported_settings_are_rejected_with_their_reason(attrs, inputs, message):
    m = model([node("LSTM", ["x", "W", "R"], ["y"], hidden_size=2, **attrs)], {"x": (3, 1, 2)}, ["y"],
              {"W": rand((1, 8, 2), 1), "R": rand((1, 8, 2), 2)})
    with pytest.raises(UnsupportedModelError, match=message):
        import_onnx(m)


def test_run_time_weights_and_sequence_lengths_are_rejected():
    m = model([node("RNN", ["x", "W", "R", "", "lens"], ["y"], hidden_size=2)],
              {"x": (3, 1, 2), "W": (1, 2, 2), "lens": (1,)}, ["y"], {"R": rand((1, 2, 2), 2)},
              dtypes={"lens": "int32"})
    with pytest.raises(UnsupportedModelError) as info:
        import_onnx(m)
    assert "W" in str(info.value) and "run time" in str(info.value)
